#include "store/store.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "store/layout.h"
#include "store_test_util.h"

namespace weightcast {
namespace {

using store_test::ChunkOf;
using store_test::Flat;
using store_test::MakeManifest;
using store_test::OpenOrDie;
using store_test::ReadAll;
using store_test::SampleFiles;
using store_test::StageAndCommit;
using store_test::TempDir;

namespace fs = std::filesystem;

TEST(StoreLayout, ParsesOnlyCanonicalVersionNames) {
  EXPECT_EQ(store::ParseVersionName("12"), Version(12));
  EXPECT_FALSE(store::ParseVersionName("0").has_value());
  EXPECT_FALSE(store::ParseVersionName("012").has_value());
  EXPECT_FALSE(store::ParseVersionName("1a").has_value());
  EXPECT_FALSE(store::ParseVersionName("").has_value());
  EXPECT_FALSE(store::ParseVersionName("-1").has_value());
  EXPECT_FALSE(store::ParseVersionName("99999999999999999999").has_value());
}

TEST(StoreLayout, RejectsPathsThatLeaveTheVersionDirectory) {
  EXPECT_TRUE(store::ValidateRelativePath("a/b.safetensors").ok());
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/", "a\\b"}) {
    EXPECT_EQ(store::ValidateRelativePath(bad).code(), Code::kCorrupt) << bad;
  }
}

TEST(Store, RejectsBadChannelNamesWithoutTouchingState) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  auto before = store::ListDir(dir.path());
  ASSERT_TRUE(before.ok());
  Manifest m = MakeManifest("good", Version(1), SampleFiles(1));
  for (std::string bad : {std::string(), std::string("a/b"), std::string(".."),
                          std::string(".hidden"), std::string("a b"), std::string(200, 'x')}) {
    m.channel = bad;
    auto staged = store.BeginStaging(bad, m);
    EXPECT_EQ(staged.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_EQ(store.Current(bad).status().code(), Code::kInvalidArgument) << bad;
    EXPECT_EQ(store.Rollback(bad).status().code(), Code::kInvalidArgument) << bad;
    EXPECT_EQ(store.CollectGarbage(bad).status().code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_EQ(*store::ListDir(dir.path()), *before);
}

TEST(Store, StagesWritesAndCommitsAVersion) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  auto files = SampleFiles(1);
  Manifest m = MakeManifest("policy", Version(1), files);
  ASSERT_GT(m.chunk_count(), 3u);
  auto staged = store.BeginStaging("policy", m);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  // Files exist at their full sizes before any chunk arrives.
  fs::path staging = dir.path() / "policy/staging/1/files";
  EXPECT_EQ(fs::file_size(staging / "c.safetensors"), files[3].bytes.size());
  EXPECT_EQ(staged->MissingChunks().size(), m.chunk_count());

  std::string flat = Flat(files);
  std::vector<uint32_t> order(m.chunk_count());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  for (uint32_t i : order) {
    ASSERT_TRUE(staged->PutChunk(ChunkIndex(i), ChunkOf(flat, m, ChunkIndex(i))).ok());
    EXPECT_TRUE(staged->HasChunk(ChunkIndex(i)));
    auto back = staged->ReadChunk(ChunkIndex(i));
    ASSERT_TRUE(back.ok());
    auto want = ChunkOf(flat, m, ChunkIndex(i));
    EXPECT_TRUE(std::equal(back->begin(), back->end(), want.begin(), want.end()));
  }
  EXPECT_TRUE(staged->complete());
  ASSERT_TRUE(store.Commit("policy", Version(1)).ok());

  EXPECT_EQ(*store.Current("policy"), Version(1));
  for (const auto& f : files) EXPECT_EQ(ReadAll(dir.path() / "policy/current" / f.path), f.bytes);
  EXPECT_TRUE(fs::exists(dir.path() / "policy/manifests/1.wcm"));
  EXPECT_FALSE(fs::exists(dir.path() / "policy/staging/1"));
  EXPECT_EQ(fs::read_symlink(dir.path() / "policy/current"), "versions/1");
  EXPECT_TRUE(store.Verify("policy", Version(1)).ok());
  auto chunk = store.ReadChunk("policy", Version(1), ChunkIndex(1));
  ASSERT_TRUE(chunk.ok());
  auto want = ChunkOf(flat, m, ChunkIndex(1));
  EXPECT_TRUE(std::equal(chunk->begin(), chunk->end(), want.begin(), want.end()));
  // The handle is spent once the version is committed.
  EXPECT_EQ(staged->WriteChunk(ChunkIndex(0), ChunkOf(flat, m, ChunkIndex(0))).code(),
            Code::kFailedPrecondition);
  auto list = store.List("policy");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_TRUE((*list)[0].current);
  EXPECT_EQ((*list)[0].root, m.root);
}

TEST(Store, CommitRequiresEveryChunkVerified) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  auto files = SampleFiles(2);
  Manifest m = MakeManifest("policy", Version(1), files);
  auto staged = store.BeginStaging("policy", m);
  ASSERT_TRUE(staged.ok());
  std::string flat = Flat(files);
  ASSERT_TRUE(staged->PutChunk(ChunkIndex(0), ChunkOf(flat, m, ChunkIndex(0))).ok());
  // Written but not marked verified does not count.
  ASSERT_TRUE(staged->WriteChunk(ChunkIndex(1), ChunkOf(flat, m, ChunkIndex(1))).ok());
  Status st = store.Commit("policy", Version(1));
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_NE(st.message().find(std::to_string(m.chunk_count() - 1) + " of"), std::string::npos)
      << st.message();
  EXPECT_EQ(store.Current("policy").status().code(), Code::kNotFound);
  // Still usable after the refused commit.
  for (uint32_t i = 1; i < m.chunk_count(); ++i) {
    ASSERT_TRUE(staged->PutChunk(ChunkIndex(i), ChunkOf(flat, m, ChunkIndex(i))).ok());
  }
  EXPECT_TRUE(store.Commit("policy", Version(1)).ok());
}

TEST(Store, PutChunkRejectsBytesThatDoNotMatchTheManifest) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  auto files = SampleFiles(3);
  Manifest m = MakeManifest("policy", Version(1), files);
  auto staged = store.BeginStaging("policy", m);
  ASSERT_TRUE(staged.ok());
  std::string flat = Flat(files);
  auto span = ChunkOf(flat, m, ChunkIndex(2));
  std::vector<uint8_t> bad(span.begin(), span.end());
  bad[17] ^= 1;
  EXPECT_EQ(staged->PutChunk(ChunkIndex(2), bad).code(), Code::kCorrupt);
  EXPECT_FALSE(staged->HasChunk(ChunkIndex(2)));
  EXPECT_EQ(staged->PutChunk(ChunkIndex(m.chunk_count()), bad).code(), Code::kOutOfRange);
  EXPECT_EQ(staged->WriteChunk(ChunkIndex(2), std::span(bad).first(10)).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(staged->ReadChunk(ChunkIndex(2)).status().code(), Code::kNotFound);
}

TEST(Store, RefusesDuplicateAndMismatchedVersions) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  auto files = SampleFiles(4);
  ASSERT_TRUE(StageAndCommit(store, "policy", Version(1), files).ok());
  Manifest again = MakeManifest("policy", Version(1), files);
  EXPECT_EQ(store.BeginStaging("policy", again).status().code(), Code::kAlreadyExists);
  Manifest two = MakeManifest("policy", Version(2), files);
  ASSERT_TRUE(store.BeginStaging("policy", two).ok());
  EXPECT_EQ(store.BeginStaging("policy", two).status().code(), Code::kAlreadyExists);
  EXPECT_EQ(store.BeginStaging("other", two).status().code(), Code::kInvalidArgument);
  Manifest tampered = MakeManifest("policy", Version(3), files);
  tampered.files[0].path = "../escape";
  EXPECT_EQ(store.BeginStaging("policy", tampered).status().code(), Code::kCorrupt);
  EXPECT_FALSE(fs::exists(dir.path() / "escape"));
}

