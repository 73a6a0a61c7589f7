#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "format/safetensors.h"
#include "unit/format/test_files.h"

namespace weightcast {
namespace {

using ::testing::HasSubstr;
using testing::SafetensorsBytes;
using testing::SafetensorsBytesWithLength;

Result<SafetensorsHeader> Parse(const std::vector<uint8_t>& bytes) {
  return ParseSafetensorsHeader(bytes, bytes.size(), "m.safetensors");
}

Result<SafetensorsHeader> Parse(std::string_view header, uint64_t data_size) {
  return Parse(SafetensorsBytes(header, data_size));
}

// Asserts a kCorrupt error whose message names the file and contains `problem`.
void ExpectRejected(const Result<SafetensorsHeader>& result, std::string_view problem) {
  ASSERT_FALSE(result.ok()) << "accepted, expected an error containing: " << problem;
  EXPECT_EQ(result.status().code(), Code::kCorrupt) << result.status().ToString();
  EXPECT_THAT(result.status().message(), HasSubstr("m.safetensors: "));
  EXPECT_THAT(result.status().message(), HasSubstr(std::string(problem)));
}

TEST(SafetensorsHeader, ParsesTensorsSortedByOffsetWithMetadata) {
  const std::string header = R"({"__metadata__":{"format":"pt","step":"7"},)"
                             R"("b":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},)"
                             R"("a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}})";
  auto result = Parse(header, 24);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const SafetensorsHeader& h = *result;
  EXPECT_EQ(h.header_bytes, header.size());
  EXPECT_EQ(h.data_offset(), 8 + header.size());
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "a");
  EXPECT_EQ(h.tensors[0].dtype, DType::kBF16);
  EXPECT_EQ(h.tensors[0].shape, (std::vector<uint64_t>{4}));
  EXPECT_EQ(h.tensors[0].begin, 0u);
  EXPECT_EQ(h.tensors[0].end, 8u);
  EXPECT_EQ(h.tensors[1].name, "b");
  EXPECT_EQ(h.tensors[1].dtype, DType::kF32);
  EXPECT_EQ(h.tensors[1].byte_size(), 16u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.metadata.at("step"), "7");
}

TEST(SafetensorsHeader, AcceptsEmptyHeaderWithNoData) {
  auto result = Parse("{}", 0);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->tensors.empty());
}

TEST(SafetensorsHeader, AcceptsTrailingSpacePadding) {
  auto result = Parse(R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}     )", 3);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->tensors.size(), 1u);
}

TEST(SafetensorsHeader, AcceptsZeroElementTensors) {
  auto result = Parse(R"({"z0":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},)"
                      R"("a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                      R"("z1":{"dtype":"F16","shape":[3,0],"data_offsets":[2,2]}})",
                      2);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->tensors.size(), 3u);
  EXPECT_EQ(result->tensors[0].name, "z0");
  EXPECT_EQ(result->tensors[1].name, "a");
  EXPECT_EQ(result->tensors[2].name, "z1");
}

TEST(SafetensorsHeader, AcceptsScalarShape) {
  auto result = Parse(R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}})", 8);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->tensors[0].shape.empty());
}

TEST(SafetensorsHeader, AcceptsEveryDtype) {
  // Eight elements of a dtype of b bits take b bytes.
  const std::vector<std::pair<std::string, uint64_t>> cases = {
      {"BOOL", 8},    {"U8", 8},      {"I8", 8},      {"U16", 16},    {"I16", 16},
      {"U32", 32},    {"I32", 32},    {"U64", 64},    {"I64", 64},    {"F16", 16},
      {"BF16", 16},   {"F32", 32},    {"F64", 64},    {"F8_E4M3", 8}, {"F8_E5M2", 8},
      {"F8_E8M0", 8}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"F4", 4},
  };
  for (const auto& [name, bits] : cases) {
    auto result = Parse(R"({"t":{"dtype":")" + name + R"(","shape":[2,4],"data_offsets":[0,)" +
                            std::to_string(bits) + "]}}",
                        bits);
    ASSERT_TRUE(result.ok()) << name << ": " << result.status().ToString();
    EXPECT_EQ(DTypeName(result->tensors[0].dtype), name);
    EXPECT_EQ(DTypeBits(result->tensors[0].dtype), bits);
  }
}

