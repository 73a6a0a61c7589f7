#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <filesystem>
#include <string>

#include "format/safetensors.h"
#include "unit/format/test_files.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::SafetensorsBytes;
using testing::TempDir;
using testing::WriteBytes;
using testing::WriteText;

// One U8 tensor per name, `bytes` long each, laid out in order.
std::vector<uint8_t> ShardBytes(const std::vector<std::string>& names, uint64_t bytes = 4) {
  std::string header = "{";
  uint64_t offset = 0;
  for (const std::string& name : names) {
    if (header.size() > 1) header += ",";
    header += "\"" + name + "\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(bytes) +
              "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  return SafetensorsBytes(header, offset);
}

std::string IndexJson(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out = R"({"metadata":{"total_size":16},"weight_map":{)";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += ",";
    out += "\"" + entries[i].first + "\":\"" + entries[i].second + "\"";
  }
  return out + "}}";
}

void WriteShardedModel(const fs::path& dir) {
  WriteBytes(dir / "model-00001-of-00002.safetensors", ShardBytes({"a", "b"}));
  WriteBytes(dir / "model-00002-of-00002.safetensors", ShardBytes({"c"}));
  WriteText(dir / "model.safetensors.index.json",
            IndexJson({{"a", "model-00001-of-00002.safetensors"},
                       {"b", "model-00001-of-00002.safetensors"},
                       {"c", "model-00002-of-00002.safetensors"}}));
}

void ExpectError(const Result<Checkpoint>& result, Code code, std::string_view problem) {
  ASSERT_FALSE(result.ok()) << "accepted, expected: " << problem;
  EXPECT_EQ(result.status().code(), code) << result.status().ToString();
  EXPECT_THAT(result.status().message(), HasSubstr(std::string(problem)));
}

TEST(Checkpoint, OpensSingleSafetensorsFile) {
  TempDir dir;
  const auto bytes = ShardBytes({"w", "v"}, 6);
  WriteBytes(dir.path() / "model.safetensors", bytes);
  auto result = OpenCheckpoint(dir.path() / "model.safetensors");
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->root, dir.path());
  ASSERT_EQ(result->files.size(), 1u);
  EXPECT_EQ(result->files[0].relative_path, "model.safetensors");
  EXPECT_TRUE(result->files[0].is_safetensors);
  EXPECT_EQ(result->files[0].size, bytes.size());
  EXPECT_EQ(result->files[0].header.tensors.size(), 2u);
  EXPECT_EQ(result->total_bytes(), bytes.size());
  EXPECT_TRUE(result->weight_map.empty());
}

TEST(Checkpoint, OpensDirectoryWithEveryRegularFileSorted) {
  TempDir dir;
  WriteBytes(dir.path() / "model.safetensors", ShardBytes({"w"}));
  WriteText(dir.path() / "config.json", R"({"hidden_size": 4})");
  WriteText(dir.path() / ".gitattributes", "*.safetensors filter=lfs\n");
  WriteText(dir.path() / "tokenizer" / "vocab.txt", "a\nb\n");
  WriteText(dir.path() / "empty.txt", "");
  auto result = OpenCheckpoint(dir.path());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  std::vector<std::string> paths;
  for (const CheckpointFile& f : result->files) paths.push_back(f.relative_path);
  EXPECT_EQ(paths, (std::vector<std::string>{".gitattributes", "config.json", "empty.txt",
                                             "model.safetensors", "tokenizer/vocab.txt"}));
  EXPECT_FALSE(result->files[1].is_safetensors);
  EXPECT_EQ(result->files[1].size, 18u);
  EXPECT_EQ(result->files[4].size, 4u);
  uint64_t expected_total = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir.path())) {
    if (entry.is_regular_file()) expected_total += entry.file_size();
  }
  EXPECT_EQ(result->total_bytes(), expected_total);
}

TEST(Checkpoint, OpensShardedCheckpointWithIndex) {
  TempDir dir;
  WriteShardedModel(dir.path());
  auto result = OpenCheckpoint(dir.path());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->files.size(), 3u);
  EXPECT_EQ(result->weight_map.size(), 3u);
  EXPECT_EQ(result->weight_map.at("c"), "model-00002-of-00002.safetensors");
  EXPECT_FALSE(result->files[2].is_safetensors);  // the index itself is carried as bytes
}

TEST(Checkpoint, RelativePathsIgnoreTrailingSlash) {
  TempDir dir;
  WriteShardedModel(dir.path());
  auto result = OpenCheckpoint(dir.path().string() + "/");
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->files.size(), 3u);
  EXPECT_EQ(result->files[0].relative_path, "model-00001-of-00002.safetensors");
  EXPECT_EQ(result->weight_map.at("a"), "model-00001-of-00002.safetensors");
}

