// Damage and crash leftovers, made by hand: what Open cleans, what ResumeStaging repairs, what
// Verify reports.
#include <fcntl.h>
#include <unistd.h>

#include <fstream>

#include <gtest/gtest.h>

#include "store/chunk_record.h"
#include "store/layout.h"
#include "store/store.h"
#include "store_test_util.h"
#include "util/file.h"

namespace weightcast {
namespace {

using store_test::ChunkOf;
using store_test::Flat;
using store_test::MakeManifest;
using store_test::OpenOrDie;
using store_test::SampleFiles;
using store_test::StageAndCommit;
using store_test::TempDir;

namespace fs = std::filesystem;

// Stages version 1 of "policy" with every chunk in `recorded` marked and flushed.
void StagePartly(const fs::path& root, const Manifest& m, const std::string& flat,
                 uint32_t recorded) {
  Store store = OpenOrDie(root, {.record_batch = 1});
  auto staged = store.BeginStaging("policy", m);
  ASSERT_TRUE(staged.ok());
  for (uint32_t i = 0; i < recorded; ++i) {
    ASSERT_TRUE(staged->PutChunk(ChunkIndex(i), ChunkOf(flat, m, ChunkIndex(i))).ok());
  }
}

// Commits `files` as version 1 of "policy", then stages them as version 2 with every chunk put:
// a staging ready to commit.
StagedVersion CommitOneStageTwo(Store& store, const std::vector<store_test::TestFile>& files) {
  EXPECT_TRUE(StageAndCommit(store, "policy", Version(1), files).ok());
  Manifest m = MakeManifest("policy", Version(2), files);
  auto staged = store.BeginStaging("policy", m);
  EXPECT_TRUE(staged.ok());
  std::string flat = Flat(files);
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    EXPECT_TRUE(staged->PutChunk(ChunkIndex(i), ChunkOf(flat, m, ChunkIndex(i))).ok());
  }
  return std::move(staged).value();
}

void Append(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void Overwrite(const fs::path& path, uint64_t offset, std::string_view bytes) {
  std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out);
  out.seekp(static_cast<std::streamoff>(offset));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void FlipByte(const fs::path& path, uint64_t offset) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x20);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

TEST(StoreFault, TornRecordTailIsCutAndEarlierChunksKept) {
  TempDir dir;
  auto files = SampleFiles(1);
  Manifest m = MakeManifest("policy", Version(1), files);
  StagePartly(dir.path(), m, Flat(files), 3);
  fs::path record = dir.path() / "policy/staging/1/chunks.log";
  Append(record, std::string("\x04\x00\x00", 3));
  Store store = OpenOrDie(dir.path());
  auto staged = store.ResumeStaging("policy", Version(1));
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  EXPECT_EQ(staged->verified_count(), 3u);
  EXPECT_EQ(staged->discarded_record_bytes(), 3u);
  EXPECT_EQ(fs::file_size(record), store::kRecordHeaderBytes + 3 * store::kRecordBytes);
}

TEST(StoreFault, CorruptRecordEndsTheTrustedPrefix) {
  TempDir dir;
  auto files = SampleFiles(2);
  Manifest m = MakeManifest("policy", Version(1), files);
  std::string flat = Flat(files);
  StagePartly(dir.path(), m, flat, 4);
  fs::path record = dir.path() / "policy/staging/1/chunks.log";
  // Damage the check word of the third record: it and the fourth are no longer trusted.
  FlipByte(record, store::kRecordHeaderBytes + 2 * store::kRecordBytes + 5);
  Store store = OpenOrDie(dir.path());
  auto staged = store.ResumeStaging("policy", Version(1));
  ASSERT_TRUE(staged.ok());
  EXPECT_EQ(staged->verified_count(), 2u);
  EXPECT_TRUE(staged->HasChunk(ChunkIndex(1)));
  EXPECT_FALSE(staged->HasChunk(ChunkIndex(2)));
  EXPECT_EQ(staged->discarded_record_bytes(), 2 * store::kRecordBytes);
  for (ChunkIndex i : staged->MissingChunks()) {
    ASSERT_TRUE(staged->PutChunk(i, ChunkOf(flat, m, i)).ok());
  }
  ASSERT_TRUE(store.Commit("policy", Version(1)).ok());
  EXPECT_TRUE(store.Verify("policy", Version(1)).ok());
}

TEST(StoreFault, RecordForAnotherManifestOrOutOfRangeIsReset) {
  TempDir dir;
  auto files = SampleFiles(3);
  Manifest m = MakeManifest("policy", Version(1), files);
  StagePartly(dir.path(), m, Flat(files), 2);
  fs::path record = dir.path() / "policy/staging/1/chunks.log";
  {
    // A well-formed record naming chunk 10^6, which the manifest does not have.
    std::string rec(8, '\0');
    uint32_t index = 1'000'000;
    uint32_t check = index ^ store::kRecordCheck;
    for (int i = 0; i < 4; ++i) {
      rec[i] = static_cast<char>(index >> (8 * i));
      rec[4 + i] = static_cast<char>(check >> (8 * i));
    }
    Append(record, rec);
    Store store = OpenOrDie(dir.path());
    auto staged = store.ResumeStaging("policy", Version(1));
    ASSERT_TRUE(staged.ok());
    EXPECT_EQ(staged->verified_count(), 2u);
    EXPECT_EQ(staged->discarded_record_bytes(), 8u);
  }
  FlipByte(record, 9);  // header: the root prefix no longer matches
  Store store = OpenOrDie(dir.path());
  auto staged = store.ResumeStaging("policy", Version(1));
  ASSERT_TRUE(staged.ok());
  EXPECT_EQ(staged->verified_count(), 0u);
  EXPECT_GT(staged->discarded_record_bytes(), 0u);
}

TEST(StoreFault, VerifyReportsATruncatedFile) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  ASSERT_TRUE(StageAndCommit(store, "policy", Version(1), SampleFiles(4)).ok());
  fs::resize_file(dir.path() / "policy/versions/1/c.safetensors", 1000);
  Status st = store.Verify("policy", Version(1));
  EXPECT_EQ(st.code(), Code::kCorrupt);
  EXPECT_NE(st.message().find("c.safetensors"), std::string::npos) << st.message();
  // Rolling back onto a damaged version is refused as well.
  EXPECT_EQ(store.Rollback("policy", Version(1)).status().code(), Code::kCorrupt);
}