TEST(Store, ChunksCanSpanFilesAndConcurrentWritersAgree) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  auto files = SampleFiles(5, 4);
  Manifest m = MakeManifest("policy", Version(1), files);
  auto staged = store.BeginStaging("policy", m);
  ASSERT_TRUE(staged.ok());
  std::string flat = Flat(files);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint32_t i = t; i < m.chunk_count(); i += 4) {
        if (!staged->PutChunk(ChunkIndex(i), ChunkOf(flat, m, ChunkIndex(i))).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_TRUE(store.Commit("policy", Version(1)).ok());
  EXPECT_TRUE(store.Verify("policy", Version(1)).ok());
}

TEST(Store, ResumesStagingAfterReopen) {
  TempDir dir;
  auto files = SampleFiles(6);
  Manifest m = MakeManifest("policy", Version(1), files);
  std::string flat = Flat(files);
  {
    Store store = OpenOrDie(dir.path(), {.record_batch = 1000});
    auto staged = store.BeginStaging("policy", m);
    ASSERT_TRUE(staged.ok());
    for (uint32_t i = 0; i < m.chunk_count(); i += 2) {
      ASSERT_TRUE(staged->PutChunk(ChunkIndex(i), ChunkOf(flat, m, ChunkIndex(i))).ok());
    }
    ASSERT_TRUE(staged->Flush().ok());
  }
  Store store = OpenOrDie(dir.path());
  EXPECT_EQ(*store.ListStaging("policy"), std::vector<Version>{Version(1)});
  EXPECT_EQ(*store.NextVersion("policy"), Version(2));
  auto staged = store.ResumeStaging("policy", Version(1));
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  EXPECT_EQ(staged->discarded_record_bytes(), 0u);
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    EXPECT_EQ(staged->HasChunk(ChunkIndex(i)), i % 2 == 0) << i;
  }
  for (ChunkIndex i : staged->MissingChunks()) {
    ASSERT_TRUE(staged->PutChunk(i, ChunkOf(flat, m, i)).ok());
  }
  ASSERT_TRUE(store.Commit("policy", Version(1)).ok());
  EXPECT_TRUE(store.Verify("policy", Version(1)).ok());
}

