#include "synth/numeric.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "synth/prng.h"

namespace weightcast::synth {
namespace {

TEST(SynthNumeric, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(SynthNumeric, F16MatchesKnownEncodings) {
  EXPECT_EQ(FloatToF16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToF16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(FloatToF16(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToF16(0x1p-25f), 0x0000);  // halfway to it: ties to even (zero)
  EXPECT_EQ(FloatToF16(0x1p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToF16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(FloatToF16(1.0f + 0x1p-10f + 0x1p-11f), 0x3c02);
}

TEST(SynthNumeric, F16RoundTripsEveryFiniteHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    EXPECT_EQ(FloatToF16(F16ToFloat(static_cast<uint16_t>(h))), h) << h;
  }
}

TEST(SynthNumeric, E4M3RoundTripsEveryFiniteCode) {
  for (uint32_t b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    EXPECT_EQ(FloatToE4M3(E4M3ToFloat(static_cast<uint8_t>(b))), b) << b;
  }
  EXPECT_EQ(E4M3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(FloatToE4M3(1000.0f), 0x7e);  // saturates
  EXPECT_EQ(E4M3ToFloat(0x01), 0x1p-9f);
  EXPECT_TRUE(std::isnan(E4M3ToFloat(0x7f)));
}

TEST(SynthNumeric, ValuesInsideTheRoundingCellRoundBack) {
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF8_E4M3}) {
    // Powers of two have a narrower gap below than above; include them on both signs.
    for (float v : {0.02f, -0.013f, 1.0f, 0.25f, -0.25f, 3.0e-3f, -1.0f, 0.015625f}) {
      uint8_t enc[4];
      EncodeElement(dtype, v, enc);
      float stored = DecodeElement(dtype, enc);
      RoundingCell cell = CellAround(dtype, stored);
      ASSERT_GT(cell.below, 0.0f);
      ASSERT_GT(cell.above, 0.0f);
      for (float inside : {stored - 0.99f * cell.below, stored + 0.99f * cell.above}) {
        uint8_t again[4];
        EncodeElement(dtype, inside, again);
        EXPECT_EQ(std::memcmp(enc, again, SynthElementBytes(dtype)), 0)
            << DTypeName(dtype) << " " << v << " " << inside;
      }
      // Just beyond the cell is the neighbour.
      for (float outside : {stored - 1.01f * cell.below, stored + 1.01f * cell.above}) {
        uint8_t again[4];
        EncodeElement(dtype, outside, again);
        EXPECT_NE(std::memcmp(enc, again, SynthElementBytes(dtype)), 0)
            << DTypeName(dtype) << " " << v << " " << outside;
      }
    }
  }
  EXPECT_EQ(CellAround(DType::kBF16, 1.0f).below * 2, CellAround(DType::kBF16, 1.0f).above);
  EXPECT_EQ(CellAround(DType::kF32, 1.0f).above, 0.0f);
  EXPECT_EQ(CellAround(DType::kBF16, 0.0f).above, 0.0f);
}

TEST(SynthPrng, NormalIshHasUnitMoments) {
  double sum = 0;
  double sq = 0;
  const int n = 200000;
  uint64_t key = StreamKey(1, HashName("t"), Stream::kBaseValue);
  for (int i = 0; i < n; ++i) {
    double z = NormalIsh(RandomAt(key, i));
    sum += z;
    sq += z * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.02);
}

TEST(SynthPrng, StreamsAndNamesAreIndependent) {
  EXPECT_NE(HashName("model.layers.1.mlp.up_proj.weight"),
            HashName("model.layers.2.mlp.up_proj.weight"));
  EXPECT_NE(StreamKey(0, 1, Stream::kGradNoise, 1), StreamKey(0, 1, Stream::kGradNoise, 2));
  EXPECT_NE(StreamKey(0, 1, Stream::kBaseValue), StreamKey(1, 1, Stream::kBaseValue));
}

}  // namespace
}  // namespace weightcast::synth
