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
  for (HashAlgorithm algorithm : {HashAlgorithm::kSha256, HashAlgorithm::kXxh3_128}) {
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
