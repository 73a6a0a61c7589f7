// What weightcast reads from outside about a model at an origin: a list file of URLs, an origin
// URL, a safetensors index fetched from the origin, and the origin objects a manifest records.
// Besides not crashing, an accepted entry must be safe to use: a relative path of named segments
// and an http(s) URL; an accepted index names only files; and the list parser refuses duplicate
// names.
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "format/safetensors.h"
#include "origin/listing.h"

namespace {

using namespace weightcast;

void CheckList(std::string_view text) {
  auto files = origin::ParseUrlList(text, "fuzz.txt");
  if (!files.ok()) {
    if (files.status().message().empty()) std::abort();
    return;
  }
  std::set<std::string> names;
  for (const origin::OriginFile& f : *files) {
    if (!origin::CheckFileName(f.name).ok() || !origin::IsHttpUrl(f.url)) std::abort();
    if (!names.insert(f.name).second) std::abort();
  }
}

void CheckUrl(std::string_view text) {
  auto spec = origin::ParseOriginUrl(text);
  if (!spec.ok()) return;
  for (const origin::OriginFile& f : spec->files) {
    if (!origin::CheckFileName(f.name).ok()) std::abort();
  }
  if (!spec->index_url.empty() && !origin::IsHttpUrl(spec->index_url)) std::abort();
}

void CheckObjects(std::string_view text) {
  auto objects = origin::ParseOriginObjects(text);
  if (!objects.ok()) return;
  for (const origin::OriginObject& o : *objects) {
    if (!origin::CheckFileName(o.name).ok() || !origin::IsHttpUrl(o.url)) std::abort();
  }
  // What was accepted encodes and parses back to the same objects.
  auto again = origin::ParseOriginObjects(origin::EncodeOriginObjects(*objects));
  if (!again.ok() || again->size() != objects->size()) std::abort();
}

void CheckIndex(std::string_view text) {
  auto map = ParseSafetensorsIndex(text, "fuzz.index.json");
  if (!map.ok()) {
    if (map.status().message().empty()) std::abort();
    return;
  }
  const std::vector<std::string> shards = IndexShards(*map);
  if (shards.size() > map->size()) std::abort();
  for (size_t i = 1; i < shards.size(); ++i) {
    if (!(shards[i - 1] < shards[i])) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  CheckList(text);
  CheckUrl(text);
  CheckIndex(text);
  CheckObjects(text);
  return 0;
}
