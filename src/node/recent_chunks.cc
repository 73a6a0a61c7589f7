#include "node/recent_chunks.h"

namespace weightcast::node {

void RecentChunks::Put(ChunkIndex chunk, HeldBytes held) {
  if (held.owner == nullptr || held.bytes.size() > budget_) return;
  std::lock_guard lock(mu_);
  Entry& entry = held_[chunk.value()];
  bytes_ -= entry.held.bytes.size();
  entry = Entry{std::move(held), ++puts_};
  bytes_ += entry.held.bytes.size();
  order_.push_back({chunk.value(), entry.put});
  while (bytes_ > budget_ && !order_.empty()) {
    const Stamp oldest = order_.front();
    order_.pop_front();
    auto it = held_.find(oldest.chunk);
    if (it == held_.end() || it->second.put != oldest.put) continue;  // replaced since
    bytes_ -= it->second.held.bytes.size();
    held_.erase(it);
  }
  // A chunk put again and again (under the budget) leaves stale names: drop them now and then.
  if (order_.size() > 2 * held_.size() + 64) {
    std::erase_if(order_, [&](const Stamp& s) {
      auto it = held_.find(s.chunk);
      return it == held_.end() || it->second.put != s.put;
    });
  }
}

std::optional<HeldBytes> RecentChunks::Get(ChunkIndex chunk) const {
  std::lock_guard lock(mu_);
  auto it = held_.find(chunk.value());
  if (it == held_.end()) return std::nullopt;
  return it->second.held;
}

uint64_t RecentChunks::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

size_t RecentChunks::size() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

}  // namespace weightcast::node