TEST(SafetensorsHeader, RejectsSubByteTensorsThatAreNotWholeBytes) {
  ExpectRejected(Parse(R"({"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2),
                 "not a whole number of bytes");
  ExpectRejected(Parse(R"({"t":{"dtype":"F6_E3M2","shape":[2],"data_offsets":[0,2]}})", 2),
                 "not a whole number of bytes");
  EXPECT_TRUE(Parse(R"({"t":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[0,3]}})", 3).ok());
}

TEST(SafetensorsHeader, RejectsFileShorterThanLengthField) {
  const std::vector<uint8_t> bytes = {1, 0, 0};
  ExpectRejected(Parse(bytes), "too short for the 8-byte header length");
}

TEST(SafetensorsHeader, RejectsHeaderLengthBeyondFile) {
  ExpectRejected(Parse(SafetensorsBytesWithLength(1000, "{}", 0)),
                 "header length 1000 is beyond the file (10 bytes)");
  ExpectRejected(Parse(SafetensorsBytesWithLength(~0ull, "{}", 0)), "header length");
  ExpectRejected(Parse(SafetensorsBytesWithLength(~0ull - 4, "{}", 0)), "header length");
}

TEST(SafetensorsHeader, RejectsHeaderLengthOverLimit) {
  const auto bytes = SafetensorsBytesWithLength(kMaxSafetensorsHeaderBytes + 1, "{}", 0);
  // The file claims to be large enough; the limit must still refuse it without reading.
  auto result = ParseSafetensorsHeader(bytes, 1ull << 40, "m.safetensors");
  ExpectRejected(result, "over the limit");
}

TEST(SafetensorsHeader, RejectsPrefixShorterThanHeader) {
  const auto bytes = SafetensorsBytes("{}", 0);
  auto result = ParseSafetensorsHeader(std::span(bytes).first(9), bytes.size(), "m.safetensors");
  ExpectRejected(result, "header bytes were read");
}

TEST(SafetensorsHeader, RejectsEmptyHeader) { ExpectRejected(Parse("", 0), "header is empty"); }

TEST(SafetensorsHeader, RejectsInvalidJson) {
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]})", 1),
                 "invalid JSON");
  ExpectRejected(Parse(R"({"a":1,})", 0), "invalid JSON");
  ExpectRejected(Parse(std::string("{}\0\0", 4), 0), "invalid JSON");
  ExpectRejected(Parse(R"({} {})", 0), "invalid JSON");
  // nlohmann on its own treats NUL as the end of input and would never see the second object.
  ExpectRejected(Parse(std::string("{}\0{\"a\":{}}", 11), 0), "NUL byte at byte 2");
}

TEST(SafetensorsHeader, RejectsInvalidUtf8) {
  ExpectRejected(Parse("{\"\xff\":{}}", 0), "not valid UTF-8");
  ExpectRejected(Parse("{\"\xc0\x80\":{}}", 0), "not valid UTF-8");      // overlong NUL
  ExpectRejected(Parse("{\"\xed\xa0\x80\":{}}", 0), "not valid UTF-8");  // surrogate
  ExpectRejected(Parse("{\"\xe2\x82\":{}}", 0), "not valid UTF-8");      // truncated sequence
  ExpectRejected(Parse(R"({"\ud800":{}})", 0), "invalid JSON");          // lone escaped surrogate
}

TEST(SafetensorsHeader, AcceptsNonAsciiNames) {
  auto result = Parse(
      "{\"w\xc3\xa9ight\xe2\x82\xac\":{\"dtype\":\"U8\",\"shape\":[1],"
      "\"data_offsets\":[0,1]}}",
      1);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->tensors[0].name, "w\xc3\xa9ight\xe2\x82\xac");
}

TEST(SafetensorsHeader, RejectsHeaderNotStartingWithBrace) {
  ExpectRejected(Parse(" {}", 0), "does not start with '{'");
  ExpectRejected(Parse("[]", 0), "does not start with '{'");
}

