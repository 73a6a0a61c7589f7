// PayloadCache: every payload kept, memory bounded, the rest spilled to an unlinked file.
#include "node/payload_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <thread>
#include <vector>

namespace weightcast::node {
namespace {

std::vector<uint8_t> Copy(const HeldBytes& held) {
  return std::vector<uint8_t>(held.bytes.begin(), held.bytes.end());
}

std::vector<uint8_t> Payload(size_t n, uint8_t seed) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed * 31 + i);
  return out;
}

PayloadCacheOptions Bound(uint64_t bytes) {
  PayloadCacheOptions options;
  options.memory_bytes = bytes;
  options.spill_dir = ::testing::TempDir();
  return options;
}

TEST(PayloadCache, KeepsEveryPayloadWithinItsMemoryBound) {
  PayloadCache cache(Version(2), Bound(1000));
  for (uint32_t i = 0; i < 20; ++i) cache.Put(ChunkIndex(i), Payload(300, static_cast<uint8_t>(i)));
  EXPECT_EQ(cache.size(), 20u);
  EXPECT_EQ(cache.bytes(), 20u * 300);
  EXPECT_LE(cache.memory_bytes(), 1000u);
  EXPECT_EQ(cache.Chunks().size(), 20u);
  EXPECT_EQ(cache.Chunks().front(), ChunkIndex(0));
  EXPECT_EQ(cache.Chunks().back(), ChunkIndex(19));
  for (uint32_t i = 0; i < 20; ++i) {
    EXPECT_TRUE(cache.Contains(ChunkIndex(i)));
    std::optional<HeldBytes> p = cache.Get(ChunkIndex(i));
    ASSERT_TRUE(p.has_value()) << i;
    EXPECT_EQ(Copy(*p), Payload(300, static_cast<uint8_t>(i))) << i;
  }
  EXPECT_FALSE(cache.Get(ChunkIndex(20)).has_value());
}

TEST(PayloadCache, APayloadInItsOwnersBytesIsKeptThereNotCopied) {
  PayloadCache cache(Version(2), Bound(1 << 20));
  auto frame = std::make_shared<const std::vector<uint8_t>>(Payload(500, 7));
  // As an agent keeps a received payload: a view into the frame's body, the frame its owner.
  const std::span<const uint8_t> payload = std::span<const uint8_t>(*frame).subspan(20);
  cache.Put(ChunkIndex(3), HeldBytes{payload, frame});
  std::weak_ptr<const std::vector<uint8_t>> alive = frame;
  frame.reset();
  EXPECT_FALSE(alive.expired());  // the cache holds the frame
  std::optional<HeldBytes> got = cache.Get(ChunkIndex(3));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->bytes.data(), payload.data());
  EXPECT_EQ(got->bytes.size(), 480u);
  EXPECT_EQ(cache.memory_bytes(), 480u);
  got.reset();
  cache.Put(ChunkIndex(3), Payload(10, 1));  // replaced: the frame goes
  EXPECT_TRUE(alive.expired());
}

TEST(PayloadCache, AReplacedPayloadCountsOnce) {
  PayloadCache cache(Version(2), Bound(500));
  cache.Put(ChunkIndex(1), Payload(400, 1));
  cache.Put(ChunkIndex(2), Payload(400, 2));  // spilled
  cache.Put(ChunkIndex(2), Payload(100, 9));  // replaced: fits in memory now
  cache.Put(ChunkIndex(1), Payload(50, 8));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.bytes(), 150u);
  EXPECT_EQ(cache.memory_bytes(), 150u);
  EXPECT_EQ(Copy(*cache.Get(ChunkIndex(2))), Payload(100, 9));
  EXPECT_EQ(Copy(*cache.Get(ChunkIndex(1))), Payload(50, 8));
}

TEST(PayloadCache, ASpillThatCannotBeMadeKeepsThePayloadInMemory) {
  PayloadCacheOptions options = Bound(100);
  options.spill_dir = "/nonexistent/weightcast-spill";
  PayloadCache cache(Version(2), options);
  for (uint32_t i = 0; i < 4; ++i) cache.Put(ChunkIndex(i), Payload(80, static_cast<uint8_t>(i)));
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_EQ(cache.memory_bytes(), 320u);  // over the bound, but nothing lost
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(Copy(*cache.Get(ChunkIndex(i))), Payload(80, static_cast<uint8_t>(i)));
  }
}

TEST(PayloadCache, ASpanOfARereadPayloadLastsUntilTheThreadsNextRead) {
  PayloadCache cache(Version(2), Bound(0));  // everything spilled
  cache.Put(ChunkIndex(0), Payload(64, 1));
  cache.Put(ChunkIndex(1), Payload(64, 2));
  // What live::WriteDeltaFile's callers do: keep a span, drop the owner.
  std::span<const uint8_t> span;
  {
    std::optional<HeldBytes> p = cache.Get(ChunkIndex(0));
    span = p->bytes;
  }
  // Another thread's reads do not end it.
  std::thread other([&] { EXPECT_TRUE(cache.Get(ChunkIndex(1)).has_value()); });
  other.join();
  const std::vector<uint8_t> want = Payload(64, 1);
  EXPECT_TRUE(std::equal(span.begin(), span.end(), want.begin(), want.end()));
}

TEST(PayloadCache, ConcurrentPutsAndGetsSeeWholePayloads) {
  PayloadCache cache(Version(2), Bound(4096));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      for (uint32_t i = 0; i < 50; ++i) {
        const uint32_t chunk = static_cast<uint32_t>(t) * 50 + i;
        cache.Put(ChunkIndex(chunk), Payload(256, static_cast<uint8_t>(chunk)));
        std::optional<HeldBytes> p = cache.Get(ChunkIndex(chunk));
        ASSERT_TRUE(p.has_value());
        EXPECT_EQ(Copy(*p), Payload(256, static_cast<uint8_t>(chunk)));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(cache.size(), 200u);
  EXPECT_LE(cache.memory_bytes(), 4096u);
}

}  // namespace
}  // namespace weightcast::node
