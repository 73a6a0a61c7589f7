// Partial versions: what a tensor-subset agent commits (store/partial.h).
#include "store/partial.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>

#include <gtest/gtest.h>

#include "store/store.h"
#include "store_test_util.h"

namespace weightcast {
namespace {

using store_test::ChunkOf;
using store_test::Flat;
using store_test::MakeManifest;
using store_test::OpenOrDie;
using store_test::ReadAll;
using store_test::SampleFiles;
using store_test::TempDir;

namespace fs = std::filesystem;

PartialVersion Wanted(std::vector<uint32_t> chunks) {
  PartialVersion p;
  p.patterns = {"a*"};
  for (uint32_t c : chunks) p.chunks.emplace_back(c);
  return p;
}

TEST(PartialRecord, RoundTripsAndRefusesWhatTheManifestLacks) {
  Manifest m = MakeManifest("policy", Version(1), SampleFiles(1));
  m.tensors = {{"w", DType::kU8, {10}, 0, 8, 10}};
  PartialVersion p = Wanted({0, 2});
  p.tensors = {"w"};
  auto back = ParsePartial(SerializePartial(p), m);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->patterns, p.patterns);
  EXPECT_EQ(back->tensors, p.tensors);
  EXPECT_EQ(back->chunks, p.chunks);
  EXPECT_TRUE(back->HoldsChunk(ChunkIndex(2)));
  EXPECT_FALSE(back->HoldsChunk(ChunkIndex(1)));
  EXPECT_TRUE(back->HoldsTensor("w"));
  EXPECT_FALSE(back->HoldsTensor("v"));

  PartialVersion beyond = Wanted({0, m.chunk_count()});
  EXPECT_EQ(ParsePartial(SerializePartial(beyond), m).status().code(), Code::kCorrupt);
  PartialVersion unordered = Wanted({2, 1});
  EXPECT_EQ(ParsePartial(SerializePartial(unordered), m).status().code(), Code::kCorrupt);
  PartialVersion unknown = Wanted({0});
  unknown.tensors = {"nope"};
  EXPECT_EQ(ParsePartial(SerializePartial(unknown), m).status().code(), Code::kCorrupt);
  for (const char* bad : {"", "[]", "{\"format\": 2}", "{\"format\": 1, \"chunks\": [-1]}"}) {
    EXPECT_EQ(ParsePartial(bad, m).status().code(), Code::kCorrupt) << bad;
  }
}

TEST(PartialRecord, APayloadVersionSaysSo) {
  Manifest m = MakeManifest("policy", Version(1), SampleFiles(1));
  PartialVersion p = Wanted({0});
  p.payloads = true;
  auto back = ParsePartial(SerializePartial(p), m);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->payloads);
  auto plain = ParsePartial(SerializePartial(Wanted({0})), m);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->payloads);
  EXPECT_EQ(SerializePartial(Wanted({0})).find("payloads"), std::string::npos);
  EXPECT_EQ(ParsePartial(R"({"format": 1, "patterns": [], "tensors": [], "chunks": [],
                             "payloads": 1})",
                         m)
                .status()
                .code(),
            Code::kCorrupt);
}

// A staging that is not preallocated holds no blocks until chunks are written.
TEST(PartialVersion, AStagingWithoutPreallocationIsSparse) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  auto files = SampleFiles(3);
  Manifest m = MakeManifest("policy", Version(1), files);
  auto staged = store.BeginStaging("policy", m, {.preallocate = false});
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  const fs::path file = dir.path() / "policy/staging/1/files" / files[0].path;
  ASSERT_TRUE(fs::exists(file));
  EXPECT_EQ(fs::file_size(file), files[0].bytes.size());
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_blocks, 0);
  const std::string flat = Flat(files);
  ASSERT_TRUE(staged->PutChunk(ChunkIndex(0), ChunkOf(flat, m, ChunkIndex(0))).ok());
  ASSERT_TRUE(store.CommitPartial("policy", Version(1), Wanted({0})).ok());
  auto chunk = store.ReadChunk("policy", Version(1), ChunkIndex(0));
  ASSERT_TRUE(chunk.ok());
}

