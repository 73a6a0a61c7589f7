#include "format/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "unit/synth/test_dir.h"
#include "util/file.h"

namespace weightcast {
namespace {

using synth::TempDir;

std::vector<uint8_t> Bytes(size_t n, uint8_t start) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(start + i);
  return v;
}

TEST(SafetensorsWriter, RoundTripsThroughTheParser) {
  TempDir dir;
  auto path = dir.path() / "a.safetensors";
  std::vector<TensorSpec> specs = {
      {"w", DType::kBF16, {3, 5}},
      {"b", DType::kF32, {7}},
      {"scalar", DType::kI64, {}},
      {"empty", DType::kF16, {0, 4}},
  };
  auto writer = SafetensorsWriter::Create(path, specs, {{"format", "pt"}});
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  std::vector<uint8_t> data = Bytes(30 + 28 + 8, 1);
  // Uneven pieces that cross tensor boundaries.
  ASSERT_TRUE((*writer)->Append({data.data(), 7}).ok());
  ASSERT_TRUE((*writer)->Append({data.data() + 7, 40}).ok());
  ASSERT_TRUE((*writer)->Append({data.data() + 47, data.size() - 47}).ok());
  ASSERT_TRUE((*writer)->Finish().ok());

  auto header = ReadSafetensorsHeader(path);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->data_offset() % 8, 0u);
  ASSERT_EQ(header->tensors.size(), 4u);
  EXPECT_EQ(header->tensors[0].name, "w");
  EXPECT_EQ(header->tensors[0].dtype, DType::kBF16);
  EXPECT_EQ(header->tensors[0].shape, (std::vector<uint64_t>{3, 5}));
  EXPECT_EQ(header->tensors[0].begin, 0u);
  EXPECT_EQ(header->tensors[0].end, 30u);
  EXPECT_EQ(header->tensors[1].name, "b");
  EXPECT_EQ(header->tensors[1].end, 58u);
  EXPECT_EQ(header->tensors[2].shape.size(), 0u);
  EXPECT_EQ(header->tensors[3].byte_size(), 0u);
  EXPECT_EQ(header->metadata.at("format"), "pt");

  auto file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok());
  ASSERT_EQ(file->size(), header->data_offset() + data.size());
  EXPECT_EQ(std::memcmp(file->bytes().data() + header->data_offset(), data.data(), data.size()), 0);
  // The JSON ends with '}' and is padded with spaces only, as the format asks.
  std::string json(reinterpret_cast<const char*>(file->bytes().data()) + 8, header->header_bytes);
  size_t close = json.find_last_of('}');
  ASSERT_NE(close, std::string::npos);
  EXPECT_EQ(json.find_first_not_of(' ', close + 1), std::string::npos);
  EXPECT_LT(json.size() - close - 1, 8u);
}

TEST(SafetensorsWriter, NothingVisibleUnderTheFinalNameBeforeFinish) {
  TempDir dir;
  auto path = dir.path() / "a.safetensors";
  auto writer = SafetensorsWriter::Create(path, {{"w", DType::kU8, {16}}});
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Append(Bytes(16, 0)).ok());
  EXPECT_FALSE(std::filesystem::exists(path));
  ASSERT_TRUE((*writer)->Finish().ok());
  EXPECT_TRUE(std::filesystem::exists(path));
  // Only the final file is left: the temporary was renamed.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(SafetensorsWriter, AbandonedWriterLeavesNoFile) {
  TempDir dir;
  {
    auto writer = SafetensorsWriter::Create(dir.path() / "a.safetensors", {{"w", DType::kU8, {4}}});
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append(Bytes(2, 0)).ok());
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(SafetensorsWriter, FinishRejectsMissingBytes) {
  TempDir dir;
  auto path = dir.path() / "a.safetensors";
  auto writer = SafetensorsWriter::Create(path, {{"w", DType::kF32, {4}}});
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Append(Bytes(15, 0)).ok());
  Status st = (*writer)->Finish();
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(SafetensorsWriter, AppendRejectsOverrun) {
  TempDir dir;
  auto writer = SafetensorsWriter::Create(dir.path() / "a.safetensors", {{"w", DType::kU8, {4}}});
  ASSERT_TRUE(writer.ok());
  EXPECT_EQ((*writer)->Append(Bytes(5, 0)).code(), Code::kOutOfRange);
  // The writer stays failed.
  EXPECT_FALSE((*writer)->Finish().ok());
}

TEST(SafetensorsWriter, RejectsDuplicateAndReservedNames) {
  TempDir dir;
  auto dup = SafetensorsWriter::Create(dir.path() / "a.safetensors",
                                       {{"w", DType::kU8, {1}}, {"w", DType::kU8, {1}}});
  EXPECT_EQ(dup.status().code(), Code::kInvalidArgument);
  auto reserved =
      SafetensorsWriter::Create(dir.path() / "b.safetensors", {{"__metadata__", DType::kU8, {1}}});
  EXPECT_EQ(reserved.status().code(), Code::kInvalidArgument);
  auto empty = SafetensorsWriter::Create(dir.path() / "c.safetensors", {{"", DType::kU8, {1}}});
  EXPECT_EQ(empty.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(SafetensorsWriter, LargeAppendsBypassTheBuffer) {
  TempDir dir;
  auto path = dir.path() / "big.safetensors";
  const size_t n = (3 << 20) + 5;
  auto writer = SafetensorsWriter::Create(path, {{"w", DType::kU8, {n}}});
  ASSERT_TRUE(writer.ok());
  std::vector<uint8_t> data = Bytes(n, 3);
  ASSERT_TRUE((*writer)->Append({data.data(), 10}).ok());
  ASSERT_TRUE((*writer)->Append({data.data() + 10, (2 << 20)}).ok());
  ASSERT_TRUE((*writer)->Append({data.data() + 10 + (2 << 20), n - 10 - (2 << 20)}).ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  auto header = ReadSafetensorsHeader(path);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  auto file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(std::memcmp(file->bytes().data() + header->data_offset(), data.data(), n), 0);
}

}  // namespace
}  // namespace weightcast
