// RecentChunks: verified chunks held in their frames' buffers, bounded by bytes, oldest first out.
#include "node/recent_chunks.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace weightcast::node {
namespace {

HeldBytes Bytes(size_t n, uint8_t fill) {
  auto owner = std::make_shared<const std::vector<uint8_t>>(n, fill);
  return {std::span<const uint8_t>(*owner), owner};
}

TEST(RecentChunks, KeepsTheNewestWithinTheBudgetAndDropsTheOldestFirst) {
  RecentChunks recent(/*budget_bytes=*/300);
  recent.Put(ChunkIndex(1), Bytes(100, 1));
  recent.Put(ChunkIndex(2), Bytes(100, 2));
  recent.Put(ChunkIndex(3), Bytes(100, 3));
  EXPECT_EQ(recent.bytes(), 300u);
  recent.Put(ChunkIndex(4), Bytes(100, 4));  // over the budget: chunk 1 goes
  EXPECT_FALSE(recent.Get(ChunkIndex(1)).has_value());
  ASSERT_TRUE(recent.Get(ChunkIndex(4)).has_value());
  EXPECT_EQ(recent.Get(ChunkIndex(4))->bytes[0], 4);
  EXPECT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent.bytes(), 300u);
}

TEST(RecentChunks, AReplacedChunkCountsOnceAndAgesFromItsNewestPut) {
  RecentChunks recent(300);
  recent.Put(ChunkIndex(1), Bytes(100, 1));
  recent.Put(ChunkIndex(2), Bytes(100, 2));
  recent.Put(ChunkIndex(1), Bytes(50, 9));  // replaced: now the newest
  EXPECT_EQ(recent.bytes(), 150u);
  recent.Put(ChunkIndex(3), Bytes(100, 3));
  recent.Put(ChunkIndex(4), Bytes(100, 4));  // 350 > 300: chunk 2 (oldest) goes, not chunk 1
  EXPECT_FALSE(recent.Get(ChunkIndex(2)).has_value());
  ASSERT_TRUE(recent.Get(ChunkIndex(1)).has_value());
  EXPECT_EQ(recent.Get(ChunkIndex(1))->bytes.size(), 50u);
  EXPECT_EQ(recent.Get(ChunkIndex(1))->bytes[0], 9);
  for (int i = 0; i < 1000; ++i) recent.Put(ChunkIndex(1), Bytes(10, 7));  // stale names pile up
  EXPECT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent.bytes(), 210u);
}

TEST(RecentChunks, HeldBytesOutliveTheirEviction) {
  RecentChunks recent(100);
  recent.Put(ChunkIndex(1), Bytes(100, 5));
  const std::optional<HeldBytes> held = recent.Get(ChunkIndex(1));
  recent.Put(ChunkIndex(2), Bytes(100, 6));  // evicts chunk 1 while an upload still sends it
  EXPECT_FALSE(recent.Get(ChunkIndex(1)).has_value());
  ASSERT_TRUE(held.has_value());
  EXPECT_EQ(held->bytes[99], 5);
}

TEST(RecentChunks, AChunkLargerThanTheBudgetOrWithoutAnOwnerIsNotKept) {
  RecentChunks recent(100);
  recent.Put(ChunkIndex(1), Bytes(101, 1));
  recent.Put(ChunkIndex(2), HeldBytes{});
  EXPECT_EQ(recent.size(), 0u);
  EXPECT_EQ(recent.bytes(), 0u);
}

}  // namespace
}  // namespace weightcast::node
