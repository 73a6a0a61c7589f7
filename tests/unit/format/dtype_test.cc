#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "format/safetensors.h"

namespace weightcast {
namespace {

TEST(DType, NamesRoundTrip) {
  for (int i = 0; i <= static_cast<int>(DType::kF4); ++i) {
    const auto dtype = static_cast<DType>(i);
    auto parsed = ParseDType(DTypeName(dtype));
    ASSERT_TRUE(parsed.ok()) << DTypeName(dtype);
    EXPECT_EQ(*parsed, dtype);
  }
  EXPECT_EQ(DTypeName(DType::kBF16), "BF16");
  EXPECT_EQ(DTypeName(DType::kF8_E4M3), "F8_E4M3");
  EXPECT_EQ(DTypeName(DType::kBool), "BOOL");
}

TEST(DType, RejectsUnknownNames) {
  for (const char* name : {"", "bf16", "F8_E4M3FN", "C64", "F128", "BF16 "}) {
    auto parsed = ParseDType(name);
    ASSERT_FALSE(parsed.ok()) << name;
    EXPECT_EQ(parsed.status().code(), Code::kInvalidArgument);
  }
}

TEST(DType, BitWidths) {
  EXPECT_EQ(DTypeBits(DType::kBool), 8u);
  EXPECT_EQ(DTypeBits(DType::kU64), 64u);
  EXPECT_EQ(DTypeBits(DType::kBF16), 16u);
  EXPECT_EQ(DTypeBits(DType::kF8_E8M0), 8u);
  EXPECT_EQ(DTypeBits(DType::kF6_E2M3), 6u);
  EXPECT_EQ(DTypeBits(DType::kF6_E3M2), 6u);
  EXPECT_EQ(DTypeBits(DType::kF4), 4u);
}

TEST(TensorByteSize, MultipliesShape) {
  const std::vector<uint64_t> shape = {3, 4, 5};
  EXPECT_EQ(*TensorByteSize(DType::kF32, shape), 240u);
  EXPECT_EQ(*TensorByteSize(DType::kF32, std::vector<uint64_t>{}), 4u);  // scalar
  EXPECT_EQ(*TensorByteSize(DType::kF64, std::vector<uint64_t>{0, 7}), 0u);
}

TEST(TensorByteSize, SubByteTypesMustFillWholeBytes) {
  EXPECT_EQ(*TensorByteSize(DType::kF4, std::vector<uint64_t>{2}), 1u);
  EXPECT_EQ(*TensorByteSize(DType::kF6_E2M3, std::vector<uint64_t>{4}), 3u);
  EXPECT_FALSE(TensorByteSize(DType::kF4, std::vector<uint64_t>{3}).ok());
  EXPECT_FALSE(TensorByteSize(DType::kF6_E3M2, std::vector<uint64_t>{2}).ok());
  EXPECT_FALSE(TensorByteSize(DType::kF4, std::vector<uint64_t>{}).ok());  // one 4-bit scalar
}

TEST(TensorByteSize, RejectsOverflow) {
  const uint64_t big = 1ull << 32;
  EXPECT_EQ(TensorByteSize(DType::kU8, std::vector<uint64_t>{big, big}).status().code(),
            Code::kOutOfRange);
  // Elements fit in 64 bits but bits do not.
  EXPECT_FALSE(TensorByteSize(DType::kU8, std::vector<uint64_t>{1ull << 62}).ok());
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  EXPECT_FALSE(TensorByteSize(DType::kU8, std::vector<uint64_t>{max, 2}).ok());
  EXPECT_EQ(*TensorByteSize(DType::kU8, std::vector<uint64_t>{1ull << 60}), 1ull << 60);
}

}  // namespace
}  // namespace weightcast
