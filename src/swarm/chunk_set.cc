#include "swarm/chunk_set.h"

namespace weightcast::swarm {

ChunkSet ChunkSet::Full(uint32_t size) {
  ChunkSet set(size);
  for (uint64_t& w : set.words_) w = ~uint64_t{0};
  if (size % 64 != 0 && !set.words_.empty()) set.words_.back() = (uint64_t{1} << (size % 64)) - 1;
  set.count_ = size;
  return set;
}

bool ChunkSet::Insert(ChunkIndex chunk) {
  const uint32_t i = chunk.value();
  if (i >= size_) return false;
  uint64_t& w = words_[i >> 6];
  const uint64_t bit = uint64_t{1} << (i & 63);
  if ((w & bit) != 0) return false;
  w |= bit;
  ++count_;
  return true;
}

bool ChunkSet::Erase(ChunkIndex chunk) {
  const uint32_t i = chunk.value();
  if (i >= size_) return false;
  uint64_t& w = words_[i >> 6];
  const uint64_t bit = uint64_t{1} << (i & 63);
  if ((w & bit) == 0) return false;
  w &= ~bit;
  --count_;
  return true;
}

}  // namespace weightcast::swarm
