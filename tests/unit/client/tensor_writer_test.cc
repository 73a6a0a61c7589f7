// The file image a coordinated publisher publishes from memory is byte for byte the file
// WriteTensorsFile writes for the same tensors.
#include "client/tensor_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "testing/temp_dir.h"

namespace weightcast::client {
namespace {

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed + i * 7);
  return out;
}

TEST(TensorWriter, TheImageIsTheFileWriteTensorsFileWrites) {
  // Given out of file order: the narrow type first, names unsorted.
  const std::vector<uint8_t> a = Pattern(3 * 5, 1), b = Pattern(4 * 2 * 6, 2),
                             c = Pattern(2 * 8 * 3, 3);
  const std::vector<TensorBytes> tensors = {{"z.mask", DType::kU8, {3, 5}, a},
                                            {"b.weight", DType::kBF16, {8, 3}, c},
                                            {"a.scale", DType::kF32, {2, 6}, b}};
  auto layout = LayOutTensorsFile(tensors);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  std::vector<uint8_t> image(layout->size);
  std::memcpy(image.data(), layout->header.data(), layout->header.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::memcpy(image.data() + layout->offsets[i], tensors[i].bytes.data(),
                tensors[i].bytes.size());
  }
  testing::TempDir dir;
  ASSERT_TRUE(WriteTensorsFile(dir.path() / "model.safetensors", tensors).ok());
  std::ifstream in(dir.path() / "model.safetensors", std::ios::binary);
  const std::vector<uint8_t> file{std::istreambuf_iterator<char>(in), {}};
  EXPECT_EQ(image, file);
  // The widest type first, 8-byte aligned after the header.
  EXPECT_EQ(layout->offsets[2], layout->header.size());
  EXPECT_EQ(layout->header.size() % 8, 0u);
}

TEST(TensorWriter, TheLayoutRefusesWhatTheFileRefuses) {
  const std::vector<uint8_t> bytes = Pattern(4, 0);
  EXPECT_EQ(
      LayOutTensorsFile(std::vector<TensorBytes>{{"x", DType::kF32, {2}, bytes}}).status().code(),
      Code::kInvalidArgument);  // 2 floats are 8 bytes, not 4
  EXPECT_EQ(LayOutTensorsFile(std::vector<TensorBytes>{{"x", DType::kU8, {4}, bytes},
                                                       {"x", DType::kU8, {4}, bytes}})
                .status()
                .code(),
            Code::kInvalidArgument);
}

}  // namespace
}  // namespace weightcast::client