TEST(SafetensorsHeader, RejectsPaddingOtherThanSpaces) {
  ExpectRejected(Parse("{}\n", 0), "padded with characters other than spaces");
  ExpectRejected(Parse("{} \t", 0), "padded with characters other than spaces");
}

TEST(SafetensorsHeader, RejectsUnknownDtype) {
  ExpectRejected(Parse(R"({"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", 16),
                 "tensor \"a\": unknown dtype \"F128\"");
  ExpectRejected(Parse(R"({"a":{"dtype":"bf16","shape":[1],"data_offsets":[0,2]}})", 2),
                 "unknown dtype");
}

TEST(SafetensorsHeader, RejectsWrongFieldTypes) {
  ExpectRejected(Parse(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})", 1),
                 "dtype is a non-negative integer, expected a string");
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":1,"data_offsets":[0,1]}})", 1),
                 "shape is a non-negative integer, expected an array");
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1),
                 "shape holds a negative integer");
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}})", 1),
                 "shape holds a non-integer number");
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":["1"],"data_offsets":[0,1]}})", 1),
                 "shape holds string");
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":"0-1"}})", 1),
                 "data_offsets is string");
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", 1),
                 "data_offsets has 3 values");
  ExpectRejected(Parse(R"({"a":[1,2]})", 0), "tensor \"a\": entry is array");
  ExpectRejected(Parse(R"({"a":"x"})", 0), "tensor \"a\": entry is string");
}

TEST(SafetensorsHeader, RejectsNumbersBeyond64Bits) {
  ExpectRejected(
      Parse(R"({"a":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,1]}})", 1),
      "below 2^64");
}

TEST(SafetensorsHeader, RejectsUnknownAndMissingFields) {
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"stride":[1]}})", 1),
                 "unknown field \"stride\"");
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[1]}})", 0), "missing field \"data_offsets\"");
  ExpectRejected(Parse(R"({"a":{"shape":[1],"data_offsets":[0,1]}})", 1),
                 "missing field \"dtype\"");
}

TEST(SafetensorsHeader, RejectsShapeThatDisagreesWithOffsets) {
  ExpectRejected(Parse(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20),
                 "shape [2, 3] of F32 is 24 bytes but data_offsets [0, 20) hold 20");
}

TEST(SafetensorsHeader, RejectsShapeProductOverflow) {
  ExpectRejected(
      Parse(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0),
      "overflows");
  ExpectRejected(
      Parse(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0),
      "overflows");
}

TEST(SafetensorsHeader, RejectsEndBeforeBegin) {
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 4),
                 "end before they begin");
}

TEST(SafetensorsHeader, RejectsOverlappingOffsets) {
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                       R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                       6),
                 "tensor \"b\" at [2, 6) overlaps tensor \"a\" at [0, 4)");
}

TEST(SafetensorsHeader, RejectsTwoTensorsSharingBytes) {
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                       R"("b":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})",
                       4),
                 "overlaps");
}

TEST(SafetensorsHeader, RejectsEmptyTensorInsideAnother) {
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                       R"("z":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}})",
                       4),
                 "overlaps");
}

TEST(SafetensorsHeader, RejectsGapBetweenTensors) {
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                       R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
                       10),
                 "bytes [4, 6) of the data section belong to no tensor");
}

TEST(SafetensorsHeader, RejectsGapAtStart) {
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6),
                 "bytes [0, 2) of the data section belong to no tensor");
}

TEST(SafetensorsHeader, RejectsTruncatedData) {
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", 5),
                 "runs past the end of the data section (5 bytes)");
}

TEST(SafetensorsHeader, RejectsOffsetsFarOutOfRange) {
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,)"
                       R"(18446744073709551615]}})",
                       1),
                 "belong to no tensor");
}

TEST(SafetensorsHeader, RejectsDataNotEndingAtFileSize) {
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 7),
                 "the data section is 7 bytes but the tensors cover only 4");
  ExpectRejected(Parse("{}", 1), "the data section is 1 bytes but the tensors cover only 0");
}

TEST(SafetensorsHeader, RejectsDuplicateTensorNames) {
  // nlohmann alone would keep the second entry silently.
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                       R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                       4),
                 "duplicate key \"a\"");
}

