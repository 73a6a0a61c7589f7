// codec::ApplyChunkInPlace: a payload patched into a chunk that lies in pieces (live tensors and
// bytes read from a file) gives exactly the decoded chunk, for every transform.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "codec/chunk_codec.h"

namespace weightcast::codec {
namespace {

using Bytes = std::vector<uint8_t>;

struct Case {
  Transform xor_transform;
  double changed;
};

class ApplyInPlace : public ::testing::TestWithParam<Case> {};

TEST_P(ApplyInPlace, ScatteredPiecesEndAsTheTarget) {
  std::mt19937_64 rng(11);
  // A chunk of: 100 header bytes, a bf16 run, 36 padding bytes, an f32 run.
  const std::vector<Segment> segs = {{100, 1}, {40000, 2}, {36, 1}, {24000, 4}};
  uint64_t size = 0;
  for (const Segment& s : segs) size += s.size;
  Bytes base(size), target;
  for (auto& x : base) x = static_cast<uint8_t>(rng());
  target = base;
  std::bernoulli_distribution pick(GetParam().changed);
  for (uint64_t i = 100; i < 40100; i += 2)
    if (pick(rng)) target[i] ^= 1;
  for (uint64_t i = 40136; i < size; i += 4)
    if (pick(rng)) target[i + 1] += 3;
  target[5] = 0x7f;  // a header byte changes too: the sampler does not hold it

  ChunkEncodeOptions opt;
  opt.xor_transform = GetParam().xor_transform;
  opt.try_full_above = 2.0;  // keep the xor form
  CodecScratch scratch;
  const auto b = HashedChunk::Compute(base, HashAlgorithm::kXxh3_128);
  const auto t = HashedChunk::Compute(target, HashAlgorithm::kXxh3_128);
  auto enc = EncodeChunk(b, t, segs, opt, scratch);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  ASSERT_EQ(enc->encoding, ChunkEncoding::kXor);

  // The sampler holds the two runs (as base); header and padding come from the target's file.
  Bytes run1(base.begin() + 100, base.begin() + 40100);
  Bytes run2(base.begin() + 40136, base.end());
  const std::vector<ChunkPiece> pieces = {{{}, std::span<const uint8_t>(target).subspan(0, 100)},
                                          {run1, {}},
                                          {{}, std::span<const uint8_t>(target).subspan(40100, 36)},
                                          {run2, {}}};
  ASSERT_TRUE(ApplyChunkInPlace(enc->payload, b.hash(), pieces, scratch).ok());
  EXPECT_TRUE(std::equal(run1.begin(), run1.end(), target.begin() + 100));
  EXPECT_TRUE(std::equal(run2.begin(), run2.end(), target.begin() + 40136));
  EXPECT_EQ(HashPieces(pieces, HashAlgorithm::kXxh3_128), t.hash());

  // Patching and hashing in one pass gives the same bytes and the target's hash.
  Bytes again1(base.begin() + 100, base.begin() + 40100);
  Bytes again2(base.begin() + 40136, base.end());
  const std::vector<ChunkPiece> again = {{{}, std::span<const uint8_t>(target).subspan(0, 100)},
                                         {again1, {}},
                                         {{}, std::span<const uint8_t>(target).subspan(40100, 36)},
                                         {again2, {}}};
  auto digest =
      ApplyChunkInPlaceHashing(enc->payload, b.hash(), again, HashAlgorithm::kXxh3_128, scratch);
  ASSERT_TRUE(digest.ok()) << digest.status().ToString();
  EXPECT_EQ(*digest, t.hash());
  EXPECT_EQ(again1, run1);
  EXPECT_EQ(again2, run2);
}

INSTANTIATE_TEST_SUITE_P(Transforms, ApplyInPlace,
                         ::testing::Values(Case{Transform::kSparseDiff, 0.01},
                                           Case{Transform::kSparse, 0.05},
                                           Case{Transform::kPlanes, 0.3},
                                           Case{Transform::kNone, 0.5}));

TEST(ApplyInPlaceErrors, AnotherBaseOrSizeWritesNothing) {
  Bytes base(4096, 1), target(4096, 1);
  target[10] = 2;
  const std::vector<Segment> segs = {{4096, 2}};
  CodecScratch scratch;
  const auto b = HashedChunk::Compute(base, HashAlgorithm::kXxh3_128);
  const auto t = HashedChunk::Compute(target, HashAlgorithm::kXxh3_128);
  auto enc = EncodeChunk(b, t, segs, {}, scratch);
  ASSERT_TRUE(enc.ok());
  Bytes live = base;
  Digest other = b.hash();
  other[0] ^= 1;
  const std::vector<ChunkPiece> pieces = {{live, {}}};
  EXPECT_EQ(ApplyChunkInPlace(enc->payload, other, pieces, scratch).code(),
            Code::kFailedPrecondition);
  EXPECT_EQ(live, base);
  Bytes shorter(4000, 1);
  const std::vector<ChunkPiece> short_pieces = {{shorter, {}}};
  EXPECT_EQ(ApplyChunkInPlace(enc->payload, b.hash(), short_pieces, scratch).code(),
            Code::kFailedPrecondition);
  // A truncated payload is refused as corrupt.
  Bytes cut(enc->payload.begin(), enc->payload.end() - 3);
  EXPECT_FALSE(ApplyChunkInPlace(cut, b.hash(), pieces, scratch).ok());
}

}  // namespace
}  // namespace weightcast::codec
