// Streaming a version that is still arriving (client/version_stream.h): a tensor is handed over
// only once every chunk it spans is recorded verified, once, in the caller's order when one is
// given; the stream ends committed or with the abort's reason.
#include "client/version_stream.h"

#include <gtest/gtest.h>

#include <set>

#include "store/store.h"
#include "unit/store/store_test_util.h"

namespace weightcast::client {
namespace {

using store_test::ChunkOf;
using store_test::Flat;
using store_test::MakeManifest;
using store_test::SampleFiles;
using store_test::TempDir;
using Clock = VersionStreamCore::Clock;

// The sample files with three tensors: t0 spans chunks 0 and 1, t1 lies in chunk 1, t2 (in the
// last file) spans chunks 1 to 3.
struct Fixture {
  TempDir dir;
  std::vector<store_test::TestFile> files = SampleFiles(5);
  std::string flat = Flat(files);
  Manifest m;
  std::optional<Store> store;

  Fixture() {
    m = MakeManifest("policy", Version(1), files);
    m.tensors = {{"t0", DType::kU8, {70'000}, 0, 0, 70'000},
                 {"t1", DType::kU8, {30'000}, 0, 70'000, 30'000},
                 {"t2", DType::kU8, {150'001}, 3, 100'010, 150'001}};
    m.root = ComputeRoot(m);
    // The default record batch (64 chunks): a reader sees chunks long before their batch is
    // durable.
    auto s = Store::Open(dir.path() / "store");
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    store.emplace(std::move(*s));
  }

  StreamSpec Spec(std::vector<std::string> order = {}) {
    StreamSpec spec;
    spec.store = dir.path() / "store";
    spec.channel = "policy";
    spec.version = Version(1);
    spec.order = std::move(order);
    return spec;
  }

  static std::optional<Clock::time_point> Soon() {
    return Clock::now() + std::chrono::milliseconds(60);
  }

  // The name of the next tensor (checking its bytes), "" at the end, or the error's code name.
  std::string Next(VersionStreamCore& s, std::optional<Clock::time_point> deadline = Soon()) {
    auto t = s.Next(deadline);
    if (!t.ok()) return "error " + t.status().ToString();
    if (!t->has_value()) return "";
    const TensorView& v = **t;
    const ManifestTensor& info = s.tensor_info(s.last_index());
    EXPECT_EQ(v.name, info.name);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(v.bytes.data()), v.bytes.size()),
              flat.substr(info.offset, info.size))
        << v.name;
    return v.name;
  }
};

bool TimedOut(const std::string& next) {
  return next.find("DEADLINE_EXCEEDED") != std::string::npos;
}

TEST(VersionStream, HandsOverATensorOnlyOnceEveryChunkOfItIsVerified) {
  Fixture f;
  ASSERT_EQ(f.m.chunk_count(), 4u);
  auto staged = f.store->BeginStaging("policy", f.m);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  auto s = VersionStreamCore::Open(f.Spec(), Fixture::Soon());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  VersionStreamCore& stream = **s;
  EXPECT_EQ(stream.tensor_count(), 3u);
  EXPECT_TRUE(TimedOut(f.Next(stream)));

  // Written but not verified: still nothing.
  ASSERT_TRUE(staged->WriteChunk(ChunkIndex(1), ChunkOf(f.flat, f.m, ChunkIndex(1))).ok());
  EXPECT_TRUE(TimedOut(f.Next(stream)));
  ASSERT_TRUE(staged->MarkVerified(ChunkIndex(1)).ok());
  EXPECT_EQ(f.Next(stream), "t1");
  EXPECT_TRUE(TimedOut(f.Next(stream)));
  // Chunks out of order: t2 needs 1, 2 and 3; t0 needs 0 and 1.
  ASSERT_TRUE(staged->PutChunk(ChunkIndex(3), ChunkOf(f.flat, f.m, ChunkIndex(3))).ok());
  EXPECT_TRUE(TimedOut(f.Next(stream)));
  ASSERT_TRUE(staged->PutChunk(ChunkIndex(2), ChunkOf(f.flat, f.m, ChunkIndex(2))).ok());
  EXPECT_EQ(f.Next(stream), "t2");
  ASSERT_TRUE(staged->PutChunk(ChunkIndex(0), ChunkOf(f.flat, f.m, ChunkIndex(0))).ok());
  EXPECT_EQ(f.Next(stream), "t0");
  EXPECT_EQ(f.Next(stream), "") << "each tensor once";
  EXPECT_EQ(stream.handed_over(), 3u);

  // Every tensor handed over is not committed.
  EXPECT_FALSE(stream.committed());
  EXPECT_EQ(stream.WaitCommitted(Fixture::Soon()).code(), Code::kDeadlineExceeded);
  ASSERT_TRUE(f.store->Commit("policy", Version(1)).ok());
  EXPECT_TRUE(stream.WaitCommitted(Fixture::Soon()).ok());
  EXPECT_TRUE(stream.committed());
}

TEST(VersionStream, AnAgentThatRestartsAndResumesTheStagingKeepsTheStreamGoing) {
  Fixture f;
  {
    auto staged = f.store->BeginStaging("policy", f.m);
    ASSERT_TRUE(staged.ok());
    ASSERT_TRUE(staged->PutChunk(ChunkIndex(1), ChunkOf(f.flat, f.m, ChunkIndex(1))).ok());
  }
  auto s = VersionStreamCore::Open(f.Spec(), Fixture::Soon());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(f.Next(**s), "t1");
  // The agent stops (its staging handle and store go) and a new one resumes the staging.
  f.store.reset();
  auto reopened = Store::Open(f.dir.path() / "store");
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  f.store.emplace(std::move(*reopened));
  auto resumed = f.store->ResumeStaging("policy", Version(1));
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_TRUE(resumed->HasChunk(ChunkIndex(1)));
  for (uint32_t c : {0u, 2u, 3u}) {
    ASSERT_TRUE(resumed->PutChunk(ChunkIndex(c), ChunkOf(f.flat, f.m, ChunkIndex(c))).ok());
  }
  std::set<std::string> rest = {f.Next(**s), f.Next(**s)};
  EXPECT_EQ(rest, (std::set<std::string>{"t0", "t2"}));
  EXPECT_EQ(f.Next(**s), "") << "t1 once, though the resumed live record lists chunk 1 again";
  ASSERT_TRUE(f.store->Commit("policy", Version(1)).ok());
  EXPECT_TRUE((*s)->WaitCommitted(Fixture::Soon()).ok());
}

TEST(VersionStream, TheCallersOrderComesFirstThenCompletionOrder) {
  Fixture f;
  auto staged = f.store->BeginStaging("policy", f.m);
  ASSERT_TRUE(staged.ok());
  auto s = VersionStreamCore::Open(f.Spec({"t2", "t0"}), Fixture::Soon());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  VersionStreamCore& stream = **s;
  const std::vector<ChunkIndex> order = stream.WantedChunkOrder();
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order[0], ChunkIndex(1));  // t2's chunks, then t0's first, then the rest
  EXPECT_EQ(order[1], ChunkIndex(2));
  EXPECT_EQ(order[2], ChunkIndex(3));
  EXPECT_EQ(order[3], ChunkIndex(0));

  ASSERT_TRUE(staged->PutChunk(ChunkIndex(1), ChunkOf(f.flat, f.m, ChunkIndex(1))).ok());
  EXPECT_TRUE(TimedOut(f.Next(stream))) << "t1 is ready but waits for the ordered tensors";
  ASSERT_TRUE(staged->PutChunk(ChunkIndex(0), ChunkOf(f.flat, f.m, ChunkIndex(0))).ok());
  EXPECT_TRUE(TimedOut(f.Next(stream))) << "t0 is ready but comes after t2";
  ASSERT_TRUE(staged->PutChunk(ChunkIndex(2), ChunkOf(f.flat, f.m, ChunkIndex(2))).ok());
  ASSERT_TRUE(staged->PutChunk(ChunkIndex(3), ChunkOf(f.flat, f.m, ChunkIndex(3))).ok());
  EXPECT_EQ(f.Next(stream), "t2");
  EXPECT_EQ(f.Next(stream), "t0");
  EXPECT_EQ(f.Next(stream), "t1");
  EXPECT_EQ(f.Next(stream), "");

  auto bad = VersionStreamCore::Open(f.Spec({"t9"}), Fixture::Soon());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  auto twice = VersionStreamCore::Open(f.Spec({"t0", "t0"}), Fixture::Soon());
  EXPECT_EQ(twice.status().code(), Code::kInvalidArgument);
}

TEST(VersionStream, AnAbortEndsTheStreamWithItsReason) {
  Fixture f;
  auto staged = f.store->BeginStaging("policy", f.m);
  ASSERT_TRUE(staged.ok());
  auto s = VersionStreamCore::Open(f.Spec(), Fixture::Soon());
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(staged->PutChunk(ChunkIndex(1), ChunkOf(f.flat, f.m, ChunkIndex(1))).ok());
  EXPECT_EQ(f.Next(**s), "t1");
  ASSERT_TRUE(f.store->Abort("policy", Version(1), "prepare deadline passed").ok());
  const std::string next = f.Next(**s);
  EXPECT_NE(next.find("ABORTED"), std::string::npos) << next;
  EXPECT_NE(next.find("prepare deadline passed"), std::string::npos) << next;

  // Opened after the abort: the same reason at once.
  auto late = VersionStreamCore::Open(f.Spec(), Fixture::Soon());
  EXPECT_EQ(late.status().code(), Code::kAborted);
  EXPECT_NE(late.status().message().find("prepare deadline passed"), std::string::npos);
}

TEST(VersionStream, AStagingAbortedAndStagedAgainEndsTheOldStream) {
  Fixture f;
  auto staged = f.store->BeginStaging("policy", f.m);
  ASSERT_TRUE(staged.ok());
  auto s = VersionStreamCore::Open(f.Spec(), Fixture::Soon());
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(f.store->Abort("policy", Version(1), "superseded").ok());
  auto again = f.store->BeginStaging("policy", f.m);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  for (uint32_t c = 0; c < f.m.chunk_count(); ++c) {
    ASSERT_TRUE(again->PutChunk(ChunkIndex(c), ChunkOf(f.flat, f.m, ChunkIndex(c))).ok());
  }
  EXPECT_EQ((*s)->Next(Fixture::Soon()).status().code(), Code::kAborted)
      << "the old stream's files are not the new staging's";
}

TEST(VersionStream, ACommittedVersionStreamsAtOnceAndAFutureOneIsWaitedFor) {
  Fixture f;
  auto staged = f.store->BeginStaging("policy", f.m);
  ASSERT_TRUE(staged.ok());
  for (uint32_t c = 0; c < f.m.chunk_count(); ++c) {
    ASSERT_TRUE(staged->PutChunk(ChunkIndex(c), ChunkOf(f.flat, f.m, ChunkIndex(c))).ok());
  }
  ASSERT_TRUE(f.store->Commit("policy", Version(1)).ok());
  auto s = VersionStreamCore::Open(f.Spec({"t1"}), Fixture::Soon());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE((*s)->committed());
  EXPECT_EQ(f.Next(**s), "t1");
  EXPECT_EQ(f.Next(**s), "t0");
  EXPECT_EQ(f.Next(**s), "t2");
  EXPECT_EQ(f.Next(**s), "");
  EXPECT_TRUE((*s)->WaitCommitted(Fixture::Soon()).ok());

  StreamSpec never = f.Spec();
  never.version = Version(7);
  EXPECT_EQ(VersionStreamCore::Open(never, Fixture::Soon()).status().code(),
            Code::kDeadlineExceeded)
      << "a version still to come is waited for";
}

TEST(VersionStream, ASubsetAgentsVersionHandsOverOnlyTheTensorsItHolds) {
  Fixture f;
  auto staged = f.store->BeginStaging("policy", f.m);
  ASSERT_TRUE(staged.ok());
  for (uint32_t c : {0u, 1u}) {
    ASSERT_TRUE(staged->PutChunk(ChunkIndex(c), ChunkOf(f.flat, f.m, ChunkIndex(c))).ok());
  }
  PartialVersion wanted;
  wanted.patterns = {"t0", "t1"};
  wanted.tensors = {"t0", "t1"};
  wanted.chunks = {ChunkIndex(0), ChunkIndex(1)};
  ASSERT_TRUE(f.store->CommitPartial("policy", Version(1), wanted).ok());
  auto s = VersionStreamCore::Open(f.Spec({"t2", "t1"}), Fixture::Soon());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(f.Next(**s), "t1") << "t2 is not held: skipped in the order";
  EXPECT_EQ(f.Next(**s), "t0");
  EXPECT_EQ(f.Next(**s), "") << "and never handed over as its holes";
}

}  // namespace
}  // namespace weightcast::client
