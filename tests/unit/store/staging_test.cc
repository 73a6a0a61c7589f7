// StagedVersion::WriteChunkPart: a chunk written a piece at a time (as a one-pass decoder
// produces it) lands at its place across file boundaries, is refused outside the chunk, and
// counts for nothing until MarkVerified, also across a restart.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>

#include "store/abort_log.h"
#include "store/chunk_record.h"
#include "store/store.h"
#include "store_test_util.h"

namespace weightcast {
namespace {

using store_test::ChunkOf;
using store_test::Flat;
using store_test::MakeManifest;
using store_test::OpenOrDie;
using store_test::SampleFiles;
using store_test::TempDir;

// Writes chunk `i` of `flat` in pieces of at most `piece` bytes, front to back.
Status WriteInPieces(StagedVersion& staged, const std::string& flat, const Manifest& m,
                     ChunkIndex i, uint64_t piece) {
  const std::span<const uint8_t> bytes = ChunkOf(flat, m, i);
  for (uint64_t at = 0; at < bytes.size(); at += piece) {
    WC_RETURN_IF_ERROR(staged.WriteChunkPart(
        i, at, bytes.subspan(at, std::min<uint64_t>(piece, bytes.size() - at))));
  }
  return Status::Ok();
}

TEST(Staging, ChunkWrittenInPiecesAcrossFilesCommitsAndVerifies) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  auto files = SampleFiles(3, 2);
  Manifest m = MakeManifest("policy", Version(1), files);
  auto staged = store.BeginStaging("policy", m);
  ASSERT_TRUE(staged.ok());
  const std::string flat = Flat(files);
  // Odd piece sizes put piece edges everywhere, including on both sides of file boundaries.
  const uint64_t pieces[] = {1, 4093, 32768, 65536 + 7};
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    ASSERT_TRUE(WriteInPieces(*staged, flat, m, ChunkIndex(i), pieces[i % 4]).ok()) << i;
    EXPECT_FALSE(staged->HasChunk(ChunkIndex(i)));
    ASSERT_TRUE(staged->MarkVerified(ChunkIndex(i)).ok());
  }
  ASSERT_TRUE(store.Commit("policy", Version(1)).ok());
  EXPECT_TRUE(store.Verify("policy", Version(1)).ok());
}

TEST(Staging, PiecesOutsideTheChunkAreRefusedAndWriteNothing) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  auto files = SampleFiles(4);
  Manifest m = MakeManifest("policy", Version(1), files);
  auto staged = store.BeginStaging("policy", m);
  ASSERT_TRUE(staged.ok());
  const std::string flat = Flat(files);
  const ChunkIndex first(0);
  const uint64_t size = m.ChunkRange(first).size;
  const std::vector<uint8_t> junk(16, 0xEE);
  // Crosses the chunk's end (would spill into the next chunk), starts past it, bad index.
  EXPECT_EQ(staged->WriteChunkPart(first, size - 8, junk).code(), Code::kInvalidArgument);
  EXPECT_EQ(staged->WriteChunkPart(first, size + 1, {}).code(), Code::kInvalidArgument);
  EXPECT_EQ(staged->WriteChunkPart(ChunkIndex(m.chunk_count()), 0, junk).code(), Code::kOutOfRange);
  // The next chunk, written whole, is intact: the refused piece did not reach it.
  ASSERT_TRUE(staged->PutChunk(ChunkIndex(1), ChunkOf(flat, m, ChunkIndex(1))).ok());
  auto back = staged->ReadChunk(ChunkIndex(1));
  ASSERT_TRUE(back.ok());
  const auto want = ChunkOf(flat, m, ChunkIndex(1));
  EXPECT_TRUE(std::equal(back->begin(), back->end(), want.begin(), want.end()));
}

// The swarm writes decoded blocks before the whole chunk's hash is checked. Such a chunk (say its
// hash then failed, or the process died) must stay missing: not served, not committed, and
// fetched again after a resume.
TEST(Staging, UnverifiedPiecesStayMissingAcrossARestart) {
  TempDir dir;
  auto files = SampleFiles(5);
  Manifest m = MakeManifest("policy", Version(1), files);
  const std::string flat = Flat(files);
  ASSERT_GE(m.chunk_count(), 3u);
  {
    Store store = OpenOrDie(dir.path(), {.record_batch = 1});
    auto staged = store.BeginStaging("policy", m);
    ASSERT_TRUE(staged.ok());
    ASSERT_TRUE(staged->PutChunk(ChunkIndex(0), ChunkOf(flat, m, ChunkIndex(0))).ok());
    // Chunk 1: correct bytes, never marked. Chunk 2: wrong bytes (a decode whose hash failed).
    ASSERT_TRUE(WriteInPieces(*staged, flat, m, ChunkIndex(1), 1000).ok());
    std::vector<uint8_t> wrong(m.ChunkRange(ChunkIndex(2)).size, 0x11);
    ASSERT_TRUE(staged->WriteChunkPart(ChunkIndex(2), 0, wrong).ok());
    EXPECT_EQ(staged->ReadChunk(ChunkIndex(2)).status().code(), Code::kNotFound);
    EXPECT_EQ(store.Commit("policy", Version(1)).code(), Code::kFailedPrecondition);
    ASSERT_TRUE(staged->Flush().ok());
  }
  Store store = OpenOrDie(dir.path());
  auto staged = store.ResumeStaging("policy", Version(1));
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  EXPECT_TRUE(staged->HasChunk(ChunkIndex(0)));
  EXPECT_FALSE(staged->HasChunk(ChunkIndex(1)));
  EXPECT_FALSE(staged->HasChunk(ChunkIndex(2)));
  const auto missing = staged->MissingChunks();
  EXPECT_NE(std::find(missing.begin(), missing.end(), ChunkIndex(1)), missing.end());
  EXPECT_NE(std::find(missing.begin(), missing.end(), ChunkIndex(2)), missing.end());
  for (ChunkIndex i : missing) ASSERT_TRUE(staged->PutChunk(i, ChunkOf(flat, m, i)).ok());
  ASSERT_TRUE(store.Commit("policy", Version(1)).ok());
  EXPECT_TRUE(store.Verify("policy", Version(1)).ok());
}

}  // namespace
}  // namespace weightcast

