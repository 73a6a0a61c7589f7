#include "manifest/selection.h"

#include <algorithm>

namespace weightcast {
namespace {

// Marks the chunks holding any byte of [begin, end) in `want`.
void MarkRange(const Manifest& m, uint64_t begin, uint64_t end, std::vector<bool>& want) {
  if (begin >= end || m.chunk_size == 0) return;
  for (uint64_t c = begin / m.chunk_size; c <= (end - 1) / m.chunk_size && c < want.size(); ++c) {
    want[c] = true;
  }
}

}  // namespace

TensorSelection SelectTensors(const Manifest& manifest, std::span<const std::string> patterns) {
  TensorSelection out;
  const uint32_t n = manifest.chunk_count();
  std::vector<bool> want(n, patterns.empty());
  for (const ManifestTensor& t : manifest.tensors) {
    const bool selected =
        patterns.empty() || std::any_of(patterns.begin(), patterns.end(),
                                        [&](const auto& p) { return GlobMatch(p, t.name); });
    if (!selected) continue;
    out.tensors.push_back(t.name);
    MarkRange(manifest, t.offset, t.offset + t.size, want);
  }
  // Each tensor file's header: tensors are sorted by offset, so the first of a file is where its
  // header ends.
  std::vector<bool> seen(manifest.files.size(), false);
  for (const ManifestTensor& t : manifest.tensors) {
    if (t.file_index >= manifest.files.size() || seen[t.file_index]) continue;
    seen[t.file_index] = true;
    MarkRange(manifest, manifest.files[t.file_index].offset, t.offset, want);
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (want[i]) out.chunks.emplace_back(i);
  }
  return out;
}

std::vector<ChunkIndex> ChunksOutsideTensors(const Manifest& manifest) {
  std::vector<std::pair<uint64_t, uint64_t>> covered;  // [begin, end) of every tensor
  covered.reserve(manifest.tensors.size());
  for (const ManifestTensor& t : manifest.tensors)
    covered.emplace_back(t.offset, t.offset + t.size);
  std::sort(covered.begin(), covered.end());
  std::vector<bool> want(manifest.chunk_count(), false);
  uint64_t at = 0;  // everything below is covered or marked
  for (const auto& [begin, end] : covered) {
    MarkRange(manifest, at, begin, want);
    at = std::max(at, end);
  }
  MarkRange(manifest, at, manifest.total_size(), want);
  std::vector<ChunkIndex> out;
  for (uint32_t i = 0; i < want.size(); ++i) {
    if (want[i]) out.emplace_back(i);
  }
  return out;
}

}  // namespace weightcast