TEST(Store, AbortRemovesTheStagingVersion) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  Manifest m = MakeManifest("policy", Version(1), SampleFiles(7));
  auto staged = store.BeginStaging("policy", m);
  ASSERT_TRUE(staged.ok());
  ASSERT_TRUE(store.Abort("policy", Version(1)).ok());
  EXPECT_FALSE(fs::exists(dir.path() / "policy/staging/1"));
  EXPECT_EQ(staged->MarkVerified(ChunkIndex(0)).code(), Code::kFailedPrecondition);
  EXPECT_EQ(store.Abort("policy", Version(1)).code(), Code::kNotFound);
  EXPECT_EQ(store.Commit("policy", Version(1)).code(), Code::kNotFound);
  EXPECT_TRUE(store.BeginStaging("policy", m).ok());
}

TEST(Store, KeepsTheLastVersionsAndRollsBack) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  for (uint64_t v = 1; v <= 3; ++v) {
    ASSERT_TRUE(StageAndCommit(store, "policy", Version(v), SampleFiles(v)).ok());
  }
  auto list = store.List("policy");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);  // version 1 was collected
  EXPECT_EQ((*list)[0].version, Version(2));
  EXPECT_FALSE(fs::exists(dir.path() / "policy/manifests/1.wcm"));

  auto back = store.Rollback("policy");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, Version(2));
  EXPECT_EQ(*store.Current("policy"), Version(2));
  EXPECT_EQ(ReadAll(dir.path() / "policy/current/a.safetensors"), SampleFiles(2)[0].bytes);
  EXPECT_EQ(store.Rollback("policy").status().code(), Code::kNotFound);  // nothing below 2
  EXPECT_EQ(store.Rollback("policy", Version(1)).status().code(), Code::kNotFound);
  // The version rolled back to is kept whatever garbage collection runs.
  EXPECT_TRUE(store.CollectGarbage("policy")->empty());
  EXPECT_EQ(*store.Rollback("policy", Version(3)), Version(3));
}

