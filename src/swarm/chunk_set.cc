#include "swarm/chunk_set.h"

namespace weightcast::swarm {

ChunkSet ChunkSet::Full(uint32_t size) {
  ChunkSet set(size);
  for (uint64_t& w : set.words_) w = ~uint64_t{0};
  if (size % 64 != 0 && !set.words_.empty()) set.words_.back() = (uint64_t{1} << (size % 64)) - 1;
  set.count_ = size;
  return set;
}

}  // namespace weightcast::swarm
