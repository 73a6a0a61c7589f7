#include "agent/payload_cache.h"

namespace weightcast::agent {

void PayloadCache::Put(ChunkIndex chunk, std::vector<uint8_t> payload) {
  Put(chunk, std::make_shared<const std::vector<uint8_t>>(std::move(payload)));
}

void PayloadCache::Put(ChunkIndex chunk, SharedBytes payload) {
  if (payload == nullptr) return;
  std::lock_guard lock(mu_);
  auto [it, inserted] = payloads_.try_emplace(chunk.value(), payload);
  if (!inserted) {
    bytes_ -= it->second->size();
    it->second = std::move(payload);
  }
  bytes_ += it->second->size();
}

SharedBytes PayloadCache::Get(ChunkIndex chunk) const {
  std::lock_guard lock(mu_);
  auto it = payloads_.find(chunk.value());
  return it == payloads_.end() ? nullptr : it->second;
}

bool PayloadCache::Contains(ChunkIndex chunk) const {
  std::lock_guard lock(mu_);
  return payloads_.count(chunk.value()) != 0;
}

std::vector<ChunkIndex> PayloadCache::Chunks() const {
  std::lock_guard lock(mu_);
  std::vector<ChunkIndex> out;
  out.reserve(payloads_.size());
  for (const auto& [index, payload] : payloads_) out.push_back(ChunkIndex(index));
  return out;
}

size_t PayloadCache::size() const {
  std::lock_guard lock(mu_);
  return payloads_.size();
}

uint64_t PayloadCache::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

}  // namespace weightcast::agent