TEST(Store, KeepsTheVersionsARollbackCanGoToNotTheOnesRolledBackFrom) {
  TempDir dir;
  {
    Store store = OpenOrDie(dir.path());
    for (uint64_t v = 1; v <= 3; ++v) {
      ASSERT_TRUE(StageAndCommit(store, "policy", Version(v), SampleFiles(v)).ok());
    }
    ASSERT_EQ(*store.Rollback("policy"), Version(2));  // 3 is withdrawn
  }
  // Withdrawn survives a reopen; the next commit keeps 2 (known good), not 3.
  Store store = OpenOrDie(dir.path());
  ASSERT_TRUE(StageAndCommit(store, "policy", Version(4), SampleFiles(4)).ok());
  auto list = store.List("policy");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].version, Version(2));
  EXPECT_EQ((*list)[1].version, Version(4));
  // So the fleet can roll back a second time, and again after that.
  ASSERT_EQ(*store.Rollback("policy"), Version(2));
  ASSERT_TRUE(StageAndCommit(store, "policy", Version(5), SampleFiles(5)).ok());
  EXPECT_EQ(*store.Rollback("policy"), Version(2));
  EXPECT_FALSE(fs::exists(dir.path() / "policy/versions/4"));
}

TEST(Store, RollingForwardTakesAVersionOutOfTheWithdrawn) {
  TempDir dir;
  Store store = OpenOrDie(dir.path(), {.keep_versions = 3});
  for (uint64_t v = 1; v <= 3; ++v) {
    ASSERT_TRUE(StageAndCommit(store, "policy", Version(v), SampleFiles(v)).ok());
  }
  ASSERT_EQ(*store.Rollback("policy", Version(1)), Version(1));  // 2 and 3 withdrawn
  ASSERT_EQ(*store.Rollback("policy", Version(2)), Version(2));  // 2 is good again
  ASSERT_TRUE(StageAndCommit(store, "policy", Version(4), SampleFiles(4)).ok());
  auto list = store.List("policy");
  ASSERT_TRUE(list.ok());
  std::vector<uint64_t> kept;
  for (const VersionInfo& i : *list) kept.push_back(i.version.value());
  EXPECT_EQ(kept, (std::vector<uint64_t>{1, 2, 4}));
}

TEST(Store, OnlyANewOrEmptyDirectoryBecomesAStore) {
  TempDir dir;
  const fs::path other = dir.path() / "checkpoint";
  fs::create_directories(other);
  std::ofstream(other / "model.safetensors") << "not a store";
  auto refused = Store::Open(other);
  ASSERT_EQ(refused.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("not a weightcast store"), std::string::npos);
  EXPECT_FALSE(fs::exists(other / ".lock"));  // nothing was written into it
  std::ofstream(dir.path() / "file") << "x";
  EXPECT_EQ(Store::Open(dir.path() / "file").status().code(), Code::kFailedPrecondition);
  fs::create_directories(dir.path() / "empty");
  EXPECT_TRUE(Store::Open(dir.path() / "empty").ok());
  EXPECT_TRUE(Store::Open(dir.path() / "empty").ok());  // an existing store opens again
}

