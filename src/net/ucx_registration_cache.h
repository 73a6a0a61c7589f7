// Which send buffers the UCX transport keeps registered (ucp_mem_map), and for how long
// (docs/transport_ucx.md, "Registered memory"). Pure bookkeeping, no UCX types: the transport
// passes the calls that register and unregister, tests pass fakes. Compiled in every build.
//
// A chunk a node serves is usually sent to several peers, and its bytes stay where they are while
// whoever keeps them alive (the frame's `keep_alive`: a store's mapping, a recent-chunks buffer)
// lives. So a registration is cached by that owner and the page-aligned range it covers, and is
// reused by every later send from inside that range while the owner lives. An entry whose owner
// is gone is dropped at the next Acquire (its memory may be unmapped and the address reused, so
// it must never match again). Invariant: an entry with leases is never unregistered; a lease
// holder holds the owner too (the frame's keep_alive), so an entry with leases has a live owner.
//
// Bounded: at most `max_entries` entries and `max_bytes` registered bytes; past that the least
// recently used entry without leases goes. A send that finds no room (every entry leased), or that
// has no owner, gets a registration of its own, unregistered on Release: registrations that are
// not cached are bounded by the sends in flight, which the send queue bounds.
//
// Not thread-safe: the UCX transport calls it from its progress thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace weightcast::net {

class UcxRegistrationCache {
 public:
  // An opaque registration handle (ucp_mem_h); null = registering failed.
  using Handle = void*;
  // Registers [start, start + length); returns null when it cannot (the send then goes without).
  using RegisterFn = std::function<Handle(const void* start, size_t length)>;
  using UnregisterFn = std::function<void(Handle)>;

  struct Limits {
    size_t max_entries = 256;
    size_t max_bytes = size_t{1} << 30;
  };

  // What one send holds while in flight. handle == nullptr: no registration (send without).
  struct Lease {
    Handle handle = nullptr;
    uint64_t entry = 0;  // the cache entry's id; 0 = a registration of its own
  };

  struct Counters {
    uint64_t hits = 0;           // Acquires served by a cached registration
    uint64_t registrations = 0;  // calls of RegisterFn that succeeded
    uint64_t failures = 0;       // calls of RegisterFn that returned null
    uint64_t evictions = 0;      // cached registrations dropped (owner gone, or for room)
    size_t entries = 0;          // cached now
    size_t bytes = 0;            // registered by cached entries now
  };

  UcxRegistrationCache(Limits limits, RegisterFn register_fn, UnregisterFn unregister_fn);
  // Unregisters every cached entry; no lease may be outstanding.
  ~UcxRegistrationCache();
  UcxRegistrationCache(const UcxRegistrationCache&) = delete;
  UcxRegistrationCache& operator=(const UcxRegistrationCache&) = delete;

  // A registration covering [data, data + size), which `owner` keeps alive and unchanged while it
  // lives. Always returns a lease; its handle is null when registering failed. Pair with Release.
  Lease Acquire(const std::shared_ptr<const void>& owner, const void* data, size_t size);
  // Ends a lease (before the sender drops the owner).
  void Release(const Lease& lease);

  Counters counters() const;
  // The page size ranges are aligned to.
  static constexpr uintptr_t kPage = 4096;

 private:
  struct Entry {
    uint64_t id = 0;
    std::weak_ptr<const void> owner;
    uintptr_t begin = 0, end = 0;  // page-aligned
    Handle handle = nullptr;
    uint32_t leases = 0;
    uint64_t last_used = 0;
  };

  void DropExpired();
  // Frees room for `bytes` more; false when the leased entries leave none.
  bool MakeRoom(size_t bytes);
  void Evict(size_t index);

  Limits limits_;
  RegisterFn register_;
  UnregisterFn unregister_;
  std::vector<Entry> entries_;
  size_t bytes_ = 0;
  uint64_t next_id_ = 1;
  uint64_t clock_ = 0;
  Counters counters_;
};

}  // namespace weightcast::net
