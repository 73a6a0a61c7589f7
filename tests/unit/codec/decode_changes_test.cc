// codec::DecodeChanges: a payload decoded into the changes a device applies where the chunk lies.
// Applying them to the base gives exactly the target, for every transform and for a full chunk.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "codec/chunk_codec.h"

namespace weightcast::codec {
namespace {

using Bytes = std::vector<uint8_t>;

// What a device does with the changes, written plainly on the host.
Bytes ApplyChanges(const ChunkChanges& changes, Bytes chunk) {
  switch (changes.kind) {
    case ChunkChanges::Kind::kFull:
      return changes.bytes;
    case ChunkChanges::Kind::kXorBytes:
      for (size_t i = 0; i < chunk.size(); ++i) chunk[i] ^= changes.bytes[i];
      return chunk;
    case ChunkChanges::Kind::kElements:
      for (const ElementChanges& g : changes.groups) {
        for (size_t e = 0; e < g.offsets.size(); ++e) {
          uint8_t* at = chunk.data() + g.offsets[e];
          const uint8_t* v = g.values.data() + e * g.width;
          if (!g.add) {
            for (uint8_t k = 0; k < g.width; ++k) at[k] ^= v[k];
            continue;
          }
          unsigned carry = 0;  // little-endian addition, dropping the last carry
          for (uint8_t k = 0; k < g.width; ++k) {
            const unsigned sum = at[k] + v[k] + carry;
            at[k] = static_cast<uint8_t>(sum);
            carry = sum >> 8;
          }
        }
      }
      return chunk;
  }
  return chunk;
}

struct Case {
  Transform xor_transform;
  double changed;
  bool full;  // a full payload of a target unrelated to its base
};

class DecodeChangesTest : public ::testing::TestWithParam<Case> {};

TEST_P(DecodeChangesTest, AppliedToTheBaseGiveTheTarget) {
  std::mt19937_64 rng(5);
  // A header, a bf16 run, padding, an f32 run and an f64 run cut by the chunk's end (a tail).
  const std::vector<Segment> segs = {{100, 1}, {40000, 2}, {36, 1}, {24000, 4}, {8003, 8}};
  uint64_t size = 0;
  for (const Segment& s : segs) size += s.size;
  Bytes base(size), target;
  for (auto& x : base) x = static_cast<uint8_t>(rng());
  target = base;
  if (GetParam().full) {
    for (auto& x : target) x = static_cast<uint8_t>(rng());
  } else {
    std::bernoulli_distribution pick(GetParam().changed);
    for (uint64_t i = 100; i < 40100; i += 2)
      if (pick(rng)) target[i] += 1;  // carries into the next byte now and then
    for (uint64_t i = 40136; i < 64136; i += 4)
      if (pick(rng)) target[i + 1] -= 3;
    target[size - 1] ^= 0x40;  // the tail
    target[5] = 0x7f;          // a header byte
  }
  ChunkEncodeOptions opt;
  opt.xor_transform = GetParam().xor_transform;
  opt.try_full_above = 2.0;  // keep the xor form
  CodecScratch scratch;
  const auto b = HashedChunk::Compute(base, HashAlgorithm::kSha256);
  const auto t = HashedChunk::Compute(target, HashAlgorithm::kSha256);
  auto enc = GetParam().full ? EncodeFullChunk(t, segs, opt, scratch)
                             : EncodeChunk(b, t, segs, opt, scratch);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  ASSERT_EQ(enc->encoding, GetParam().full ? ChunkEncoding::kFull : ChunkEncoding::kXor);

  auto changes = DecodeChanges(enc->payload, b.hash(), size, scratch);
  ASSERT_TRUE(changes.ok()) << changes.status().ToString();
  EXPECT_EQ(changes->kind, GetParam().full            ? ChunkChanges::Kind::kFull
                           : IsSparse(enc->transform) ? ChunkChanges::Kind::kElements
                                                      : ChunkChanges::Kind::kXorBytes);
  EXPECT_EQ(ApplyChanges(*changes, base), target);
  if (changes->kind == ChunkChanges::Kind::kElements) {
    for (const ElementChanges& g : changes->groups) {
      EXPECT_EQ(g.values.size(), g.offsets.size() * g.width);
      for (size_t e = 1; e < g.offsets.size(); ++e) EXPECT_LT(g.offsets[e - 1], g.offsets[e]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transforms, DecodeChangesTest,
                         ::testing::Values(Case{Transform::kSparseDiff, 0.01, false},
                                           Case{Transform::kSparse, 0.05, false},
                                           Case{Transform::kPlanes, 0.3, false},
                                           Case{Transform::kNone, 0.5, false},
                                           Case{Transform::kNone, 0, true}));

TEST(DecodeChanges, RefusesAnotherBaseAndAnotherSize) {
  Bytes base(4096, 1), target(4096, 1);
  target[10] = 2;
  CodecScratch scratch;
  const auto b = HashedChunk::Compute(base, HashAlgorithm::kSha256);
  const auto t = HashedChunk::Compute(target, HashAlgorithm::kSha256);
  const std::vector<Segment> segs = {{4096, 2}};
  auto enc = EncodeChunk(b, t, segs, {}, scratch);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(DecodeChanges(enc->payload, t.hash(), 4096, scratch).status().code(),
            Code::kFailedPrecondition);
  EXPECT_EQ(DecodeChanges(enc->payload, b.hash(), 2048, scratch).status().code(),
            Code::kFailedPrecondition);
  Bytes cut(enc->payload.begin(), enc->payload.end() - 1);
  EXPECT_FALSE(DecodeChanges(cut, b.hash(), 4096, scratch).ok());
}

}  // namespace
}  // namespace weightcast::codec