namespace weightcast {
namespace {

TEST(ChunkRecordReader, ReadsRecordsAsTheyAreAppendedEachOnce) {
  store_test::TempDir dir;
  const std::filesystem::path path = dir.path() / "chunks.log";
  Digest root{};
  root[0] = 7;
  EXPECT_EQ(store::ChunkRecordReader::Open(path, root, 10).status().code(), Code::kNotFound);
  auto record = store::ChunkRecord::Create(path, root);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  auto reader = store::ChunkRecordReader::Open(path, root, 10);
  ASSERT_TRUE(reader.ok());
  std::vector<ChunkIndex> fresh;
  ASSERT_TRUE(reader->Poll(fresh).ok());
  EXPECT_TRUE(fresh.empty());
  const std::vector<ChunkIndex> first = {ChunkIndex(3), ChunkIndex(9)};
  ASSERT_TRUE(record->Append(first).ok());
  ASSERT_TRUE(reader->Poll(fresh).ok());
  EXPECT_EQ(fresh, first);
  // A record appended again (a resumed writer) is not reported twice; half a record waits.
  fresh.clear();
  const std::vector<ChunkIndex> again = {ChunkIndex(3), ChunkIndex(0)};
  ASSERT_TRUE(record->Append(again).ok());
  {
    std::ofstream torn(path, std::ios::binary | std::ios::app);
    torn.write("\x05\x00\x00", 3);
  }
  ASSERT_TRUE(reader->Poll(fresh).ok());
  EXPECT_EQ(fresh, std::vector<ChunkIndex>{ChunkIndex(0)});

  Digest other = root;
  other[0] = 8;
  auto wrong = store::ChunkRecordReader::Open(path, other, 10);
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong->Poll(fresh).code(), Code::kCorrupt);
}

TEST(ChunkRecordReader, ParsesOnlyWholeCheckedRecordsBelowTheCount) {
  std::vector<uint8_t> bytes;
  auto put = [&](uint32_t index, uint32_t check) {
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(index >> (8 * i)));
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(check >> (8 * i)));
  };
  put(1, 1 ^ store::kRecordCheck);
  put(2, 2 ^ store::kRecordCheck);
  put(3, 0);  // fails its check: the end of what is trusted
  put(4, 4 ^ store::kRecordCheck);
  std::vector<ChunkIndex> out;
  EXPECT_EQ(store::ParseChunkRecords(bytes, 10, out), 16u);
  EXPECT_EQ(out, (std::vector<ChunkIndex>{ChunkIndex(1), ChunkIndex(2)}));
  out.clear();
  EXPECT_EQ(store::ParseChunkRecords(bytes, 2, out), 8u) << "chunk 2 is beyond 2 chunks";
}

TEST(AbortLog, KeepsTheLatestReasonsOneLineEach) {
  store_test::TempDir dir;
  const store::ChannelLayout layout(dir.path(), "policy");
  std::filesystem::create_directories(layout.dir());
  EXPECT_FALSE(store::FindAbortReason(layout, Version(1)).has_value());
  ASSERT_TRUE(store::RecordAbort(layout, Version(1), "prepare deadline\npassed").ok());
  EXPECT_EQ(store::FindAbortReason(layout, Version(1)), "prepare deadline passed");
  ASSERT_TRUE(store::RecordAbort(layout, Version(1), "").ok());
  EXPECT_EQ(store::FindAbortReason(layout, Version(1)), "dropped") << "the latest wins";
  for (uint64_t v = 2; v < 2 + store::kAbortLogLines; ++v) {
    ASSERT_TRUE(store::RecordAbort(layout, Version(v), "superseded").ok());
  }
  EXPECT_FALSE(store::FindAbortReason(layout, Version(1)).has_value()) << "kept: the latest 16";
  EXPECT_EQ(store::FindAbortReason(layout, Version(17)), "superseded");
  EXPECT_FALSE(store::FindAbortReasonIn("12 x\n", Version(1)).has_value());
  EXPECT_EQ(store::FindAbortReasonIn("1 a\n12 b\n", Version(1)), "a");
}

}  // namespace
}  // namespace weightcast
