#include "manifest/manifest.h"

#include <gtest/gtest.h>

#include "manifest/builder.h"

namespace weightcast {
namespace {

constexpr uint64_t kChunk = 100;

// Files a [0,250) b [250,250) c [250,420); chunks of 100: 0..4, the last one 20 bytes.
Manifest HandBuilt() {
  Manifest m;
  m.channel = "c";
  m.version = Version(1);
  m.chunk_size = kChunk;
  m.files = {{"a", 250, 0}, {"b", 0, 250}, {"c", 170, 250}};
  m.tensors = {
      {"layers.0.weight", DType::kU8, {40}, 0, 10, 40},      // chunk 0
      {"layers.0.bias", DType::kU8, {100}, 0, 60, 100},      // chunks 0-1 (shares 0)
      {"layers.1.weight", DType::kU8, {30}, 0, 200, 30},     // chunk 2
      {"empty", DType::kU8, {0}, 0, 230, 0},                 // no chunk
      {"layers.1.bias", DType::kU8, {20}, 0, 230, 20},       // chunk 2
      {"layers.10.weight", DType::kU8, {150}, 2, 260, 150},  // chunks 2-4
  };
  m.chunk_hashes.resize(5);
  return m;
}

std::vector<uint32_t> Values(const std::vector<ChunkIndex>& v) {
  std::vector<uint32_t> out;
  for (ChunkIndex c : v) out.push_back(c.value());
  return out;
}

std::vector<std::string> Names(const std::vector<const ManifestTensor*>& v) {
  std::vector<std::string> out;
  for (const ManifestTensor* t : v) out.push_back(t->name);
  return out;
}

TEST(Manifest, TotalSizeIsTheEndOfTheLastFile) {
  EXPECT_EQ(HandBuilt().total_size(), 420u);
  EXPECT_EQ(Manifest{}.total_size(), 0u);
}

TEST(Manifest, ChunkRangeCutsTheFlatSpaceAndShortensTheLastChunk) {
  Manifest m = HandBuilt();
  EXPECT_EQ(m.ChunkRange(ChunkIndex(0)).offset, 0u);
  EXPECT_EQ(m.ChunkRange(ChunkIndex(0)).size, kChunk);
  // Chunk 2 spans the end of file a, the empty file b and the start of file c.
  EXPECT_EQ(m.ChunkRange(ChunkIndex(2)).offset, 200u);
  EXPECT_EQ(m.ChunkRange(ChunkIndex(2)).end(), 300u);
  EXPECT_EQ(m.ChunkRange(ChunkIndex(4)).offset, 400u);
  EXPECT_EQ(m.ChunkRange(ChunkIndex(4)).size, 20u);
  // Beyond the last chunk: an empty range at the end, never past it.
  EXPECT_EQ(m.ChunkRange(ChunkIndex(9)).offset, 420u);
  EXPECT_EQ(m.ChunkRange(ChunkIndex(9)).size, 0u);
}

TEST(Manifest, ChunksForTensorsMatchesGlobs) {
  Manifest m = HandBuilt();
  EXPECT_EQ(Values(m.ChunksForTensors("*")), (std::vector<uint32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Values(m.ChunksForTensors("layers.0.*")), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(Values(m.ChunksForTensors("layers.?.weight")), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(Values(m.ChunksForTensors("layers.1*")), (std::vector<uint32_t>{2, 3, 4}));
  EXPECT_EQ(Values(m.ChunksForTensors("*bias")), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(Values(m.ChunksForTensors("layers.1.bias")), (std::vector<uint32_t>{2}));
  EXPECT_EQ(Values(m.ChunksForTensors("*.*.*")), (std::vector<uint32_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(m.ChunksForTensors("empty").empty());  // no bytes, no chunks
  EXPECT_TRUE(m.ChunksForTensors("layers").empty());
  EXPECT_TRUE(m.ChunksForTensors("nothing*").empty());
  EXPECT_TRUE(m.ChunksForTensors("").empty());
}

TEST(Manifest, TensorsInFindsEveryOverlappingTensor) {
  Manifest m = HandBuilt();
  EXPECT_EQ(Names(m.TensorsIn({0, 100})),
            (std::vector<std::string>{"layers.0.weight", "layers.0.bias"}));
  EXPECT_EQ(Names(m.TensorsIn(m.ChunkRange(ChunkIndex(2)))),
            (std::vector<std::string>{"layers.1.weight", "layers.1.bias", "layers.10.weight"}));
  EXPECT_EQ(Names(m.TensorsIn({45, 10})), (std::vector<std::string>{"layers.0.weight"}));
  EXPECT_EQ(Names(m.TensorsIn({159, 1})), (std::vector<std::string>{"layers.0.bias"}));
  EXPECT_TRUE(m.TensorsIn({160, 40}).empty());  // the gap between tensors
  EXPECT_TRUE(m.TensorsIn({0, 10}).empty());
  EXPECT_TRUE(m.TensorsIn({100, 0}).empty());
  EXPECT_TRUE(m.TensorsIn({410, 100}).empty());
  EXPECT_EQ(m.TensorsIn({0, 1000}).size(), 5u);  // the empty tensor overlaps nothing
}

TEST(ChannelName, AcceptsTheStoreAlphabetOnly) {
  EXPECT_TRUE(ValidateChannelName("policy-7b_v2.1").ok());
  EXPECT_FALSE(ValidateChannelName("").ok());
  EXPECT_FALSE(ValidateChannelName(".hidden").ok());
  EXPECT_FALSE(ValidateChannelName("a/b").ok());
  EXPECT_FALSE(ValidateChannelName("a b").ok());
  EXPECT_FALSE(ValidateChannelName(std::string(kMaxChannelBytes + 1, 'a')).ok());
}

}  // namespace
}  // namespace weightcast
