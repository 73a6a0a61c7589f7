// StagedVersion::WriteChunkPart: a chunk written a piece at a time (as a one-pass decoder
// produces it) lands at its place across file boundaries, is refused outside the chunk, and
// counts for nothing until MarkVerified, also across a restart.
#include <gtest/gtest.h>

#include <random>
#include <string>

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
