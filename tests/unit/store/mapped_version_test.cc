// The store's mapped views (store/mapped_version.h): committed, partial and staging versions,
// chunks within one file and across files, views outliving what the store does meanwhile.
#include "store/mapped_version.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>

#include "store/store.h"
#include "store_test_util.h"

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

bool SameBytes(std::span<const uint8_t> got, std::span<const uint8_t> want) {
  return std::equal(got.begin(), got.end(), want.begin(), want.end());
}

// SampleFiles at 64 KiB chunks: chunk 1 spans a.safetensors, b/config.json and c.safetensors;
// the others lie in one file.
constexpr uint32_t kSpanningChunk = 1;

TEST(MappedVersion, ServesACommittedVersionFromItsMapping) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  const auto files = SampleFiles(1);
  ASSERT_TRUE(StageAndCommit(store, "policy", Version(1), files).ok());
  const Manifest m = MakeManifest("policy", Version(1), files);
  const std::string flat = Flat(files);

  auto view = store.OpenView("policy", Version(1));
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ((*view)->version(), Version(1));
  EXPECT_FALSE((*view)->partial());
  EXPECT_FALSE((*view)->staging());
  ASSERT_EQ((*view)->manifest().chunk_count(), 4u);
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    auto chunk = (*view)->Chunk(ChunkIndex(i));
    ASSERT_TRUE(chunk.ok()) << i << ": " << chunk.status().ToString();
    EXPECT_TRUE(SameBytes(chunk->bytes, ChunkOf(flat, m, ChunkIndex(i)))) << i;
    // A view of the mapping is owned by the view itself (nothing copied); a chunk across files
    // is gathered into a buffer that owns it.
    const bool gathered = chunk->owner.get() != view->get();
    EXPECT_EQ(gathered, i == kSpanningChunk) << i;
    if (!gathered) {
      const size_t file = i == 0 ? 0 : 3;
      const std::span<const uint8_t> mapped = (*view)->File(file);
      EXPECT_GE(chunk->bytes.data(), mapped.data()) << i;
      EXPECT_LE(chunk->bytes.data() + chunk->bytes.size(), mapped.data() + mapped.size()) << i;
    }
  }
  EXPECT_EQ((*view)->gathered_bytes(), m.ChunkRange(ChunkIndex(kSpanningChunk)).size);

  // Cached: a second open maps nothing again.
  auto again = store.OpenView("policy", Version(1));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), view->get());
  // The copying read goes the same way.
  auto copy = store.ReadChunk("policy", Version(1), ChunkIndex(kSpanningChunk));
  ASSERT_TRUE(copy.ok());
  EXPECT_TRUE(SameBytes(*copy, ChunkOf(flat, m, ChunkIndex(kSpanningChunk))));
}

TEST(MappedVersion, RefusesABadIndexAndAVersionNotCommitted) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  ASSERT_TRUE(StageAndCommit(store, "policy", Version(1), SampleFiles(1)).ok());
  auto view = store.OpenView("policy", Version(1));
  ASSERT_TRUE(view.ok());
  auto beyond = (*view)->Chunk(ChunkIndex(4));
  EXPECT_EQ(beyond.status().code(), Code::kOutOfRange);
  EXPECT_NE(beyond.status().message().find("beyond the 4 chunks of policy/1"), std::string::npos)
      << beyond.status().message();
  EXPECT_FALSE((*view)->Holds(ChunkIndex(4)));
  EXPECT_EQ(store.OpenView("policy", Version(2)).status().code(), Code::kNotFound);
  EXPECT_EQ(store.OpenView("no/such", Version(1)).status().code(), Code::kInvalidArgument);
}

TEST(MappedVersion, RefusesAFileWhoseSizeIsNotTheManifests) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  ASSERT_TRUE(StageAndCommit(store, "policy", Version(1), SampleFiles(1)).ok());
  // Damage from outside: reading the mapping past the file's end would fault, so no view.
  fs::resize_file(dir.path() / "policy/versions/1/c.safetensors", 1000);
  auto view = store.OpenView("policy", Version(1));
  EXPECT_EQ(view.status().code(), Code::kCorrupt);
  EXPECT_NE(view.status().message().find("c.safetensors"), std::string::npos);
}

