#pragma once
// Verified whole chunks kept in the buffers they arrived in, so that a node forwards a chunk it
// has just received without reading it back from its store. In a pipelined broadcast most
// requests for a chunk come within seconds of its arrival (every receiver is a sender), so a
// small window of the newest chunks serves most uploads; older ones are read from the store.
// Bounded by bytes, whatever the model's size: the oldest go first.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>

#include "manifest/manifest.h"
#include "util/held_bytes.h"

namespace weightcast::node {

class RecentChunks {
 public:
  // 64 MiB: eight 8 MiB chunks, or hundreds of the small chunks a small model gets.
  static constexpr uint64_t kDefaultBudgetBytes = 64ull << 20;

  explicit RecentChunks(uint64_t budget_bytes = kDefaultBudgetBytes) : budget_(budget_bytes) {}
  RecentChunks(const RecentChunks&) = delete;
  RecentChunks& operator=(const RecentChunks&) = delete;

  // Keeps `chunk`'s verified bytes (replacing an older entry for it), dropping the oldest
  // entries beyond the budget. A chunk larger than the whole budget is not kept.
  void Put(ChunkIndex chunk, HeldBytes held);
  std::optional<HeldBytes> Get(ChunkIndex chunk) const;

  uint64_t bytes() const;
  size_t size() const;

 private:
  struct Entry {
    HeldBytes held;
    uint64_t put = 0;  // when it was put (a count), to tell it from a replaced entry in order_
  };
  struct Stamp {
    uint32_t chunk;
    uint64_t put;
  };

  const uint64_t budget_;
  mutable std::mutex mu_;
  std::map<uint32_t, Entry> held_;
  std::deque<Stamp> order_;  // oldest first; an entry replaced since is skipped
  uint64_t puts_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace weightcast::node
