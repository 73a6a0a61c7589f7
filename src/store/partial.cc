#include "store/partial.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include <nlohmann/json.hpp>

#include "util/file.h"

namespace weightcast {

bool PartialVersion::HoldsChunk(ChunkIndex chunk) const {
  return std::binary_search(chunks.begin(), chunks.end(), chunk);
}

bool PartialVersion::HoldsTensor(std::string_view name) const {
  return std::find(tensors.begin(), tensors.end(), name) != tensors.end();
}

std::string SerializePartial(const PartialVersion& partial) {
  nlohmann::json j;
  j["format"] = 1;
  j["patterns"] = partial.patterns;
  j["tensors"] = partial.tensors;
  nlohmann::json chunks = nlohmann::json::array();
  for (ChunkIndex c : partial.chunks) chunks.push_back(c.value());
  j["chunks"] = std::move(chunks);
  if (partial.payloads) j["payloads"] = true;
  return j.dump() + "\n";
}

Result<PartialVersion> ParsePartial(std::string_view text, const Manifest& manifest) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [](const std::string& what) { return Corrupt("partial version record: " + what); };
  if (!j.is_object()) return bad("not a JSON object");
  if (!j.contains("format") || j["format"] != 1) return bad("not format 1");
  PartialVersion out;
  auto strings = [&](const char* key, std::vector<std::string>& into) -> Status {
    if (!j.contains(key) || !j[key].is_array()) return bad(std::string("no '") + key + "' list");
    for (const nlohmann::json& s : j[key]) {
      if (!s.is_string()) return bad(std::string("'") + key + "' holds a non-string");
      into.push_back(s.get<std::string>());
    }
    return Status::Ok();
  };
  WC_RETURN_IF_ERROR(strings("patterns", out.patterns));
  WC_RETURN_IF_ERROR(strings("tensors", out.tensors));
  if (!j.contains("chunks") || !j["chunks"].is_array()) return bad("no 'chunks' list");
  for (const nlohmann::json& c : j["chunks"]) {
    if (!c.is_number_unsigned() || c.get<uint64_t>() >= manifest.chunk_count()) {
      return bad("chunk " + c.dump() + " is not one of the " +
                 std::to_string(manifest.chunk_count()) + " chunks of the version");
    }
    const ChunkIndex index(static_cast<uint32_t>(c.get<uint64_t>()));
    if (!out.chunks.empty() && !(out.chunks.back() < index)) return bad("chunks out of order");
    out.chunks.push_back(index);
  }
  if (j.contains("payloads")) {
    if (!j["payloads"].is_boolean()) return bad("'payloads' is not true or false");
    out.payloads = j["payloads"].get<bool>();
  }
  for (const std::string& name : out.tensors) {
    const bool known = std::any_of(manifest.tensors.begin(), manifest.tensors.end(),
                                   [&](const ManifestTensor& t) { return t.name == name; });
    if (!known) return bad("tensor '" + name + "' is not in the manifest");
  }
  return out;
}

Result<std::optional<PartialVersion>> ReadPartialFile(const std::filesystem::path& version_dir,
                                                      const Manifest& manifest) {
  const std::filesystem::path path = version_dir / std::string(kPartialFileName);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::optional<PartialVersion>();
    return ErrnoStatus("stat(" + path.string() + ")", errno);
  }
  WC_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto parsed = ParsePartial(text, manifest);
  if (!parsed.ok()) return parsed.status().WithContext(path.string());
  return std::optional<PartialVersion>(std::move(parsed).value());
}

}  // namespace weightcast