// Payload versions are forgotten; `current` moves to the newest version left, or goes.
TEST(PartialVersion, ForgettingPayloadVersionsKeepsTheWholeOnes) {
  TempDir dir;
  StoreOptions keep_three;
  keep_three.keep_versions = 3;
  Store store = OpenOrDie(dir.path(), keep_three);
  auto files = SampleFiles(3);
  const std::string flat = Flat(files);
  auto commit = [&](uint64_t v, bool payloads) {
    Manifest m = MakeManifest("policy", Version(v), files);
    auto staged = store.BeginStaging("policy", m, {.preallocate = !payloads});
    ASSERT_TRUE(staged.ok());
    for (uint32_t i = 0; i < m.chunk_count(); ++i) {
      if (payloads && i > 0) break;
      ASSERT_TRUE(staged->PutChunk(ChunkIndex(i), ChunkOf(flat, m, ChunkIndex(i))).ok());
    }
    if (!payloads) {
      ASSERT_TRUE(store.Commit("policy", Version(v)).ok());
      return;
    }
    PartialVersion p;
    p.chunks = {ChunkIndex(0)};
    p.payloads = true;
    ASSERT_TRUE(store.CommitPartial("policy", Version(v), p).ok());
  };
  commit(1, false);
  commit(2, true);
  commit(3, true);
  EXPECT_EQ(*store.Current("policy"), Version(3));
  auto forgotten = store.ForgetPayloadVersions("policy");
  ASSERT_TRUE(forgotten.ok()) << forgotten.status().ToString();
  EXPECT_EQ(*forgotten, (std::vector<Version>{Version(2), Version(3)}));
  EXPECT_EQ(*store.Current("policy"), Version(1));
  EXPECT_TRUE(store.Verify("policy", Version(1)).ok());
  EXPECT_FALSE(fs::exists(dir.path() / "policy/versions/3"));
  auto list = store.List("policy");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 1u);
  // Nothing to forget: nothing changes.
  auto again = store.ForgetPayloadVersions("policy");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty());
  EXPECT_TRUE(store.ForgetPayloadVersions("unknown")->empty());
}

TEST(PartialVersion, ForgettingEveryVersionLeavesNoCurrent) {
  TempDir dir;
  auto files = SampleFiles(3);
  const std::string flat = Flat(files);
  {
    Store store = OpenOrDie(dir.path());
    Manifest m = MakeManifest("policy", Version(4), files);
    auto staged = store.BeginStaging("policy", m);
    ASSERT_TRUE(staged.ok());
    ASSERT_TRUE(staged->PutChunk(ChunkIndex(0), ChunkOf(flat, m, ChunkIndex(0))).ok());
    PartialVersion p;
    p.chunks = {ChunkIndex(0)};
    p.payloads = true;
    ASSERT_TRUE(store.CommitPartial("policy", Version(4), p).ok());
    auto forgotten = store.ForgetPayloadVersions("policy");
    ASSERT_TRUE(forgotten.ok()) << forgotten.status().ToString();
    EXPECT_EQ(forgotten->size(), 1u);
    EXPECT_EQ(store.Current("policy").status().code(), Code::kNotFound);
  }
  // Reopened (recovery runs), a new version commits as in a fresh channel.
  Store store = OpenOrDie(dir.path());
  EXPECT_EQ(store.Current("policy").status().code(), Code::kNotFound);
  Manifest m = MakeManifest("policy", Version(5), files);
  auto staged = store.BeginStaging("policy", m);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    ASSERT_TRUE(staged->PutChunk(ChunkIndex(i), ChunkOf(flat, m, ChunkIndex(i))).ok());
  }
  ASSERT_TRUE(store.Commit("policy", Version(5)).ok());
  EXPECT_EQ(*store.Current("policy"), Version(5));
}

