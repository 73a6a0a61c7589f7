#include "client/assemble_slices.h"

#include <gtest/gtest.h>

namespace weightcast::client {
namespace {

std::span<const uint8_t> Bytes(const std::vector<uint8_t>& v) { return v; }

TEST(ConcatAlong, RowsAreSlicesLaidEndToEnd) {
  // A 3x2 U8 tensor cut into rows [0, 1) and [1, 3).
  const std::vector<uint8_t> top = {1, 2}, bottom = {3, 4, 5, 6};
  const std::vector<TensorView> slices = {{"w#0", "U8", {1, 2}, Bytes(top)},
                                          {"w#1", "U8", {2, 2}, Bytes(bottom)}};
  auto whole = ConcatAlong(0, slices);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(*whole, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
}

TEST(ConcatAlong, ColumnsInterleaveRowByRow) {
  // A 2x3 F16 tensor cut into columns [0, 1) and [1, 3): each element two bytes.
  const std::vector<uint8_t> left = {0xa0, 0xa1, 0xb0, 0xb1};
  const std::vector<uint8_t> right = {1, 1, 2, 2, 3, 3, 4, 4};
  const std::vector<TensorView> slices = {{"w#0", "F16", {2, 1}, Bytes(left)},
                                          {"w#1", "F16", {2, 2}, Bytes(right)}};
  auto whole = ConcatAlong(1, slices);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(*whole, (std::vector<uint8_t>{0xa0, 0xa1, 1, 1, 2, 2, 0xb0, 0xb1, 3, 3, 4, 4}));
}

TEST(ConcatAlong, RefusesSlicesThatDoNotFit) {
  const std::vector<uint8_t> a = {1, 2}, b = {3, 4, 5};
  EXPECT_FALSE(ConcatAlong(0, std::vector<TensorView>{}).ok());
  // Other extents off the cut dimension.
  EXPECT_EQ(ConcatAlong(0, std::vector<TensorView>{{"a", "U8", {1, 2}, Bytes(a)},
                                                   {"b", "U8", {1, 3}, Bytes(b)}})
                .status()
                .code(),
            Code::kInvalidArgument);
  // Other dtypes; bytes that disagree with the shape; a dimension the slices lack.
  EXPECT_FALSE(ConcatAlong(0, std::vector<TensorView>{{"a", "U8", {2}, Bytes(a)},
                                                      {"b", "I8", {3}, Bytes(b)}})
                   .ok());
  EXPECT_FALSE(ConcatAlong(0, std::vector<TensorView>{{"a", "U8", {3}, Bytes(a)}}).ok());
  EXPECT_FALSE(ConcatAlong(1, std::vector<TensorView>{{"a", "U8", {2}, Bytes(a)}}).ok());
}

}  // namespace
}  // namespace weightcast::client