TEST(Checkpoint, RejectsTensorListedByTwoIndexes) {
  TempDir dir;
  WriteShardedModel(dir.path());
  WriteText(dir.path() / "copy.safetensors.index.json",
            IndexJson({{"a", "model-00001-of-00002.safetensors"}}));
  ExpectError(OpenCheckpoint(dir.path()), Code::kCorrupt, "listed by another index too");
}

TEST(Checkpoint, IndexInSubdirectoryNamesFilesBesideIt) {
  TempDir dir;
  WriteBytes(dir.path() / "unet" / "part-1.safetensors", ShardBytes({"u1"}));
  WriteBytes(dir.path() / "unet" / "part-2.safetensors", ShardBytes({"u2"}));
  WriteText(dir.path() / "unet" / "part.safetensors.index.json",
            IndexJson({{"u1", "part-1.safetensors"}, {"u2", "part-2.safetensors"}}));
  WriteBytes(dir.path() / "vae.safetensors", ShardBytes({"v"}));  // no index at the top: fine
  auto result = OpenCheckpoint(dir.path());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->weight_map.at("u2"), "unet/part-2.safetensors");
  EXPECT_FALSE(result->weight_map.contains("v"));
}

TEST(Checkpoint, RejectsIndexNamingMissingFile) {
  TempDir dir;
  WriteShardedModel(dir.path());
  fs::remove(dir.path() / "model-00002-of-00002.safetensors");
  ExpectError(OpenCheckpoint(dir.path()), Code::kCorrupt,
              "weight_map entry for tensor \"c\" names \"model-00002-of-00002.safetensors\", "
              "which does not exist");
}

TEST(Checkpoint, RejectsIndexNamingWrongFile) {
  TempDir dir;
  WriteShardedModel(dir.path());
  WriteText(dir.path() / "model.safetensors.index.json",
            IndexJson({{"a", "model-00001-of-00002.safetensors"},
                       {"b", "model-00002-of-00002.safetensors"},
                       {"c", "model-00002-of-00002.safetensors"}}));
  ExpectError(OpenCheckpoint(dir.path()), Code::kCorrupt,
              "which does not hold it (it is in model-00001-of-00002.safetensors)");
}

TEST(Checkpoint, RejectsIndexNamingUnknownTensor) {
  TempDir dir;
  WriteShardedModel(dir.path());
  WriteText(dir.path() / "model.safetensors.index.json",
            IndexJson({{"a", "model-00001-of-00002.safetensors"},
                       {"b", "model-00001-of-00002.safetensors"},
                       {"c", "model-00002-of-00002.safetensors"},
                       {"ghost", "model-00002-of-00002.safetensors"}}));
  ExpectError(OpenCheckpoint(dir.path()), Code::kCorrupt, "does not hold it (no file does)");
}

TEST(Checkpoint, RejectsTensorMissingFromIndex) {
  TempDir dir;
  WriteShardedModel(dir.path());
  WriteBytes(dir.path() / "model-00003-of-00002.safetensors", ShardBytes({"stale"}));
  ExpectError(OpenCheckpoint(dir.path()), Code::kCorrupt,
              "tensor \"stale\" is not in the weight_map of model.safetensors.index.json");
}

TEST(Checkpoint, RejectsIndexPointingOutside) {
  TempDir dir;
  WriteShardedModel(dir.path());
  WriteText(dir.path() / "model.safetensors.index.json",
            IndexJson({{"a", "../model-00001-of-00002.safetensors"}}));
  ExpectError(OpenCheckpoint(dir.path()), Code::kCorrupt, "not a file inside the checkpoint");
  WriteText(dir.path() / "model.safetensors.index.json", IndexJson({{"a", "/etc/passwd"}}));
  ExpectError(OpenCheckpoint(dir.path()), Code::kCorrupt, "not a file inside the checkpoint");
}

TEST(Checkpoint, RejectsMalformedIndex) {
  TempDir dir;
  WriteShardedModel(dir.path());
  const fs::path index = dir.path() / "model.safetensors.index.json";
  WriteText(index, "{\"weight_map\": ");
  ExpectError(OpenCheckpoint(dir.path()), Code::kCorrupt, "invalid JSON");
  WriteText(index, R"({"metadata":{}})");
  ExpectError(OpenCheckpoint(dir.path()), Code::kCorrupt, "no \"weight_map\"");
  WriteText(index, R"({"weight_map":[]})");
  ExpectError(OpenCheckpoint(dir.path()), Code::kCorrupt, "\"weight_map\" is not an object");
  WriteText(index, R"({"weight_map":{"a":1}})");
  ExpectError(OpenCheckpoint(dir.path()), Code::kCorrupt, "is not a string");
  WriteText(index, R"({"weight_map":{"a":"model-00001-of-00002.safetensors",)"
                   R"("a":"model-00002-of-00002.safetensors"}})");
  ExpectError(OpenCheckpoint(dir.path()), Code::kCorrupt, "duplicate key \"a\"");
  WriteText(index, "{\"weight_map\":{\"\xff\":\"x\"}}");
  ExpectError(OpenCheckpoint(dir.path()), Code::kCorrupt, "not valid UTF-8");
}

