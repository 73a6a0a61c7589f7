#include "manifest/manifest.h"

#include "manifest/selection.h"

#include <algorithm>

namespace weightcast {

// Declared in manifest/selection.h. Iterative with one backtrack point, so it is linear-ish and
// never recurses on hostile input.
bool GlobMatch(std::string_view pattern, std::string_view text) {
  size_t p = 0;
  size_t t = 0;
  size_t star = std::string_view::npos;  // position of the last '*' seen in pattern
  size_t star_t = 0;                     // where in text that '*' started matching
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_t = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++star_t;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

uint64_t Manifest::total_size() const {
  if (files.empty()) return 0;
  return files.back().offset + files.back().size;
}

ByteRange Manifest::ChunkRange(ChunkIndex index) const {
  const uint64_t total = total_size();
  const uint64_t begin = std::min<uint64_t>(uint64_t{index.value()} * chunk_size, total);
  return {begin, std::min(chunk_size, total - begin)};
}

std::vector<ChunkIndex> Manifest::ChunksForTensors(std::string_view pattern) const {
  std::vector<ChunkIndex> out;
  if (chunk_size == 0) return out;
  // Tensors are sorted by offset, so the chunks come out in increasing order; only the chunk
  // shared by two neighbouring tensors can repeat, and it is always the last one pushed.
  for (const ManifestTensor& tensor : tensors) {
    if (tensor.size == 0 || !GlobMatch(pattern, tensor.name)) continue;
    const uint64_t first = tensor.offset / chunk_size;
    const uint64_t last = (tensor.offset + tensor.size - 1) / chunk_size;
    for (uint64_t c = first; c <= last; ++c) {
      if (out.empty() || out.back().value() < c) out.emplace_back(static_cast<uint32_t>(c));
    }
  }
  return out;
}

std::vector<const ManifestTensor*> Manifest::TensorsIn(ByteRange range) const {
  std::vector<const ManifestTensor*> out;
  if (range.size == 0) return out;
  // Invariant (ValidateManifest): tensors are sorted by offset and do not overlap, so their ends
  // are sorted too and the first candidate is found by binary search.
  auto it = std::partition_point(tensors.begin(), tensors.end(), [&](const ManifestTensor& t) {
    return t.offset + t.size <= range.offset;
  });
  for (; it != tensors.end() && it->offset < range.end(); ++it) {
    if (it->size > 0) out.push_back(&*it);
  }
  return out;
}

}  // namespace weightcast
