// The bookkeeping behind the UCX transport's send registrations, with fake register calls
// (compiled in every build: it has no UCX types).
#include "net/ucx_registration_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

namespace weightcast::net {
namespace {

using Cache = UcxRegistrationCache;

// Hands out distinct fake handles and remembers which are registered.
struct FakeRegistrar {
  std::set<uintptr_t> live;
  uintptr_t next = 1;
  bool fail = false;
  std::vector<std::pair<uintptr_t, size_t>> calls;  // (start, length) of each register

  Cache Make(Cache::Limits limits = {}) {
    return Cache(
        limits,
        [this](const void* start, size_t length) -> Cache::Handle {
          calls.emplace_back(reinterpret_cast<uintptr_t>(start), length);
          if (fail) return nullptr;
          live.insert(next);
          return reinterpret_cast<Cache::Handle>(next++);
        },
        [this](Cache::Handle h) {
          EXPECT_EQ(live.erase(reinterpret_cast<uintptr_t>(h)), 1u) << "unregistered twice";
        });
  }
};

std::shared_ptr<std::vector<uint8_t>> Buffer(size_t size) {
  return std::make_shared<std::vector<uint8_t>>(size);
}

TEST(UcxRegistrationCache, ReusesARegistrationForTheSameOwnerAndRange) {
  FakeRegistrar r;
  auto buffer = Buffer(1 << 20);
  {
    Cache cache = r.Make();
    Cache::Lease a = cache.Acquire(buffer, buffer->data(), buffer->size());
    ASSERT_NE(a.handle, nullptr);
    cache.Release(a);
    // A sub-range of the same owner's registered range: the same handle, no new registration.
    Cache::Lease b = cache.Acquire(buffer, buffer->data() + 4096, 8192);
    EXPECT_EQ(b.handle, a.handle);
    cache.Release(b);
    EXPECT_EQ(r.calls.size(), 1u);
    // Registered ranges are page-aligned and cover the bytes.
    const uintptr_t start = reinterpret_cast<uintptr_t>(buffer->data());
    EXPECT_EQ(r.calls[0].first % Cache::kPage, 0u);
    EXPECT_LE(r.calls[0].first, start);
    EXPECT_GE(r.calls[0].first + r.calls[0].second, start + buffer->size());
    EXPECT_EQ(r.calls[0].second % Cache::kPage, 0u);
    const Cache::Counters c = cache.counters();
    EXPECT_EQ(c.hits, 1u);
    EXPECT_EQ(c.registrations, 1u);
    EXPECT_EQ(c.entries, 1u);
    EXPECT_EQ(c.bytes, r.calls[0].second);
    EXPECT_EQ(r.live.size(), 1u);
  }
  EXPECT_TRUE(r.live.empty()) << "the destructor unregisters what is cached";
}

TEST(UcxRegistrationCache, AnotherOwnerOfTheSameBytesDoesNotMatch) {
  FakeRegistrar r;
  Cache cache = r.Make();
  auto buffer = Buffer(1 << 20);
  // An aliasing owner: same bytes, a different control block (e.g. a different mapping handle).
  auto other = std::make_shared<int>(0);
  cache.Release(cache.Acquire(buffer, buffer->data(), buffer->size()));
  cache.Release(cache.Acquire(other, buffer->data(), buffer->size()));
  EXPECT_EQ(r.calls.size(), 2u);
  // A range that sticks out of the cached one does not match either.
  cache.Release(cache.Acquire(buffer, buffer->data(), buffer->size() + 2 * Cache::kPage));
  EXPECT_EQ(r.calls.size(), 3u);
}

TEST(UcxRegistrationCache, AnOwnerThatIsGoneTakesItsRegistrationsWithIt) {
  FakeRegistrar r;
  Cache cache = r.Make();
  auto buffer = Buffer(1 << 20);
  const uint8_t* data = buffer->data();
  cache.Release(cache.Acquire(buffer, data, 1 << 20));
  buffer.reset();
  // The next Acquire drops it (the address may be reused by new memory) and never matches it.
  auto next = Buffer(4096);
  cache.Release(cache.Acquire(next, next->data(), next->size()));
  EXPECT_EQ(cache.counters().evictions, 1u);
  EXPECT_EQ(cache.counters().entries, 1u);
  EXPECT_EQ(r.live.size(), 1u);
}

TEST(UcxRegistrationCache, StaysWithinItsLimitsAndNeverDropsALeasedEntry) {
  FakeRegistrar r;
  Cache cache = r.Make({.max_entries = 2, .max_bytes = 1 << 20});
  auto a = Buffer(256 << 10), b = Buffer(256 << 10), c = Buffer(256 << 10);
  Cache::Lease la = cache.Acquire(a, a->data(), a->size());
  Cache::Lease lb = cache.Acquire(b, b->data(), b->size());
  // Full of leased entries: c gets a registration of its own, unregistered on Release.
  Cache::Lease lc = cache.Acquire(c, c->data(), c->size());
  EXPECT_NE(lc.handle, nullptr);
  EXPECT_EQ(lc.entry, 0u);
  EXPECT_EQ(r.live.size(), 3u);
  cache.Release(lc);
  EXPECT_EQ(r.live.size(), 2u);
  // Once a is released, it is the least recently used unleased entry and makes room for c.
  cache.Release(la);
  lc = cache.Acquire(c, c->data(), c->size());
  EXPECT_NE(lc.entry, 0u);
  EXPECT_EQ(cache.counters().entries, 2u);
  EXPECT_EQ(cache.counters().evictions, 1u);
  EXPECT_EQ(r.live.size(), 2u);
  cache.Release(lb);
  cache.Release(lc);
  // The byte bound: a region above max_bytes is never cached.
  auto big = Buffer(2 << 20);
  Cache::Lease lbig = cache.Acquire(big, big->data(), big->size());
  EXPECT_EQ(lbig.entry, 0u);
  cache.Release(lbig);
  EXPECT_LE(cache.counters().bytes, size_t{1} << 20);
  EXPECT_EQ(r.live.size(), 2u);
}

TEST(UcxRegistrationCache, NoOwnerOrAFailedRegistrationIsNotCached) {
  FakeRegistrar r;
  Cache cache = r.Make();
  std::vector<uint8_t> bytes(1 << 20);
  Cache::Lease own = cache.Acquire(nullptr, bytes.data(), bytes.size());
  EXPECT_NE(own.handle, nullptr);
  EXPECT_EQ(own.entry, 0u);
  cache.Release(own);
  EXPECT_TRUE(r.live.empty());
  r.fail = true;
  auto buffer = Buffer(1 << 20);
  Cache::Lease failed = cache.Acquire(buffer, buffer->data(), buffer->size());
  EXPECT_EQ(failed.handle, nullptr);
  cache.Release(failed);  // a no-op
  EXPECT_EQ(cache.counters().failures, 1u);
  EXPECT_EQ(cache.counters().entries, 0u);
}

}  // namespace
}  // namespace weightcast::net
