// The record that makes a committed version partial: a tensor-subset agent (`--tensors`,
// docs/agent.md) holds only some chunks of the version. The record lies in the version's
// directory (versions/<v>/.weightcast-partial.json), written before the commit point, so a
// version directory either has it from the moment it exists or is whole. Bytes of chunks it does
// not list are holes (zeros): the store never reads them as chunks (ReadChunk refuses them,
// Verify skips them) and readers show only the listed tensors.
//
// Format (JSON): {"format": 1, "patterns": [...], "tensors": [...], "chunks": [...]}: the
// agent's patterns, the names of the tensors every byte of which is held, the held chunk indices
// ascending; and "payloads": true for a version held as its delta's payloads (docs/live.md,
// "Samplers that stage nothing"): its bytes are its base's patched by the delta file beside the
// store, its files hold only the chunks with bytes outside every tensor.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "manifest/manifest.h"

namespace weightcast {

inline constexpr std::string_view kPartialFileName = ".weightcast-partial.json";

struct PartialVersion {
  std::vector<std::string> patterns;
  std::vector<std::string> tensors;  // manifest order
  std::vector<ChunkIndex> chunks;    // ascending, distinct
  // Held as payloads by an agent whose sampler's live tensors hold it: useless to anyone else,
  // and to the same sampler after it restarts (Store::ForgetPayloadVersions).
  bool payloads = false;

  bool HoldsChunk(ChunkIndex chunk) const;
  bool HoldsTensor(std::string_view name) const;
};

std::string SerializePartial(const PartialVersion& partial);
// kCorrupt naming what is wrong: not the format, a chunk beyond `manifest` or out of order, a
// tensor the manifest does not have.
Result<PartialVersion> ParsePartial(std::string_view text, const Manifest& manifest);
// The record of the version in `version_dir`, or nullopt when it has none (a whole version).
Result<std::optional<PartialVersion>> ReadPartialFile(const std::filesystem::path& version_dir,
                                                      const Manifest& manifest);

}  // namespace weightcast
