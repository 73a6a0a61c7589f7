// A version from a model at an HTTP(S) origin (`weightcast publish --from URL`, docs/origin.md):
// each file is streamed once, its chunks hashed as they arrive, and the manifest signed; no byte
// is stored. The publisher then seeds the version by reading each chunk a peer asks for from the
// origin again (node::SwarmNode::SeedFrom), checked against the manifest before it is sent.
#pragma once

#include <memory>
#include <string>

#include <weightcast/status.h>

#include "origin/model.h"
#include "publish/version_builder.h"

namespace weightcast::publish {

struct OriginPrepared {
  PreparedVersion prepared;  // a full version: no base, no payloads
  std::shared_ptr<const origin::OriginReader> reader;
  uint64_t origin_bytes = 0;  // read from the origin to build it
};

// Streams `model` through `http` once and builds, finishes and signs the manifest of version
// options.min_version: chunk hashes (and XXH3-128 fast hashes) on a pool as the bytes arrive,
// with at most a few chunks in memory per hashing thread. `label` (the redacted --from) goes in
// the metadata as the source. Fails (nothing published, nothing stored) when an object changes
// while it is read, when the origin cannot be read, or for a model without a tensor unless
// options.allow_no_tensors.
Result<OriginPrepared> PrepareOriginVersion(const origin::OriginModel& model,
                                            const std::shared_ptr<origin::HttpClient>& http,
                                            const std::string& label,
                                            const PrepareOptions& options);

}  // namespace weightcast::publish