TEST(PartialVersion, CommitsOnlyWithItsChunksAndServesOnlyThose) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  auto files = SampleFiles(3);
  Manifest m = MakeManifest("policy", Version(1), files);
  ASSERT_GT(m.chunk_count(), 3u);
  const std::string flat = Flat(files);
  auto staged = store.BeginStaging("policy", m);
  ASSERT_TRUE(staged.ok());
  ASSERT_TRUE(staged->PutChunk(ChunkIndex(0), ChunkOf(flat, m, ChunkIndex(0))).ok());

  // Chunk 2 is wanted and missing: no commit.
  Status refused = store.CommitPartial("policy", Version(1), Wanted({0, 2}));
  EXPECT_EQ(refused.code(), Code::kFailedPrecondition);
  EXPECT_NE(refused.message().find("1 of the 2 chunks"), std::string::npos) << refused.message();
  // A whole commit is refused as before.
  EXPECT_EQ(store.Commit("policy", Version(1)).code(), Code::kFailedPrecondition);

  ASSERT_TRUE(staged->PutChunk(ChunkIndex(2), ChunkOf(flat, m, ChunkIndex(2))).ok());
  ASSERT_TRUE(staged->PutChunk(ChunkIndex(3), ChunkOf(flat, m, ChunkIndex(3))).ok());  // extra
  ASSERT_TRUE(store.CommitPartial("policy", Version(1), Wanted({0, 2})).ok());
  EXPECT_EQ(*store.Current("policy"), Version(1));

  // Recorded with every verified chunk (the extra one included), beside the files.
  auto partial = store.GetPartial("policy", Version(1));
  ASSERT_TRUE(partial.ok() && partial->has_value());
  EXPECT_EQ((*partial)->chunks,
            (std::vector<ChunkIndex>{ChunkIndex(0), ChunkIndex(2), ChunkIndex(3)}));
  EXPECT_EQ((*partial)->patterns, std::vector<std::string>{"a*"});
  EXPECT_TRUE(fs::exists(dir.path() / "policy/versions/1" / std::string(kPartialFileName)));
  auto list = store.List("policy");
  ASSERT_TRUE(list.ok() && list->size() == 1);
  EXPECT_TRUE((*list)[0].partial);

  // Held chunks read back as the source's; holes are never read as chunks.
  for (uint32_t i : {0u, 2u, 3u}) {
    auto chunk = store.ReadChunk("policy", Version(1), ChunkIndex(i));
    ASSERT_TRUE(chunk.ok()) << i;
    auto want = ChunkOf(flat, m, ChunkIndex(i));
    EXPECT_TRUE(std::equal(chunk->begin(), chunk->end(), want.begin(), want.end())) << i;
  }
  EXPECT_EQ(store.ReadChunk("policy", Version(1), ChunkIndex(1)).status().code(), Code::kNotFound);
  // Verify checks the held chunks only (the holes would fail their hashes).
  EXPECT_TRUE(store.Verify("policy", Version(1)).ok())
      << store.Verify("policy", Version(1)).ToString();

  // A byte changed in a held chunk is caught.
  {
    const uint64_t at = m.ChunkRange(ChunkIndex(0)).offset + 5;
    std::fstream f(dir.path() / "policy/versions/1" / files[0].path,
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(static_cast<char>(flat[at] ^ 1));
  }
  StoreOptions read_only;
  read_only.read_only = true;
  Store reopened = OpenOrDie(dir.path(), read_only);  // a fresh cache
  EXPECT_EQ(reopened.Verify("policy", Version(1)).code(), Code::kCorrupt);
}

TEST(PartialVersion, SurvivesReopenAndAWholeVersionHasNoRecord) {
  TempDir dir;
  auto files = SampleFiles(4);
  Manifest m1 = MakeManifest("policy", Version(1), files);
  Manifest m2 = MakeManifest("policy", Version(2), files);
  const std::string flat = Flat(files);
  {
    Store store = OpenOrDie(dir.path());
    auto staged = store.BeginStaging("policy", m1);
    ASSERT_TRUE(staged.ok());
    ASSERT_TRUE(staged->PutChunk(ChunkIndex(1), ChunkOf(flat, m1, ChunkIndex(1))).ok());
    ASSERT_TRUE(store.CommitPartial("policy", Version(1), Wanted({1})).ok());
  }
  Store store = OpenOrDie(dir.path());
  auto partial = store.GetPartial("policy", Version(1));
  ASSERT_TRUE(partial.ok() && partial->has_value());
  EXPECT_EQ((*partial)->chunks, std::vector<ChunkIndex>{ChunkIndex(1)});

  // v2 was once about to be committed partially (its record written among the staged files, then
  // a crash before the commit point); resumed and completed, it is committed whole: no record.
  auto staged = store.BeginStaging("policy", m2);
  ASSERT_TRUE(staged.ok());
  {
    std::ofstream stale(dir.path() / "policy/staging/2/files" / std::string(kPartialFileName));
    stale << SerializePartial(Wanted({1}));
  }
  for (uint32_t i = 0; i < m2.chunk_count(); ++i) {
    ASSERT_TRUE(staged->PutChunk(ChunkIndex(i), ChunkOf(flat, m2, ChunkIndex(i))).ok());
  }
  ASSERT_TRUE(store.Commit("policy", Version(2)).ok());
  auto whole = store.GetPartial("policy", Version(2));
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE(whole->has_value());
  EXPECT_FALSE(fs::exists(dir.path() / "policy/versions/2" / std::string(kPartialFileName)));
  EXPECT_TRUE(store.Verify("policy", Version(2)).ok());
  // A rollback to the kept partial version works like any other.
  auto back = store.Rollback("policy", Version(1));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*store.Current("policy"), Version(1));
}

}  // namespace
}  // namespace weightcast
