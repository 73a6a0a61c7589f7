#include "node/chunk_intake.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../store/store_test_util.h"

namespace weightcast::node {
namespace {

using store_test::ChunkOf;
using store_test::Flat;
using store_test::MakeManifest;
using store_test::OpenOrDie;
using store_test::SampleFiles;
using store_test::TempDir;

std::span<const uint8_t> Bytes(const std::string& s) { return AsBytes(std::string_view(s)); }

bool Missing(const StagedVersion& staged, uint32_t i) {
  const std::vector<ChunkIndex> missing = staged.MissingChunks();
  return std::find(missing.begin(), missing.end(), ChunkIndex(i)) != missing.end();
}

// A base (v1) and a target (v2) whose first file is the same and whose last file changed: the
// chunks inside the first file are equal, the rest differ.
struct BaseAndTarget {
  std::vector<store_test::TestFile> base_files = SampleFiles(1);
  std::vector<store_test::TestFile> target_files = [] {
    std::vector<store_test::TestFile> files = SampleFiles(1);
    files.back().bytes = store_test::RandomBytes(99, files.back().bytes.size());
    return files;
  }();
  Manifest base = MakeManifest("policy", Version(1), base_files);
  Manifest target = MakeManifest("policy", Version(2), target_files);
  std::string base_flat = Flat(base_files);
  std::string target_flat = Flat(target_files);
};

TEST(ChunkIntake, ChunksTheBaseHoldsAreCopiedCheckedAndTheOthersLeft) {
  TempDir dir;
  Store store = OpenOrDie(dir.path() / "store");
  BaseAndTarget v;
  auto staged = store.BeginStaging("policy", v.target);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  const codec::SnapshotReader base_bytes = codec::SnapshotReader::FromMemory(Bytes(v.base_flat));
  std::vector<uint8_t> scratch;
  uint32_t same = 0;
  for (uint32_t i = 0; i < v.target.chunk_count(); ++i) {
    const bool equal = BaseHasSameChunk(v.target, v.base, ChunkIndex(i));
    EXPECT_EQ(StageFromBase(v.target, ChunkIndex(i), v.base, base_bytes, codec::VerifyResult::kFast,
                            *staged, scratch),
              equal)
        << i;
    EXPECT_EQ(Missing(*staged, i), !equal) << i;
    same += equal ? 1 : 0;
  }
  EXPECT_GT(same, 0u);
  EXPECT_LT(same, v.target.chunk_count());
}

TEST(ChunkIntake, ABaseWhoseBytesChangedIsNotCopied) {
  TempDir dir;
  Store store = OpenOrDie(dir.path() / "store");
  BaseAndTarget v;
  ASSERT_TRUE(BaseHasSameChunk(v.target, v.base, ChunkIndex(0)));
  auto staged = store.BeginStaging("policy", v.target);
  ASSERT_TRUE(staged.ok());
  std::string damaged = v.base_flat;
  damaged[10] = static_cast<char>(damaged[10] ^ 0x40);  // a bit flipped on disk or in memory
  const codec::SnapshotReader base_bytes = codec::SnapshotReader::FromMemory(Bytes(damaged));
  std::vector<uint8_t> scratch;
  for (codec::VerifyResult mode : {codec::VerifyResult::kFast, codec::VerifyResult::kSha256}) {
    EXPECT_FALSE(
        StageFromBase(v.target, ChunkIndex(0), v.base, base_bytes, mode, *staged, scratch));
    EXPECT_TRUE(Missing(*staged, 0));
  }
}

TEST(ChunkIntake, AWholeChunkGoesInOnlyWithItsSizeAndHash) {
  TempDir dir;
  Store store = OpenOrDie(dir.path() / "store");
  BaseAndTarget v;
  auto staged = store.BeginStaging("policy", v.target);
  ASSERT_TRUE(staged.ok());
  const std::span<const uint8_t> chunk = ChunkOf(v.target_flat, v.target, ChunkIndex(1));
  const Status short_one = staged->PutChunk(ChunkIndex(1), chunk.first(chunk.size() - 1));
  EXPECT_EQ(short_one.code(), Code::kCorrupt);
  EXPECT_NE(short_one.message().find("bytes, the manifest says"), std::string::npos);
  std::vector<uint8_t> wrong(chunk.begin(), chunk.end());
  wrong[5] ^= 1;
  EXPECT_EQ(staged->PutChunk(ChunkIndex(1), wrong).code(), Code::kCorrupt);
  EXPECT_TRUE(Missing(*staged, 1));
  EXPECT_TRUE(staged->PutChunk(ChunkIndex(1), chunk).ok());
  EXPECT_FALSE(Missing(*staged, 1));
}

TEST(ChunkIntake, APayloadDecodesOntoTheBasesChunkOrOntoNothing) {
  BaseAndTarget v;
  const codec::SnapshotReader base_bytes = codec::SnapshotReader::FromMemory(Bytes(v.base_flat));
  std::vector<uint8_t> scratch;
  const codec::HashedChunk none =
      BaseChunkFor(nullptr, nullptr, ChunkIndex(0), v.target.hash_algorithm, scratch);
  EXPECT_TRUE(none.bytes().empty());
  const codec::HashedChunk beyond = BaseChunkFor(
      &v.base, &base_bytes, ChunkIndex(v.base.chunk_count()), v.target.hash_algorithm, scratch);
  EXPECT_TRUE(beyond.bytes().empty());
  for (uint32_t i = 0; i < v.base.chunk_count(); ++i) {
    const codec::HashedChunk got =
        BaseChunkFor(&v.base, &base_bytes, ChunkIndex(i), v.base.hash_algorithm, scratch);
    const std::span<const uint8_t> want = ChunkOf(v.base_flat, v.base, ChunkIndex(i));
    EXPECT_TRUE(std::equal(got.bytes().begin(), got.bytes().end(), want.begin(), want.end())) << i;
    EXPECT_EQ(got.hash(), v.base.chunk_hashes[i]) << i;
  }
}

}  // namespace
}  // namespace weightcast::node
