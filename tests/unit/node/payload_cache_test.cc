// PayloadCache: every payload kept, memory bounded, the rest spilled to an unlinked file.
#include "node/payload_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <thread>
#include <vector>

namespace weightcast::node {
namespace {

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
    SharedBytes p = cache.Get(ChunkIndex(i));
    ASSERT_NE(p, nullptr) << i;
    EXPECT_EQ(*p, Payload(300, static_cast<uint8_t>(i))) << i;
  }
  EXPECT_EQ(cache.Get(ChunkIndex(20)), nullptr);
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
  EXPECT_EQ(*cache.Get(ChunkIndex(2)), Payload(100, 9));
  EXPECT_EQ(*cache.Get(ChunkIndex(1)), Payload(50, 8));
}

TEST(PayloadCache, ASpillThatCannotBeMadeKeepsThePayloadInMemory) {
  PayloadCacheOptions options = Bound(100);
  options.spill_dir = "/nonexistent/weightcast-spill";
  PayloadCache cache(Version(2), options);
  for (uint32_t i = 0; i < 4; ++i) cache.Put(ChunkIndex(i), Payload(80, static_cast<uint8_t>(i)));
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_EQ(cache.memory_bytes(), 320u);  // over the bound, but nothing lost
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(*cache.Get(ChunkIndex(i)), Payload(80, static_cast<uint8_t>(i)));
  }
}

TEST(PayloadCache, ASpanOfARereadPayloadLastsUntilTheThreadsNextRead) {
  PayloadCache cache(Version(2), Bound(0));  // everything spilled
  cache.Put(ChunkIndex(0), Payload(64, 1));
  cache.Put(ChunkIndex(1), Payload(64, 2));
  // What live::WriteDeltaFile's callers do: keep a span, drop the SharedBytes.
  std::span<const uint8_t> span;
  {
    SharedBytes p = cache.Get(ChunkIndex(0));
    span = std::span<const uint8_t>(*p);
  }
  // Another thread's reads do not end it.
  std::thread other([&] { EXPECT_NE(cache.Get(ChunkIndex(1)), nullptr); });
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
        SharedBytes p = cache.Get(ChunkIndex(chunk));
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(*p, Payload(256, static_cast<uint8_t>(chunk)));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(cache.size(), 200u);
  EXPECT_LE(cache.memory_bytes(), 4096u);
}

}  // namespace
}  // namespace weightcast::node
