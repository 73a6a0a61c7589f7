// A model at an HTTP(S) origin: its files described from their first bytes (sizes, validators,
// safetensors headers), and its flat byte space read back by ranged GETs.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

#include "format/safetensors.h"
#include "origin/http_client.h"
#include "origin/listing.h"

namespace weightcast::origin {

struct OriginModel {
  // Files sorted by name, safetensors headers parsed, indexes checked against them; `root`
  // is the redacted spec, for messages.
  Checkpoint checkpoint;
  std::vector<OriginObject> objects;  // in the order of checkpoint.files
};

// `from` as `weightcast publish --from` takes it: an http(s) URL (ParseOriginUrl) or a local
// list file (ParseUrlList).
Result<OriginSpec> ResolveOriginSpec(std::string_view from);

// Fetches what `spec` names: the index whole (when it names one) and each file's size,
// validators and header, one ranged GET per file (two for a header past its first 256 KiB).
// The same checks as OpenCheckpoint.
Result<OriginModel> DescribeOriginModel(HttpClient& http, const OriginSpec& spec);

// Reads the flat byte space of a model (its files one after another, in checkpoint order, as
// the manifest lays them out) from the origin. Every answer is checked against the object's
// size and validators (HttpClient::GetRange): content changed at the origin is
// kFailedPrecondition naming the file. Thread-safe.
class OriginReader {
 public:
  OriginReader(std::shared_ptr<HttpClient> http, std::vector<OriginObject> objects);

  uint64_t total_size() const { return total_; }
  // Bytes [offset, offset + length) to `sink`, in order, across files.
  Status Stream(uint64_t offset, uint64_t length, const ByteSink& sink) const;
  // The same into `out` (length out.size()).
  Status Read(uint64_t offset, std::span<uint8_t> out) const;
  HttpClient& http() const { return *http_; }

 private:
  std::shared_ptr<HttpClient> http_;
  std::vector<OriginObject> objects_;
  std::vector<uint64_t> starts_;  // each object's offset in the flat space
  uint64_t total_ = 0;
};

}  // namespace weightcast::origin
