// The reader accepts what SafetensorsWriter produces, byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "format/safetensors.h"
#include "unit/format/test_files.h"
#include "util/file.h"

namespace weightcast {
namespace {

TEST(SafetensorsRoundTrip, ReaderAcceptsWriterOutput) {
  testing::TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  const std::vector<TensorSpec> specs = {
      {"embed", DType::kBF16, {3, 5}}, {"empty", DType::kF32, {0, 4}},  {"fp4", DType::kF4, {6}},
      {"fp6", DType::kF6_E3M2, {4}},   {"scale", DType::kF8_E8M0, {3}}, {"scalar", DType::kI64, {}},
      {"mask", DType::kBool, {7}},
  };
  auto writer = SafetensorsWriter::Create(path, specs, {{"step", "12"}});
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  uint64_t data_bytes = 0;
  for (const TensorSpec& spec : specs) data_bytes += *TensorByteSize(spec.dtype, spec.shape);
  std::vector<uint8_t> data(data_bytes);
  std::iota(data.begin(), data.end(), uint8_t{1});
  ASSERT_TRUE((*writer)->Append(data).ok());
  ASSERT_TRUE((*writer)->Finish().ok());

  auto header = ReadSafetensorsHeader(path);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->metadata.at("step"), "12");
  EXPECT_EQ(header->data_offset() % 8, 0u);
  ASSERT_EQ(header->tensors.size(), specs.size());
  // Layout order is the spec order, except that the empty tensor sorts before the one that
  // starts at the same offset.
  uint64_t offset = 0;
  for (const TensorSpec& spec : specs) {
    const auto it = std::find_if(header->tensors.begin(), header->tensors.end(),
                                 [&](const TensorInfo& t) { return t.name == spec.name; });
    ASSERT_NE(it, header->tensors.end()) << spec.name;
    EXPECT_EQ(it->dtype, spec.dtype);
    EXPECT_EQ(it->shape, spec.shape);
    EXPECT_EQ(it->begin, offset) << spec.name;
    offset += *TensorByteSize(spec.dtype, spec.shape);
    EXPECT_EQ(it->end, offset) << spec.name;
  }

  // The data section read through the header's offsets is the data appended.
  auto mapped = MappedFile::Open(path);
  ASSERT_TRUE(mapped.ok());
  const auto bytes = mapped->bytes().subspan(header->data_offset());
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), data.begin(), data.end()));

  auto checkpoint = OpenCheckpoint(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  EXPECT_EQ(checkpoint->files.size(), 1u);  // the writer's temporary file is gone
  EXPECT_EQ(checkpoint->total_bytes(), mapped->size());
}

}  // namespace
}  // namespace weightcast