TEST(SafetensorsHeader, RejectsDuplicateFieldsAndMetadataKeys) {
  ExpectRejected(Parse(R"({"a":{"dtype":"U8","dtype":"I8","shape":[4],"data_offsets":[0,4]}})", 4),
                 "duplicate key \"dtype\"");
  ExpectRejected(Parse(R"({"__metadata__":{"k":"1","k":"2"}})", 0), "duplicate key \"k\"");
}

TEST(SafetensorsHeader, RejectsNonStringMetadata) {
  ExpectRejected(Parse(R"({"__metadata__":{"step":7}})", 0),
                 "__metadata__ value for \"step\" is a non-negative integer");
  ExpectRejected(Parse(R"({"__metadata__":{"nested":{"a":"b"}}})", 0),
                 "__metadata__ value for \"nested\" is object");
  ExpectRejected(Parse(R"({"__metadata__":["a"]})", 0), "__metadata__ is array");
  ExpectRejected(Parse(R"({"__metadata__":null})", 0), "__metadata__ is null");
}

TEST(SafetensorsHeader, RejectsDeepNesting) {
  std::string header = R"({"a":{"dtype":"U8","shape":)";
  header += std::string(10000, '[') + std::string(10000, ']') + R"(,"data_offsets":[0,0]}})";
  ExpectRejected(Parse(header, 0), "nests deeper than 3 levels");
}

TEST(SafetensorsHeader, EscapesUnprintableNamesInErrors) {
  auto result = Parse(R"({"a\u0001b":{"dtype":"X","shape":[1],"data_offsets":[0,1]}})", 1);
  ExpectRejected(result, "tensor \"a\\x01b\": unknown dtype");
}

TEST(SafetensorsHeader, ReadsHeaderFromFile) {
  testing::TempDir dir;
  const auto path = dir.path() / "x.safetensors";
  testing::WriteBytes(
      path, SafetensorsBytes(R"({"a":{"dtype":"I32","shape":[3],"data_offsets":[0,12]}})", 12));
  auto result = ReadSafetensorsHeader(path);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->tensors.size(), 1u);
  EXPECT_EQ(result->tensors[0].dtype, DType::kI32);
}

TEST(SafetensorsHeader, ReadErrorsNameThePath) {
  testing::TempDir dir;
  const auto path = dir.path() / "bad.safetensors";
  testing::WriteBytes(path, SafetensorsBytesWithLength(1ull << 50, "{}", 0));
  auto result = ReadSafetensorsHeader(path);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), Code::kCorrupt);
  EXPECT_THAT(result.status().message(), HasSubstr(path.string() + ": header length"));

  auto missing = ReadSafetensorsHeader(dir.path() / "missing.safetensors");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("missing.safetensors"));

  auto directory = ReadSafetensorsHeader(dir.path());
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(directory.status().message(), HasSubstr("not a regular file"));

  const auto short_path = dir.path() / "short.safetensors";
  testing::WriteBytes(short_path, {1, 2, 3});
  auto too_short = ReadSafetensorsHeader(short_path);
  ASSERT_FALSE(too_short.ok());
  EXPECT_THAT(too_short.status().message(), HasSubstr("too short"));
}

}  // namespace
}  // namespace weightcast

namespace weightcast {
namespace {

// Real checkpoints have tens of thousands of tensors in one header. nlohmann's callback parser
// rescans the root object at every tensor entry (quadratic); this would take minutes with it.
TEST(SafetensorsHeader, ParsesManyTensorsInLinearTime) {
  constexpr int kTensors = 20000;
  std::string header = "{";
  for (int i = kTensors - 1; i >= 0; --i) {
    if (header.size() > 1) header += ",";
    header += "\"layer." + std::to_string(i) + "\":{\"dtype\":\"F16\",\"shape\":[2],";
    header += "\"data_offsets\":[" + std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
  }
  header += "}";
  auto result = Parse(header, 4 * kTensors);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->tensors.size(), static_cast<size_t>(kTensors));
  EXPECT_EQ(result->tensors[0].name, "layer.0");
  EXPECT_EQ(result->tensors.back().name, "layer." + std::to_string(kTensors - 1));
}

}  // namespace
}  // namespace weightcast
