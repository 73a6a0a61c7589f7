#include "hash/digest.h"

#include <gtest/gtest.h>

#include <vector>

#include "util/text.h"

namespace weightcast {
namespace {

TEST(Sha256, MatchesKnownVectors) {
  EXPECT_EQ(ToHex(Sha256(AsBytes(""))),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(ToHex(Sha256(AsBytes("abc"))),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Hasher, IncrementalEqualsOneShotForBothAlgorithms) {
  std::vector<uint8_t> data(100000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 31 + 7);
  for (HashAlgorithm algorithm :
       {HashAlgorithm::kSha256, HashAlgorithm::kXxh3_128, HashAlgorithm::kWeightedSum128}) {
    Hasher hasher(algorithm);
    hasher.Update({data.data(), 12345});
    hasher.Update({data.data() + 12345, data.size() - 12345});
    EXPECT_EQ(hasher.Finish(), HashBytes(algorithm, data)) << HashAlgorithmName(algorithm);
    // Reusable after Finish.
    hasher.Update(data);
    EXPECT_EQ(hasher.Finish(), HashBytes(algorithm, data));
  }
}

TEST(Xxh3, FillsOnlyFirstSixteenBytes) {
  Digest d = HashBytes(HashAlgorithm::kXxh3_128, AsBytes("weights"));
  for (size_t i = 16; i < d.size(); ++i) EXPECT_EQ(d[i], 0);
  EXPECT_NE(d, HashBytes(HashAlgorithm::kXxh3_128, AsBytes("weightz")));
}

// The definition, one byte at a time.
WeightedSums NaiveWeightedSums(std::span<const uint8_t> data) {
  WeightedSums s;
  for (size_t i = 0; i < data.size(); ++i) {
    s.a += data[i];
    s.b += (i + 1) * static_cast<uint64_t>(data[i]);
  }
  return s;
}

TEST(WeightedSum, IsTheDefinitionAndItsPiecesAddUp) {
  std::vector<uint8_t> data(3 * 4096 + 777);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * 2654435761u) >> 7);
  const WeightedSums want = NaiveWeightedSums(data);
  const WeightedSums whole = WeightedSumsOf(data, 0);
  EXPECT_EQ(whole.a, want.a);
  EXPECT_EQ(whole.b, want.b);
  // A chunk held in pieces (tensors, a header): each piece's sums at its own offset add up.
  const std::span<const uint8_t> all(data);
  const WeightedSums p1 = WeightedSumsOf(all.first(1000), 0);
  const WeightedSums p2 = WeightedSumsOf(all.subspan(1000, 5000), 1000);
  const WeightedSums p3 = WeightedSumsOf(all.subspan(6000), 6000);
  EXPECT_EQ(p1.a + p2.a + p3.a, want.a);
  EXPECT_EQ(p1.b + p2.b + p3.b, want.b);
  const Digest d = HashBytes(HashAlgorithm::kWeightedSum128, data);
  EXPECT_EQ(d, WeightedSumDigest(want));
  for (size_t i = 16; i < d.size(); ++i) EXPECT_EQ(d[i], 0);
}

TEST(WeightedSum, CatchesAChangedByteAndTwoBytesExchanged) {
  std::vector<uint8_t> data(10000, 0);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i % 251);
  const Digest before = HashBytes(HashAlgorithm::kWeightedSum128, data);
  std::vector<uint8_t> flipped = data;
  flipped[4321] ^= 0x80;
  EXPECT_NE(HashBytes(HashAlgorithm::kWeightedSum128, flipped), before);
  std::vector<uint8_t> swapped = data;
  std::swap(swapped[10], swapped[9000]);
  EXPECT_NE(HashBytes(HashAlgorithm::kWeightedSum128, swapped), before);
}

TEST(WeightedSum, IsNotAChunkHashAlgorithm) {
  EXPECT_EQ(HashAlgorithmName(HashAlgorithm::kWeightedSum128), "wsum-128");
  EXPECT_EQ(ParseHashAlgorithm("wsum-128").status().code(), Code::kInvalidArgument);
}

TEST(HmacSha256, MatchesRfc4231Case2) {
  EXPECT_EQ(ToHex(HmacSha256(AsBytes("Jefe"), AsBytes("what do ya want for nothing?"))),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(ConstantTimeEqual, ComparesContentAndLength) {
  EXPECT_TRUE(ConstantTimeEqual(AsBytes("abc"), AsBytes("abc")));
  EXPECT_FALSE(ConstantTimeEqual(AsBytes("abc"), AsBytes("abd")));
  EXPECT_FALSE(ConstantTimeEqual(AsBytes("abc"), AsBytes("abcd")));
}

TEST(ParseHashAlgorithm, RejectsUnknownNames) {
  EXPECT_TRUE(ParseHashAlgorithm("sha256").ok());
  EXPECT_EQ(*ParseHashAlgorithm("xxh3-128"), HashAlgorithm::kXxh3_128);
  EXPECT_EQ(ParseHashAlgorithm("md5").status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace weightcast
