#include "client/changed_tensors.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace weightcast::client {
namespace {

bool SameTensorPlace(const ManifestTensor& a, const ManifestTensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.offset == b.offset && a.size == b.size;
}

void AddRange(std::vector<std::pair<uint64_t, uint64_t>>& ranges, uint64_t begin, uint64_t end) {
  if (begin >= end) return;
  if (!ranges.empty() && ranges.back().second == begin) {
    ranges.back().second = end;
  } else {
    ranges.emplace_back(begin, end);
  }
}

}  // namespace

std::vector<TensorChange> ChangedTensors(const Manifest& from, const Manifest& to) {
  std::unordered_map<std::string_view, const ManifestTensor*> old_by_name;
  old_by_name.reserve(from.tensors.size());
  for (const ManifestTensor& t : from.tensors) old_by_name.emplace(t.name, &t);
  // Chunk hashes are comparable only when both versions cut the byte space the same way with the
  // same hash function; otherwise every byte counts as changed.
  const bool comparable = from.chunk_size == to.chunk_size && to.chunk_size != 0 &&
                          from.hash_algorithm == to.hash_algorithm;

  std::vector<TensorChange> out;
  for (const ManifestTensor& t : to.tensors) {
    if (t.size == 0) continue;
    TensorChange change{t.name, {}};
    auto it = old_by_name.find(t.name);
    if (!comparable || it == old_by_name.end() || !SameTensorPlace(*it->second, t)) {
      change.ranges.emplace_back(0, t.size);
      out.push_back(std::move(change));
      continue;
    }
    const uint64_t end = t.offset + t.size;
    for (uint64_t c = t.offset / to.chunk_size; c * to.chunk_size < end; ++c) {
      const ChunkIndex index(static_cast<uint32_t>(c));
      const ByteRange range = to.ChunkRange(index);
      bool same = c < from.chunk_count() && from.chunk_hashes[c] == to.chunk_hashes[c];
      if (same) {
        const ByteRange old_range = from.ChunkRange(index);
        same = old_range.offset == range.offset && old_range.size == range.size;
      }
      if (same) continue;
      AddRange(change.ranges, std::max(range.offset, t.offset) - t.offset,
               std::min(range.end(), end) - t.offset);
    }
    if (!change.ranges.empty()) out.push_back(std::move(change));
  }
  return out;
}

}  // namespace weightcast::client