TEST(MappedVersion, APartialVersionRefusesTheChunksItDoesNotHold) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  const auto files = SampleFiles(2);
  const Manifest m = MakeManifest("policy", Version(1), files);
  const std::string flat = Flat(files);
  auto staged = store.BeginStaging("policy", m);
  ASSERT_TRUE(staged.ok());
  for (uint32_t i : {0u, 2u}) {
    ASSERT_TRUE(staged->PutChunk(ChunkIndex(i), ChunkOf(flat, m, ChunkIndex(i))).ok());
  }
  PartialVersion wanted;
  wanted.patterns = {"a*"};
  wanted.chunks = {ChunkIndex(0), ChunkIndex(2)};
  ASSERT_TRUE(store.CommitPartial("policy", Version(1), wanted).ok());

  auto view = store.OpenView("policy", Version(1));
  ASSERT_TRUE(view.ok());
  EXPECT_TRUE((*view)->partial());
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    const bool held = i == 0 || i == 2;
    EXPECT_EQ((*view)->Holds(ChunkIndex(i)), held) << i;
    auto chunk = (*view)->Chunk(ChunkIndex(i));
    if (held) {
      ASSERT_TRUE(chunk.ok()) << i;
      EXPECT_TRUE(SameBytes(chunk->bytes, ChunkOf(flat, m, ChunkIndex(i)))) << i;
    } else {
      EXPECT_EQ(chunk.status().code(), Code::kNotFound) << i;
      EXPECT_NE(chunk.status().message().find("partial"), std::string::npos);
    }
  }
}

