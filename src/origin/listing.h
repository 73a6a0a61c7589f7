// Which files make a model at an origin, from what `weightcast publish --from` names
// (docs/origin.md):
//   - a URL ending in ".safetensors": that one file;
//   - a URL ending in ".safetensors.index.json": the index and every shard its weight_map names,
//     each at the index's URL with the last path segment replaced (a Hugging Face repository's
//     ".../resolve/main/model.safetensors.index.json");
//   - a URL ending in "/": its "model.safetensors.index.json", as above;
//   - a local file (no scheme) listing one file per line, "NAME URL" or "URL" alone (NAME: the
//     URL's last path segment), '#' starting a comment: pre-signed object-store URLs, whose
//     names cannot be derived from one another.
// The parsing here is pure (no network): origin/model.h fetches what it names.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

namespace weightcast::origin {

struct OriginFile {
  std::string name;  // its relative path in the version, '/'-separated
  std::string url;
};

// What the origin said about an object: checked again on every later read.
struct ObjectInfo {
  uint64_t size = 0;
  std::string etag;           // as sent, quotes and W/ included; empty when none
  std::string last_modified;  // as sent; empty when none
};

// A file of a model at the origin, as described (origin/model.h) and as a version's manifest
// records it for the agents that fetch from the origin (EncodeOriginObjects).
struct OriginObject {
  std::string name;
  std::string url;
  ObjectInfo info;
};

inline constexpr std::string_view kDefaultIndexName = "model.safetensors.index.json";
inline constexpr size_t kMaxListBytes = 16u << 20;

// What the spec names: the files directly, or an index to read first.
struct OriginSpec {
  std::vector<OriginFile> files;  // a single file, or a list file's entries
  std::string index_url;          // set when the files come from an index
  std::string index_name;         // the index's name in the version
};

bool IsHttpUrl(std::string_view text);

// `url` for errors and logs: the query string (a pre-signed URL's signature) and any
// user:password@ are left out.
std::string RedactUrl(std::string_view url);

// A URL spec (http:// or https://). kInvalidArgument for another scheme or a URL that names
// neither a .safetensors file, an index nor a directory ("/").
Result<OriginSpec> ParseOriginUrl(std::string_view url);

// The entries of a list file's text; `label` names it in errors. kInvalidArgument for a line
// that is not "NAME URL" or "URL", a URL that is not http(s), an unsafe or duplicate name, or no
// entry at all.
Result<std::vector<OriginFile>> ParseUrlList(std::string_view text, std::string_view label);

// The URL of `name` beside `url` (its last path segment replaced; the query is dropped).
std::string SiblingUrl(std::string_view url, std::string_view name);

// The manifest metadata key under which a version published from an origin records its objects.
inline constexpr std::string_view kObjectsMetadataKey = "weightcast.origin.objects";
// The manifest metadata value that records a version's origin objects: one line per object,
// "NAME\tSIZE\tETAG\tLAST-MODIFIED\tURL", in the manifest's file order (docs/origin.md).
std::string EncodeOriginObjects(const std::vector<OriginObject>& objects);
// Its parse: kInvalidArgument for a line without five fields, a size that is not a number, an
// unsafe name or a URL that is not http(s).
Result<std::vector<OriginObject>> ParseOriginObjects(std::string_view text);

// A name safe as a relative path in a version: segments of [A-Za-z0-9._+-] (no "." or ".."
// segment, no empty one), at most 4096 bytes.
Status CheckFileName(std::string_view name);

}  // namespace weightcast::origin
