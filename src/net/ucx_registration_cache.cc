#include "net/ucx_registration_cache.h"

#include <algorithm>
#include <utility>

namespace weightcast::net {
namespace {

bool SameOwner(const std::weak_ptr<const void>& a, const std::shared_ptr<const void>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

}  // namespace

UcxRegistrationCache::UcxRegistrationCache(Limits limits, RegisterFn register_fn,
                                           UnregisterFn unregister_fn)
    : limits_(limits), register_(std::move(register_fn)), unregister_(std::move(unregister_fn)) {}

UcxRegistrationCache::~UcxRegistrationCache() {
  for (Entry& e : entries_) unregister_(e.handle);
}

UcxRegistrationCache::Lease UcxRegistrationCache::Acquire(const std::shared_ptr<const void>& owner,
                                                          const void* data, size_t size) {
  const auto address = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = address & ~(kPage - 1);
  const uintptr_t end = (address + size + kPage - 1) & ~(kPage - 1);
  ++clock_;
  DropExpired();
  if (owner != nullptr) {
    for (Entry& e : entries_) {
      if (e.begin <= begin && end <= e.end && SameOwner(e.owner, owner)) {
        ++e.leases;
        e.last_used = clock_;
        ++counters_.hits;
        return {.handle = e.handle, .entry = e.id};
      }
    }
  }
  const size_t length = end - begin;
  // The aligned start as a pointer derived from `data` (not from the integer).
  const uint8_t* start = static_cast<const uint8_t*>(data) - (address - begin);
  Handle handle = register_(start, length);
  if (handle == nullptr) {
    ++counters_.failures;
    return {};
  }
  ++counters_.registrations;
  if (owner == nullptr || !MakeRoom(length)) return {.handle = handle, .entry = 0};
  Entry& e = entries_.emplace_back();
  e.id = next_id_++;
  e.owner = owner;
  e.begin = begin;
  e.end = end;
  e.handle = handle;
  e.leases = 1;
  e.last_used = clock_;
  bytes_ += length;
  return {.handle = handle, .entry = e.id};
}

void UcxRegistrationCache::Release(const Lease& lease) {
  if (lease.handle == nullptr) return;
  if (lease.entry == 0) {
    unregister_(lease.handle);
    return;
  }
  for (Entry& e : entries_) {
    if (e.id == lease.entry) {
      if (e.leases > 0) --e.leases;
      return;
    }
  }
}

UcxRegistrationCache::Counters UcxRegistrationCache::counters() const {
  Counters c = counters_;
  c.entries = entries_.size();
  c.bytes = bytes_;
  return c;
}

void UcxRegistrationCache::DropExpired() {
  for (size_t i = entries_.size(); i-- > 0;) {
    if (entries_[i].leases == 0 && entries_[i].owner.expired()) Evict(i);
  }
}

bool UcxRegistrationCache::MakeRoom(size_t bytes) {
  if (bytes > limits_.max_bytes || limits_.max_entries == 0) return false;
  while (entries_.size() >= limits_.max_entries || bytes_ + bytes > limits_.max_bytes) {
    size_t victim = entries_.size();
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].leases != 0) continue;
      if (victim == entries_.size() || entries_[i].last_used < entries_[victim].last_used) {
        victim = i;
      }
    }
    if (victim == entries_.size()) return false;
    Evict(victim);
  }
  return true;
}

void UcxRegistrationCache::Evict(size_t index) {
  unregister_(entries_[index].handle);
  bytes_ -= entries_[index].end - entries_[index].begin;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(index));
  ++counters_.evictions;
}

}  // namespace weightcast::net