TEST(Store, RollbackSurvivesReopen) {
  TempDir dir;
  {
    Store store = OpenOrDie(dir.path());
    ASSERT_TRUE(StageAndCommit(store, "policy", Version(1), SampleFiles(1)).ok());
    ASSERT_TRUE(StageAndCommit(store, "policy", Version(2), SampleFiles(2)).ok());
    ASSERT_EQ(*store.Rollback("policy"), Version(1));
  }
  Store store = OpenOrDie(dir.path());
  EXPECT_EQ(*store.Current("policy"), Version(1));
  EXPECT_EQ(store.List("policy")->size(), 2u);
  EXPECT_TRUE(store::ListDir(dir.path() / "policy/staging")->empty());
}

TEST(Store, CollectionNeverRemovesTheCurrentVersion) {
  TempDir dir;
  {
    Store store = OpenOrDie(dir.path());
    for (uint64_t v = 1; v <= 3; ++v) {
      ASSERT_TRUE(StageAndCommit(store, "policy", Version(v), SampleFiles(v)).ok());
    }
    ASSERT_TRUE(store.Rollback("policy", Version(2)).ok());
  }
  Store store = OpenOrDie(dir.path(), {.keep_versions = 1});
  auto removed = store.CollectGarbage("policy");
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(removed->empty());  // 3 is the newest, 2 is current
  ASSERT_TRUE(StageAndCommit(store, "policy", Version(4), SampleFiles(4)).ok());
  auto list = store.List("policy");
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].version, Version(4));
}