TEST(MappedVersion, AStagingViewReadsVerifiedChunksAndOutlivesTheCommit) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  const auto files = SampleFiles(3);
  const Manifest m = MakeManifest("policy", Version(1), files);
  const std::string flat = Flat(files);
  auto staged = store.BeginStaging("policy", m);
  ASSERT_TRUE(staged.ok());
  auto view = staged->View();
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_TRUE((*view)->staging());
  // One view per staging.
  EXPECT_EQ(staged->View()->get(), view->get());

  EXPECT_EQ((*view)->Chunk(ChunkIndex(0)).status().code(), Code::kNotFound);
  // Written but not verified: still not readable.
  ASSERT_TRUE(staged->WriteChunk(ChunkIndex(0), ChunkOf(flat, m, ChunkIndex(0))).ok());
  EXPECT_FALSE((*view)->Holds(ChunkIndex(0)));
  ASSERT_TRUE(staged->MarkVerified(ChunkIndex(0)).ok());
  auto first = (*view)->Chunk(ChunkIndex(0));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->owner.get(), view->get());  // a view of the mapping
  EXPECT_TRUE(SameBytes(first->bytes, ChunkOf(flat, m, ChunkIndex(0))));

  for (uint32_t i = 1; i < m.chunk_count(); ++i) {
    ASSERT_TRUE(staged->PutChunk(ChunkIndex(i), ChunkOf(flat, m, ChunkIndex(i))).ok());
  }
  auto spanning = (*view)->Chunk(ChunkIndex(kSpanningChunk));
  ASSERT_TRUE(spanning.ok());
  EXPECT_NE(spanning->owner.get(), view->get());  // gathered into a buffer of its own
  EXPECT_TRUE(SameBytes(spanning->bytes, ChunkOf(flat, m, ChunkIndex(kSpanningChunk))));

  ASSERT_TRUE(store.Commit("policy", Version(1)).ok());
  // The files were renamed into versions/1: the same inodes, so the view still reads them.
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    auto chunk = (*view)->Chunk(ChunkIndex(i));
    ASSERT_TRUE(chunk.ok()) << i;
    EXPECT_TRUE(SameBytes(chunk->bytes, ChunkOf(flat, m, ChunkIndex(i)))) << i;
  }
  // A new view of a committed staging is refused; the committed version has its own.
  EXPECT_EQ(staged->View().status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(staged->ReadChunk(ChunkIndex(0)).status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(store.OpenView("policy", Version(1)).ok());
}

TEST(MappedVersion, AStagingViewWithoutHandlesRefusesToGuess) {
  TempDir dir;
  Store store = OpenOrDie(dir.path());
  const auto files = SampleFiles(4);
  const Manifest m = MakeManifest("policy", Version(1), files);
  std::shared_ptr<const MappedVersion> view;
  {
    auto staged = store.BeginStaging("policy", m);
    ASSERT_TRUE(staged.ok());
    ASSERT_TRUE(staged->PutChunk(ChunkIndex(0), ChunkOf(Flat(files), m, ChunkIndex(0))).ok());
    view = *staged->View();
  }
  EXPECT_EQ(view->Chunk(ChunkIndex(0)).status().code(), Code::kFailedPrecondition);
}

TEST(MappedVersion, AHeldViewOutlivesTheCollectionOfItsVersion) {
  TempDir dir;
  StoreOptions options;
  options.keep_versions = 1;
  Store store = OpenOrDie(dir.path(), options);
  const auto v1 = SampleFiles(5);
  const Manifest m1 = MakeManifest("policy", Version(1), v1);
  ASSERT_TRUE(StageAndCommit(store, "policy", Version(1), v1).ok());
  auto view = store.OpenView("policy", Version(1));
  ASSERT_TRUE(view.ok());
  // A chunk in flight holds only its owner, not the view handle.
  auto in_flight = (*view)->Chunk(ChunkIndex(3));
  ASSERT_TRUE(in_flight.ok());
  std::shared_ptr<const MappedVersion> held = *view;
  view = NotFound("dropped");

  ASSERT_TRUE(StageAndCommit(store, "policy", Version(2), SampleFiles(6)).ok());
  ASSERT_FALSE(fs::exists(dir.path() / "policy/versions/1"));  // collected: files unlinked
  EXPECT_EQ(store.OpenView("policy", Version(1)).status().code(), Code::kNotFound);
  const std::string flat = Flat(v1);
  for (uint32_t i = 0; i < m1.chunk_count(); ++i) {
    auto chunk = held->Chunk(ChunkIndex(i));
    ASSERT_TRUE(chunk.ok()) << i;
    EXPECT_TRUE(SameBytes(chunk->bytes, ChunkOf(flat, m1, ChunkIndex(i)))) << i;
  }
  held.reset();
  // The owner alone keeps the mapping.
  EXPECT_TRUE(SameBytes(in_flight->bytes, ChunkOf(flat, m1, ChunkIndex(3))));
}

TEST(MappedVersion, TheCacheKeepsOnlyTheNewestViewsNobodyHolds) {
  TempDir dir;
  StoreOptions options;
  options.keep_versions = 3;
  options.mapped_versions = 1;
  Store store = OpenOrDie(dir.path(), options);
  for (uint64_t v = 1; v <= 3; ++v) {
    ASSERT_TRUE(StageAndCommit(store, "policy", Version(v), SampleFiles(v)).ok());
  }
  std::weak_ptr<const MappedVersion> first = *store.OpenView("policy", Version(1));
  EXPECT_FALSE(first.expired());  // kept by the cache
  std::shared_ptr<const MappedVersion> second = *store.OpenView("policy", Version(2));
  EXPECT_TRUE(first.expired());  // displaced, and nobody held it
  std::shared_ptr<const MappedVersion> third = *store.OpenView("policy", Version(3));
  // Held by a caller: still the cached view, though displaced from the kept ones.
  EXPECT_EQ(store.OpenView("policy", Version(2))->get(), second.get());
}

}  // namespace
}  // namespace weightcast
