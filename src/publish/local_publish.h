// Publishing into a store on this machine, for readers on the same machine: a trainer's
// Publisher without a coordinator, whose samplers follow the store (docs/live.md). Each version
// is committed as a delta against the current one, with its payloads in a delta file beside the
// store, so a sampler patches only the changed elements of its live tensors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include <weightcast/status.h>

#include "hash/digest.h"
#include "publish/version_builder.h"
#include "store/store.h"

namespace weightcast::publish {

struct LocalPublishOptions {
  std::string channel;
  uint64_t chunk_size = kAutoChunkSize;
  bool device_checks = false;  // BuildOptions::device_checks
  // Chunk hashes. Readers of a local store share this machine with the publisher: nothing they
  // read came from a peer, so the checksum guards against bugs and memory errors, not an
  // attacker, and XXH3-128 does that at memory speed (docs/live.md). sha256 for a store that is
  // also served to the network.
  HashAlgorithm algorithm = HashAlgorithm::kXxh3_128;
  bool delta = true;
  size_t threads = 0;  // hashing and encoding; 0: one per core
  std::map<std::string, std::string> metadata;
};

// Commits the checkpoint in `dir` (on the store's filesystem: its files are hard-linked, and
// `dir` must not be written to afterwards) as the next version of the channel, writes the delta
// file before the version becomes current, and removes the delta files of versions the store no
// longer keeps. Leaves the store unchanged when it fails.
Result<PreparedVersion> PublishLocal(Store& store, const std::filesystem::path& dir,
                                     const LocalPublishOptions& options);

}  // namespace weightcast::publish