TEST(Store, OpenTakesAnExclusiveLockAndReadOnlyOpensChangeNothing) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  ASSERT_TRUE(StageAndCommit(store, "policy", Version(1), SampleFiles(1)).ok());
  EXPECT_EQ(Store::Open(dir.path()).status().code(), Code::kUnavailable);
  auto reader = Store::Open(dir.path(), {.read_only = true});
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(*reader->Current("policy"), Version(1));
  EXPECT_TRUE(reader->Verify("policy", Version(1)).ok());
  Manifest m = MakeManifest("policy", Version(2), SampleFiles(2));
  EXPECT_EQ(reader->BeginStaging("policy", m).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(reader->Rollback("policy").status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(Store::Open(dir.path() / "missing", {.read_only = true}).status().code(),
            Code::kNotFound);
}

TEST(Store, ImportsADirectoryByCopyOrHardlink) {
  TempDir dir;
  Store store = OpenOrDie(dir.path() / "store");
  auto files = SampleFiles(8);
  store_test::WriteFiles(dir.path() / "ckpt", files);
  Manifest m1 = MakeManifest("policy", Version(1), files);
  ASSERT_TRUE(store.ImportDirectory("policy", m1, dir.path() / "ckpt").ok());
  EXPECT_EQ(*store.Current("policy"), Version(1));
  EXPECT_TRUE(store.Verify("policy", Version(1)).ok());
  EXPECT_EQ(fs::hard_link_count(dir.path() / "store/policy/versions/1/a.safetensors"), 1u);

  Manifest m2 = MakeManifest("policy", Version(2), files);
  ASSERT_TRUE(store.ImportDirectory("policy", m2, dir.path() / "ckpt", ImportMode::kHardlink).ok());
  EXPECT_EQ(fs::hard_link_count(dir.path() / "store/policy/versions/2/a.safetensors"), 2u);
}

TEST(Store, ImportRefusesFilesThatChangedSinceTheManifest) {
  TempDir dir;
  Store store = OpenOrDie(dir.path() / "store");
  auto files = SampleFiles(9);
  Manifest m = MakeManifest("policy", Version(1), files);
  files[3].bytes[100'000] ^= 0x40;  // same size, different content
  store_test::WriteFiles(dir.path() / "ckpt", files);
  Status st = store.ImportDirectory("policy", m, dir.path() / "ckpt");
  EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
  EXPECT_EQ(store.Current("policy").status().code(), Code::kNotFound);
  EXPECT_TRUE(store.ListStaging("policy")->empty());
  EXPECT_TRUE(store::ListDir(dir.path() / "store/policy/staging")->empty());

  files[0].bytes.pop_back();  // a different size is caught before hashing
  store_test::WriteFiles(dir.path() / "ckpt", files);
  EXPECT_EQ(store.ImportDirectory("policy", m, dir.path() / "ckpt").code(), Code::kCorrupt);
  EXPECT_EQ(store.ImportDirectory("policy", m, dir.path() / "nowhere").code(), Code::kIoError);
}

std::vector<std::string> PathsOf(const std::vector<store_test::TestFile>& files) {
  std::vector<std::string> out;
  for (const auto& f : files) out.push_back(f.path);
  return out;
}

TEST(Store, StagedImportCommitsWithoutHashingAgain) {
  for (ImportMode mode : {ImportMode::kCopy, ImportMode::kHardlink}) {
    TempDir dir;
    Store store = OpenOrDie(dir.path() / "store");
    auto files = SampleFiles(10);
    store_test::WriteFiles(dir.path() / "ckpt", files);
    auto staged =
        store.StageImport("policy", Version(1), PathsOf(files), dir.path() / "ckpt", mode);
    ASSERT_TRUE(staged.ok()) << staged.status().ToString();
    const fs::path at = staged->dir();
    EXPECT_EQ(ReadAll(at / files[3].path), files[3].bytes);
    EXPECT_EQ(fs::hard_link_count(at / files[0].path), mode == ImportMode::kHardlink ? 2u : 1u);
    EXPECT_EQ(store.Current("policy").status().code(), Code::kNotFound);  // nothing visible yet

    Manifest m = MakeManifest("policy", Version(1), files);
    ASSERT_TRUE(store.CommitImport("policy", m, std::move(*staged)).ok());
    EXPECT_EQ(*store.Current("policy"), Version(1));
    EXPECT_TRUE(store.Verify("policy", Version(1)).ok());
    EXPECT_FALSE(fs::exists(at));  // the private names are gone, the version keeps the inodes
    EXPECT_EQ(fs::hard_link_count(dir.path() / "store/policy/versions/1" / files[0].path),
              mode == ImportMode::kHardlink ? 2u : 1u);
  }
}

TEST(Store, StagedImportBringsInTheFileASymlinkNames) {
  // OpenCheckpoint accepts a symlink inside a checkpoint (a cache that links blobs): the store
  // must hold the bytes it names as a regular file, in either mode.
  for (ImportMode mode : {ImportMode::kCopy, ImportMode::kHardlink}) {
    TempDir dir;
    Store store = OpenOrDie(dir.path() / "store");
    auto files = SampleFiles(12);
    store_test::WriteFiles(dir.path() / "blobs", files);
    fs::create_directories(dir.path() / "ckpt");
    for (const auto& f : files) {
      fs::create_directories((dir.path() / "ckpt" / f.path).parent_path());
      fs::create_symlink(dir.path() / "blobs" / f.path, dir.path() / "ckpt" / f.path);
    }
    auto staged =
        store.StageImport("policy", Version(1), PathsOf(files), dir.path() / "ckpt", mode);
    ASSERT_TRUE(staged.ok()) << staged.status().ToString();
    Manifest m = MakeManifest("policy", Version(1), files);
    ASSERT_TRUE(store.CommitImport("policy", m, std::move(*staged)).ok());
    const fs::path held = dir.path() / "store/policy/versions/1" / files[0].path;
    EXPECT_FALSE(fs::is_symlink(held));
    EXPECT_EQ(ReadAll(held), files[0].bytes);
    EXPECT_TRUE(store.Verify("policy", Version(1)).ok());
  }
}

TEST(Store, StagedImportRefusesAFileWrittenAfterItWasLinked) {
  TempDir dir;
  Store store = OpenOrDie(dir.path() / "store");
  auto files = SampleFiles(11);
  store_test::WriteFiles(dir.path() / "ckpt", files);
  auto staged = store.StageImport("policy", Version(1), PathsOf(files), dir.path() / "ckpt",
                                  ImportMode::kHardlink);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  Manifest m = MakeManifest("policy", Version(1), files);  // "hashed" before the write below
  const fs::path at = staged->dir();
  {
    // The trainer writes into the shared inode in place: same size, new bytes.
    std::fstream f(dir.path() / "ckpt" / files[2].path, std::ios::in | std::ios::out);
    f.seekp(10);
    f.put('x');
  }
  // Timestamps are coarse (a jiffy); make sure the write lands on a later tick than the link.
  const auto later = fs::last_write_time(at / files[2].path) + std::chrono::seconds(1);
  fs::last_write_time(dir.path() / "ckpt" / files[2].path, later);
  Status st = store.CommitImport("policy", m, std::move(*staged));
  EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
  EXPECT_NE(st.message().find(files[2].path), std::string::npos) << st.ToString();
  EXPECT_EQ(store.Current("policy").status().code(), Code::kNotFound);
  EXPECT_TRUE(store.ListStaging("policy")->empty());
  EXPECT_FALSE(fs::exists(at));
}

TEST(Store, StagedImportBadInputLeavesNothing) {
  TempDir dir;
  Store store = OpenOrDie(dir.path() / "store");
  auto files = SampleFiles(12);
  store_test::WriteFiles(dir.path() / "ckpt", files);
  std::vector<std::string> paths = PathsOf(files);
  paths.push_back("missing.safetensors");
  auto missing =
      store.StageImport("policy", Version(1), paths, dir.path() / "ckpt", ImportMode::kCopy);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.safetensors"), std::string::npos);
  EXPECT_TRUE(store::ListDir(dir.path() / "store/policy/staging")->empty());
  EXPECT_EQ(
      store.StageImport("policy", Version(1), {"../x"}, dir.path() / "ckpt", ImportMode::kCopy)
          .status()
          .code(),
      Code::kCorrupt);

  // A manifest for other files, or another version, commits nothing.
  auto staged = store.StageImport("policy", Version(1), PathsOf(files), dir.path() / "ckpt",
                                  ImportMode::kCopy);
  ASSERT_TRUE(staged.ok());
  auto fewer = files;
  fewer.pop_back();
  Manifest other = MakeManifest("policy", Version(1), fewer);
  EXPECT_EQ(store.CommitImport("policy", other, std::move(*staged)).code(), Code::kInvalidArgument);
  staged = store.StageImport("policy", Version(1), PathsOf(files), dir.path() / "ckpt",
                             ImportMode::kCopy);
  ASSERT_TRUE(staged.ok());
  EXPECT_EQ(
      store.CommitImport("policy", MakeManifest("policy", Version(2), files), std::move(*staged))
          .code(),
      Code::kInvalidArgument);
  EXPECT_EQ(store.Current("policy").status().code(), Code::kNotFound);
  EXPECT_TRUE(store::ListDir(dir.path() / "store/policy/staging")->empty());

  // Dropped without a commit (the publisher failed in between): removed, nothing visible.
  {
    auto dropped = store.StageImport("policy", Version(1), PathsOf(files), dir.path() / "ckpt",
                                     ImportMode::kCopy);
    ASSERT_TRUE(dropped.ok());
  }
  EXPECT_TRUE(store::ListDir(dir.path() / "store/policy/staging")->empty());
}

TEST(Store, OpenRemovesAnImportACrashLeftBehind) {
  TempDir dir;
  { OpenOrDie(dir.path() / "store"); }
  // What a publisher killed between StageImport and CommitImport leaves.
  const fs::path left = dir.path() / "store/policy/staging/.import-1/sub";
  fs::create_directories(left);
  store_test::WriteFiles(left, SampleFiles(13));
  Store store = OpenOrDie(dir.path() / "store");
  EXPECT_TRUE(store::ListDir(dir.path() / "store/policy/staging")->empty());
  EXPECT_EQ(store.Current("policy").status().code(), Code::kNotFound);
  EXPECT_TRUE(store.ListStaging("policy")->empty());
}

}  // namespace
}  // namespace weightcast
