// A fixed-size set of chunk indices (a bitfield), the unit of "who has what" in the swarm.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include <weightcast/types.h>

namespace weightcast::swarm {

// The number of set bits of `w`, inline. std::popcount compiles to a call into libgcc on
// Debian's x86-64 baseline (no POPCNT instruction assumed), and the scheduler's pick counts the
// candidates of every word of a have-set for each request it sends.
inline uint32_t CountBits(uint64_t w) {
  w = w - ((w >> 1) & 0x5555555555555555ULL);
  w = (w & 0x3333333333333333ULL) + ((w >> 2) & 0x3333333333333333ULL);
  w = (w + (w >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
  return static_cast<uint32_t>((w * 0x0101010101010101ULL) >> 56);
}

class ChunkSet {
 public:
  ChunkSet() = default;
  // An empty set over chunks [0, size).
  explicit ChunkSet(uint32_t size) : words_((size + 63) / 64, 0), size_(size) {}
  static ChunkSet Full(uint32_t size);

  uint32_t size() const { return size_; }
  uint32_t count() const { return count_; }
  bool empty() const { return count_ == 0; }
  bool full() const { return count_ == size_; }

  // Out-of-range indices are never members; Insert/Erase ignore them (callers validate input
  // from the network before it gets here, this is only a guard).
  bool Contains(ChunkIndex chunk) const {
    const uint32_t i = chunk.value();
    return i < size_ && ((words_[i >> 6] >> (i & 63)) & 1) != 0;
  }
  // Returns true when the chunk was not a member before. Inline: the simulator calls it for
  // every HAVE of every neighbour (N * C * degree times).
  bool Insert(ChunkIndex chunk) {
    const uint32_t i = chunk.value();
    if (i >= size_) return false;
    uint64_t& w = words_[i >> 6];
    const uint64_t bit = uint64_t{1} << (i & 63);
    if ((w & bit) != 0) return false;
    w |= bit;
    ++count_;
    return true;
  }
  // Returns true when the chunk was a member before.
  bool Erase(ChunkIndex chunk) {
    const uint32_t i = chunk.value();
    if (i >= size_) return false;
    uint64_t& w = words_[i >> 6];
    const uint64_t bit = uint64_t{1} << (i & 63);
    if ((w & bit) == 0) return false;
    w &= ~bit;
    --count_;
    return true;
  }

  const std::vector<uint64_t>& words() const { return words_; }

  friend bool operator==(const ChunkSet&, const ChunkSet&) = default;

 private:
  std::vector<uint64_t> words_;
  uint32_t size_ = 0;
  uint32_t count_ = 0;
};

// A read-only look at a chunk set whose words are kept elsewhere: the scheduler keeps every
// peer's have-set in one array (Scheduler::peer_has_), and PeerProtocol reads a registered
// peer's bits there.
class ChunkSetView {
 public:
  ChunkSetView(const uint64_t* words, uint32_t size) : words_(words), size_(size) {}
  bool Contains(ChunkIndex chunk) const {
    const uint32_t i = chunk.value();
    return i < size_ && ((words_[i >> 6] >> (i & 63)) & 1) != 0;
  }

 private:
  const uint64_t* words_;
  uint32_t size_;
};

}  // namespace weightcast::swarm
