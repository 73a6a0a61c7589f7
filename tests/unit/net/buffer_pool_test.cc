#include "net/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "net/frame.h"

#if defined(WC_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace weightcast::net {
namespace {

TEST(BufferPool, AFreedBlockComesBackForTheSameSize) {
  BufferPool pool(64u << 20);
  void* a = pool.Allocate(4u << 20);
  std::memset(a, 0xab, 4u << 20);  // writable, all of it
  pool.Free(a, 4u << 20);
  EXPECT_GE(pool.stats().idle_bytes, 4u << 20);  // and a page in front
  void* b = pool.Allocate(4u << 20);
  EXPECT_EQ(b, a);
  EXPECT_EQ(pool.stats().hits, 1u);
  EXPECT_EQ(pool.stats().misses, 1u);
  EXPECT_EQ(pool.stats().idle_bytes, 0u);
  // Another size does not take it.
  pool.Free(b, 4u << 20);
  void* c = pool.Allocate(2u << 20);
  EXPECT_NE(c, a);
  EXPECT_EQ(pool.stats().misses, 2u);
  pool.Free(c, 2u << 20);
}

TEST(BufferPool, AChunkPayloadAfterItsHeaderStartsAPage) {
  BufferPool pool;
  for (size_t bytes : {size_t{1} << 20, (size_t{4} << 20) + kChunkHeaderSize, size_t{5000000}}) {
    auto* a = static_cast<uint8_t*>(pool.Allocate(bytes));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a + kChunkHeaderSize) % 4096, 0u) << bytes;
    std::memset(a, 1, bytes);  // all of it is mapped
    pool.Free(a, bytes);
  }
  Bytes body((4u << 20) + kChunkHeaderSize);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(body.data() + kChunkHeaderSize) % 4096, 0u);
}

TEST(BufferPool, IdleMemoryStaysWithinTheBudgetOldestGoingFirst) {
  BufferPool pool(9u << 20);  // two blocks of 4 MiB (and a page each), not three
  void* blocks[3];
  for (void*& b : blocks) b = pool.Allocate(4u << 20);
  for (void* b : blocks) pool.Free(b, 4u << 20);
  const BufferPoolStats s = pool.stats();
  EXPECT_GT(s.idle_bytes, 8u << 20);
  EXPECT_LE(s.idle_bytes, 9u << 20);
  EXPECT_EQ(s.evictions, 1u);
  // The newest comes back first; the oldest was unmapped.
  EXPECT_EQ(pool.Allocate(4u << 20), blocks[2]);
  EXPECT_EQ(pool.Allocate(4u << 20), blocks[1]);
  EXPECT_EQ(pool.stats().idle_bytes, 0u);
  pool.Free(blocks[1], 4u << 20);
  pool.Free(blocks[2], 4u << 20);
  // A block larger than the whole budget is never kept.
  void* big = pool.Allocate(16u << 20);
  pool.Free(big, 16u << 20);
  EXPECT_GT(pool.stats().idle_bytes, 8u << 20);
  EXPECT_EQ(pool.stats().evictions, 2u);
}

TEST(BufferPool, LargeFrameBodiesReuseMemory) {
  const uint64_t hits_before = BufferPool::Global().stats().hits;
  for (int i = 0; i < 4; ++i) {
    Bytes body(4u << 20);
    body.back() = static_cast<uint8_t>(i);
  }
  EXPECT_GE(BufferPool::Global().stats().hits, hits_before + 3);
  // Small bodies stay with the ordinary allocator.
  const uint64_t misses = BufferPool::Global().stats().misses;
  const uint64_t hits = BufferPool::Global().stats().hits;
  { Bytes small(1000); }
  EXPECT_EQ(BufferPool::Global().stats().misses, misses);
  EXPECT_EQ(BufferPool::Global().stats().hits, hits);
}

#if defined(WC_ASAN)
// Under ASan a block is addressable only while handed out, and only its bytes: a body used after
// it went back to the pool, or past its end, is still reported.
TEST(BufferPool, IdleBlocksAndSlackArePoisonedUnderAsan) {
  BufferPool pool;
  auto* a = static_cast<uint8_t*>(pool.Allocate(1000000));
  EXPECT_FALSE(__asan_address_is_poisoned(a));
  EXPECT_FALSE(__asan_address_is_poisoned(a + 999999));
  EXPECT_TRUE(__asan_address_is_poisoned(a + 1000000 + 8));
  EXPECT_TRUE(__asan_address_is_poisoned(a - 8));
  pool.Free(a, 1000000);
  EXPECT_TRUE(__asan_address_is_poisoned(a));
  EXPECT_EQ(pool.Allocate(1000000), a);
  EXPECT_FALSE(__asan_address_is_poisoned(a + 500000));
  pool.Free(a, 1000000);
}
#endif

}  // namespace
}  // namespace weightcast::net