TEST(Checkpoint, RejectsIndexNamingNonSafetensorsFile) {
  TempDir dir;
  WriteShardedModel(dir.path());
  WriteText(dir.path() / "config.json", "{}");
  WriteText(dir.path() / "model.safetensors.index.json", IndexJson({{"a", "config.json"}}));
  ExpectError(OpenCheckpoint(dir.path()), Code::kCorrupt, "which is not a .safetensors file");
}

TEST(Checkpoint, RejectsDuplicateTensorAcrossShards) {
  TempDir dir;
  WriteBytes(dir.path() / "a.safetensors", ShardBytes({"x", "y"}));
  WriteBytes(dir.path() / "sub" / "b.safetensors", ShardBytes({"y"}));
  ExpectError(OpenCheckpoint(dir.path()), Code::kCorrupt, "tensor \"y\" is also in a.safetensors");
}

TEST(Checkpoint, RejectsBadShardNamingIt) {
  TempDir dir;
  WriteBytes(dir.path() / "good.safetensors", ShardBytes({"x"}));
  auto bad = ShardBytes({"y"});
  bad.pop_back();  // truncated data
  WriteBytes(dir.path() / "bad.safetensors", bad);
  auto result = OpenCheckpoint(dir.path());
  ExpectError(result, Code::kCorrupt, "bad.safetensors: tensor \"y\"");
}

TEST(Checkpoint, RejectsSymlinkOutside) {
  TempDir dir;
  TempDir outside;
  WriteBytes(outside.path() / "secret.safetensors", ShardBytes({"s"}));
  WriteBytes(dir.path() / "model.safetensors", ShardBytes({"w"}));
  fs::create_symlink(outside.path() / "secret.safetensors", dir.path() / "link.safetensors");
  ExpectError(OpenCheckpoint(dir.path()), Code::kInvalidArgument,
              "symlink points outside the checkpoint");
}

TEST(Checkpoint, RejectsRelativeSymlinkEscaping) {
  TempDir dir;
  fs::create_directories(dir.path() / "ckpt");
  WriteText(dir.path() / "other.txt", "x");
  fs::create_symlink("../other.txt", dir.path() / "ckpt" / "other.txt");
  ExpectError(OpenCheckpoint(dir.path() / "ckpt"), Code::kInvalidArgument,
              "symlink points outside the checkpoint");
}

TEST(Checkpoint, FollowsSymlinkToFileInside) {
  TempDir dir;
  WriteBytes(dir.path() / "blobs" / "abc", ShardBytes({"w"}));
  fs::create_symlink("blobs/abc", dir.path() / "model.safetensors");
  auto result = OpenCheckpoint(dir.path());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->files.size(), 2u);
  EXPECT_EQ(result->files[1].relative_path, "model.safetensors");
  EXPECT_TRUE(result->files[1].is_safetensors);
  EXPECT_EQ(result->files[1].header.tensors.size(), 1u);
}

TEST(Checkpoint, RejectsDanglingAndDirectorySymlinks) {
  {
    TempDir dir;
    WriteText(dir.path() / "a.txt", "x");
    fs::create_symlink("nowhere", dir.path() / "b.txt");
    ExpectError(OpenCheckpoint(dir.path()), Code::kInvalidArgument, "symlink does not resolve");
  }
  {
    TempDir dir;
    WriteText(dir.path() / "sub" / "a.txt", "x");
    fs::create_directory_symlink("sub", dir.path() / "loop");
    ExpectError(OpenCheckpoint(dir.path()), Code::kInvalidArgument,
                "symlink to a directory is not supported");
  }
}

TEST(Checkpoint, RejectsSpecialFiles) {
  TempDir dir;
  WriteText(dir.path() / "a.txt", "x");
  ASSERT_EQ(::mkfifo((dir.path() / "pipe").c_str(), 0600), 0);
  ExpectError(OpenCheckpoint(dir.path()), Code::kInvalidArgument, "not a regular file");
}

TEST(Checkpoint, RejectsMissingPathEmptyDirectoryAndOtherFiles) {
  TempDir dir;
  ExpectError(OpenCheckpoint(dir.path() / "missing"), Code::kNotFound, "missing");
  ExpectError(OpenCheckpoint(dir.path()), Code::kInvalidArgument, "holds no files");
  WriteText(dir.path() / "weights.bin", "x");
  ExpectError(OpenCheckpoint(dir.path() / "weights.bin"), Code::kInvalidArgument,
              "not a directory or a .safetensors file");
}

}  // namespace
}  // namespace weightcast
