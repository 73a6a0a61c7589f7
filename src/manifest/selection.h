// What a tensor-subset agent (`weightcast agent --tensors PATTERN...`, docs/agent.md) holds of a
// version: the tensors it selected and the chunks it must fetch for them. Pure functions of the
// manifest; the store records the result with a partial version (store/partial.h).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/types.h>

#include "manifest/manifest.h"

namespace weightcast {

// Glob match with '*' (any run of characters, '.' and '/' included) and '?' (one character):
// how tensor patterns match tensor names (defined in manifest.cc, used by ChunksForTensors).
bool GlobMatch(std::string_view pattern, std::string_view text);

struct TensorSelection {
  std::vector<std::string> tensors;  // names matching a pattern, in manifest (offset) order
  // Ascending, distinct: every chunk holding a byte of those tensors, and the chunks of each
  // tensor file's header (its bytes before its first tensor), so that every safetensors file of
  // the version still parses. Files without tensors (a config.json, a sharded part's padding)
  // are not selected.
  std::vector<ChunkIndex> chunks;
};

// The selection of `patterns` (globs: '*' and '?', as Manifest::ChunksForTensors). No pattern
// selects every tensor and every chunk.
TensorSelection SelectTensors(const Manifest& manifest, std::span<const std::string> patterns);

// The chunks holding a byte that no tensor covers: file headers, gaps, files without tensors.
// What a node that keeps the tensors elsewhere (a sampler's live tensors) still needs from the
// version's files. Ascending.
std::vector<ChunkIndex> ChunksOutsideTensors(const Manifest& manifest);

}  // namespace weightcast