TEST(StoreFault, VerifyNamesTheChunkWithAFlippedByte) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  ASSERT_TRUE(StageAndCommit(store, "policy", Version(1), SampleFiles(5)).ok());
  FlipByte(dir.path() / "policy/versions/1/c.safetensors", 70'000);
  Status st = store.Verify("policy", Version(1));
  EXPECT_EQ(st.code(), Code::kCorrupt);
  // a (100000) + config (10) + 70000 = byte 170010, in chunk 2 (64 KiB chunks).
  EXPECT_NE(st.message().find("chunk 2 "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("c.safetensors"), std::string::npos) << st.message();
}

TEST(StoreFault, VerifyReportsAMissingManifest) {
  TempDir dir;
  {
    Store store = OpenOrDie(dir.path());
    ASSERT_TRUE(StageAndCommit(store, "policy", Version(1), SampleFiles(6)).ok());
  }
  fs::remove(dir.path() / "policy/manifests/1.wcm");
  Store store = OpenOrDie(dir.path());  // reopening does not delete the version's files
  Status st = store.Verify("policy", Version(1));
  EXPECT_EQ(st.code(), Code::kCorrupt);
  EXPECT_NE(st.message().find("missing"), std::string::npos) << st.message();
  auto list = store.List("policy");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_FALSE((*list)[0].has_manifest);
  EXPECT_EQ(store.Verify("policy", Version(9)).code(), Code::kNotFound);
}

TEST(StoreFault, VerifyReportsAGarbledManifest) {
  TempDir dir;
  {
    Store store = OpenOrDie(dir.path());
    ASSERT_TRUE(StageAndCommit(store, "policy", Version(1), SampleFiles(6)).ok());
  }
  Overwrite(dir.path() / "policy/manifests/1.wcm", 3, "garbage!");
  Store store = OpenOrDie(dir.path());
  EXPECT_FALSE(store.Verify("policy", Version(1)).ok());
}

TEST(StoreFault, OpenCleansCrashLeftovers) {
  TempDir dir;
  auto files = SampleFiles(7);
  Manifest m2 = MakeManifest("policy", Version(2), files);
  {
    Store store = OpenOrDie(dir.path());
    ASSERT_TRUE(StageAndCommit(store, "policy", Version(1), files).ok());
    ASSERT_TRUE(store.BeginStaging("policy", m2).ok());  // resumable: must survive
  }
  fs::path ch = dir.path() / "policy";
  fs::create_directories(ch / "staging/.partial-3/files");
  fs::create_directories(ch / "staging/4");        // no files/, no version 4: half removed
  fs::create_directories(ch / "staging/5/files");  // no manifest: cannot be resumed
  fs::create_directories(ch / "versions/.gc-0/sub");
  Append(ch / "manifests/1.wcm.tmp.12345", "partial");
  Append(ch / "manifests/6.wcm", "orphan");
  fs::create_symlink("versions/1", ch / "current.tmp");

  Store store = OpenOrDie(dir.path());
  EXPECT_EQ(*store::ListDir(ch / "staging"), std::vector<std::string>{"2"});
  EXPECT_EQ(*store::ListDir(ch / "versions"), std::vector<std::string>{"1"});
  EXPECT_EQ(*store::ListDir(ch / "manifests"), std::vector<std::string>{"1.wcm"});
  EXPECT_FALSE(fs::exists(fs::symlink_status(ch / "current.tmp")));
  EXPECT_EQ(*store.Current("policy"), Version(1));
  EXPECT_TRUE(store.ResumeStaging("policy", Version(2)).ok());
}

TEST(StoreFault, OpenRemovesStagingVersionsBelowTheCurrentOne) {
  TempDir dir;
  {
    Store store = OpenOrDie(dir.path());
    ASSERT_TRUE(
        store.BeginStaging("policy", MakeManifest("policy", Version(1), SampleFiles(1))).ok());
    ASSERT_TRUE(StageAndCommit(store, "policy", Version(2), SampleFiles(2)).ok());
    ASSERT_TRUE(
        store.BeginStaging("policy", MakeManifest("policy", Version(3), SampleFiles(3))).ok());
  }
  Store store = OpenOrDie(dir.path());
  EXPECT_EQ(*store.ListStaging("policy"), std::vector<Version>{Version(3)});
}

TEST(StoreFault, OpenFinishesACommitPastItsCommitPoint) {
  TempDir dir;
  auto files = SampleFiles(8);
  {
    Store store = OpenOrDie(dir.path());
    CommitOneStageTwo(store, files);
  }
  // What Commit does up to its commit point, then a "crash": the manifest is in place and the
  // files were renamed, but `current` still names version 1.
  fs::path ch = dir.path() / "policy";
  fs::copy_file(ch / "staging/2/manifest.wcm", ch / "manifests/2.wcm");
  fs::rename(ch / "staging/2/files", ch / "versions/2");
  Store store = OpenOrDie(dir.path());
  EXPECT_EQ(*store.Current("policy"), Version(2));
  EXPECT_TRUE(store.ListStaging("policy")->empty());
  EXPECT_TRUE(store.Verify("policy", Version(2)).ok());
}

TEST(StoreFault, ACommitStoppedBeforeItsCommitPointCanBeRedone) {
  TempDir dir;
  auto files = SampleFiles(9);
  Manifest m = MakeManifest("policy", Version(1), files);
  StagePartly(dir.path(), m, Flat(files), m.chunk_count());
  fs::path ch = dir.path() / "policy";
  // Killed right after writing the manifest beside the versions: an orphan manifest.
  fs::copy_file(ch / "staging/1/manifest.wcm", ch / "manifests/1.wcm");
  Store store = OpenOrDie(dir.path());
  EXPECT_FALSE(fs::exists(ch / "manifests/1.wcm"));
  EXPECT_EQ(store.Current("policy").status().code(), Code::kNotFound);
  auto staged = store.ResumeStaging("policy", Version(1));
  ASSERT_TRUE(staged.ok());
  EXPECT_TRUE(staged->complete());
  ASSERT_TRUE(store.Commit("policy", Version(1)).ok());
  EXPECT_TRUE(store.Verify("policy", Version(1)).ok());
}

// The disk fills while the manifest is written. The staging must stay whole and open, so that
// the same handle commits once the cause is gone (instead of reporting "was committed or
// aborted" until the agent restarts).
TEST(StoreFault, ACommitWhoseManifestWriteFailedCanBeRetried) {
  TempDir dir;
  auto files = SampleFiles(10);
  Store store = OpenOrDie(dir.path());
  StagedVersion staged = CommitOneStageTwo(store, files);
  // A directory where the manifest goes makes its write fail, as a full disk would.
  fs::path blocker = dir.path() / "policy/manifests/2.wcm";
  fs::create_directories(blocker / "x");
  EXPECT_FALSE(store.Commit("policy", Version(2)).ok());
  EXPECT_EQ(*store.Current("policy"), Version(1));
  EXPECT_TRUE(staged.complete());
  EXPECT_EQ(store.ListStaging("policy")->size(), 1u);
  fs::remove_all(blocker);
  ASSERT_TRUE(store.Commit("policy", Version(2)).ok());
  EXPECT_EQ(*store.Current("policy"), Version(2));
  EXPECT_TRUE(store.Verify("policy", Version(2)).ok());
  EXPECT_TRUE(store.ListStaging("policy")->empty());
}

// A commit that failed after its commit point (the files are versions/<v>, `current` not yet
// switched) is finished by the next Commit of that version, not only by the next Open.
TEST(StoreFault, ACommitPastItsCommitPointIsFinishedByTheNextCommit) {
  TempDir dir;
  auto files = SampleFiles(11);
  Store store = OpenOrDie(dir.path());
  StagedVersion staged = CommitOneStageTwo(store, files);
  fs::path ch = dir.path() / "policy";
  fs::copy_file(ch / "staging/2/manifest.wcm", ch / "manifests/2.wcm");
  fs::rename(ch / "staging/2/files", ch / "versions/2");
  ASSERT_TRUE(store.Commit("policy", Version(2)).ok());
  EXPECT_EQ(*store.Current("policy"), Version(2));
  EXPECT_TRUE(store.ListStaging("policy")->empty());
  EXPECT_TRUE(store.Verify("policy", Version(2)).ok());
}

TEST(StoreFault, DanglingOrForeignCurrentLinkIsReported) {
  TempDir dir;
  {
    Store store = OpenOrDie(dir.path());
    ASSERT_TRUE(StageAndCommit(store, "policy", Version(1), SampleFiles(1)).ok());
  }
  fs::path ch = dir.path() / "policy";
  fs::remove(ch / "current");
  fs::create_symlink("/etc", ch / "current");
  Store store = OpenOrDie(dir.path());
  EXPECT_EQ(store.Current("policy").status().code(), Code::kCorrupt);
  // Collection refuses to guess which version is in use.
  EXPECT_FALSE(store.CollectGarbage("policy").ok());
  EXPECT_TRUE(store.Rollback("policy", Version(1)).ok());
  EXPECT_EQ(*store.Current("policy"), Version(1));
}

}  // namespace
}  // namespace weightcast
