#include "publish/watcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "format/safetensors.h"
#include "testing/temp_dir.h"
#include "util/file.h"

namespace weightcast::publish {
namespace {

namespace fs = std::filesystem;
using ::weightcast::testing::TempDir;
using namespace std::chrono_literals;

constexpr net::Duration kSettle = 2s;

// A one-tensor safetensors file of `elements` bf16 values.
void WriteShard(const fs::path& path, const std::string& tensor, uint64_t elements) {
  auto writer = SafetensorsWriter::Create(path, {{tensor, DType::kBF16, {elements}}});
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  std::vector<uint8_t> data(elements * 2, 0x3c);
  ASSERT_TRUE((*writer)->Append(data).ok());
  ASSERT_TRUE((*writer)->Finish().ok());
}

// A two-shard checkpoint with an index naming both shards.
void WriteCheckpoint(const fs::path& dir, bool with_second_shard = true) {
  fs::create_directories(dir);
  WriteShard(dir / "model-00001-of-00002.safetensors", "a", 1000);
  if (with_second_shard) WriteShard(dir / "model-00002-of-00002.safetensors", "b", 1000);
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",)"
      << R"( "b": "model-00002-of-00002.safetensors"}})";
}

struct Fixture {
  TempDir tmp;
  fs::path root = tmp.path() / "ckpts";
  fs::path state = tmp.path() / "state";
  net::FakeClock clock;
  Fixture() { fs::create_directories(root); }
  Watcher Open() {
    auto w = Watcher::Open({.dir = root, .state_file = state, .settle = kSettle}, clock);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return std::move(w).value();
  }
};

std::vector<std::string> Names(const std::vector<WatchEvent>& events, WatchEventKind kind) {
  std::vector<std::string> out;
  for (const WatchEvent& e : events) {
    if (e.kind == kind) out.push_back(e.name);
  }
  return out;
}

std::vector<std::string> Ready(Watcher& w) {
  auto events = w.Poll();
  EXPECT_TRUE(events.ok()) << events.status().ToString();
  return events.ok() ? Names(*events, WatchEventKind::kReady) : std::vector<std::string>{};
}

using Strings = std::vector<std::string>;

TEST(NaturalLess, NumbersCompareByValue) {
  EXPECT_TRUE(NaturalLess("step_9", "step_10"));
  EXPECT_FALSE(NaturalLess("step_10", "step_9"));
  EXPECT_TRUE(NaturalLess("step_2", "step_02b"));
  EXPECT_TRUE(NaturalLess("a", "b"));
  EXPECT_TRUE(NaturalLess("step", "step_1"));
  EXPECT_TRUE(NaturalLess("ckpt-99-final", "ckpt-100"));
  EXPECT_FALSE(NaturalLess("x", "x"));
  // Zero padding alone still gives a strict order.
  EXPECT_NE(NaturalLess("s01", "s1"), NaturalLess("s1", "s01"));
  std::vector<std::string> names = {"step_10", "step_9", "step_100", "step_1"};
  std::sort(names.begin(), names.end(), NaturalLess);
  EXPECT_EQ(names, (Strings{"step_1", "step_9", "step_10", "step_100"}));
}

TEST(Watcher, ACompleteDirectoryWaitsForTheSettleTime) {
  Fixture f;
  Watcher w = f.Open();
  WriteCheckpoint(f.root / "step_1");
  EXPECT_EQ(Ready(w), Strings{});
  f.clock.Advance(kSettle - 1ms);
  EXPECT_EQ(Ready(w), Strings{});
  f.clock.Advance(1ms);
  EXPECT_EQ(Ready(w), Strings{"step_1"});
}

TEST(Watcher, AnyChangeRestartsTheSettleTime) {
  Fixture f;
  Watcher w = f.Open();
  WriteCheckpoint(f.root / "step_1");
  EXPECT_EQ(Ready(w), Strings{});
  f.clock.Advance(kSettle - 1ms);
  // The trainer writes one more file (say its config) just before the settle time is up.
  std::ofstream(f.root / "step_1" / "config.json") << "{}";
  EXPECT_EQ(Ready(w), Strings{});
  f.clock.Advance(kSettle - 1ms);
  EXPECT_EQ(Ready(w), Strings{});
  f.clock.Advance(1ms);
  EXPECT_EQ(Ready(w), Strings{"step_1"});
}

TEST(Watcher, AnIncompleteDirectoryWaitsAndIsReportedOnce) {
  Fixture f;
  Watcher w = f.Open();
  // The index names a second shard that is not there yet.
  WriteCheckpoint(f.root / "step_1", /*with_second_shard=*/false);
  EXPECT_EQ(Ready(w), Strings{});
  f.clock.Advance(kSettle);
  auto events = w.Poll();
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(Names(*events, WatchEventKind::kBroken), Strings{"step_1"});
  EXPECT_EQ(Names(*events, WatchEventKind::kReady), Strings{});
  EXPECT_FALSE((*events)[0].problem.ok());
  // Not again while nothing changes.
  for (int i = 0; i < 3; ++i) {
    f.clock.Advance(kSettle);
    events = w.Poll();
    ASSERT_TRUE(events.ok());
    EXPECT_TRUE(events->empty());
  }
  // The shard arrives: the directory is looked at again and becomes ready once settled.
  WriteShard(f.root / "step_1" / "model-00002-of-00002.safetensors", "b", 1000);
  EXPECT_EQ(Ready(w), Strings{});
  f.clock.Advance(kSettle);
  EXPECT_EQ(Ready(w), Strings{"step_1"});
}

TEST(Watcher, ATruncatedShardIsNotReady) {
  Fixture f;
  Watcher w = f.Open();
  WriteCheckpoint(f.root / "step_1");
  fs::resize_file(f.root / "step_1" / "model-00002-of-00002.safetensors", 500);
  EXPECT_EQ(Ready(w), Strings{});
  f.clock.Advance(kSettle);
  auto events = w.Poll();
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(Names(*events, WatchEventKind::kBroken), Strings{"step_1"});
}

TEST(Watcher, PublishesInNaturalOrder) {
  Fixture f;
  Watcher w = f.Open();
  for (const char* name : {"step_10", "step_9", "step_100", "step_11"}) {
    WriteCheckpoint(f.root / name);
  }
  EXPECT_EQ(Ready(w), Strings{});
  f.clock.Advance(kSettle);
  EXPECT_EQ(Ready(w), (Strings{"step_9", "step_10", "step_11", "step_100"}));
}

TEST(Watcher, ASettlingDirectoryHoldsBackLaterOnes) {
  Fixture f;
  Watcher w = f.Open();
  WriteCheckpoint(f.root / "step_10");
  EXPECT_EQ(Ready(w), Strings{});
  f.clock.Advance(kSettle);
  WriteCheckpoint(f.root / "step_9");  // appears late (slow writer)
  EXPECT_EQ(Ready(w), Strings{});
  f.clock.Advance(kSettle);
  EXPECT_EQ(Ready(w), (Strings{"step_9", "step_10"}));
}

TEST(Watcher, ABrokenDirectoryDoesNotHoldBackLaterOnes) {
  Fixture f;
  Watcher w = f.Open();
  fs::create_directories(f.root / "step_1");  // a save that crashed: empty forever
  WriteCheckpoint(f.root / "step_2");
  EXPECT_EQ(Ready(w), Strings{});
  f.clock.Advance(kSettle);
  auto events = w.Poll();
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(Names(*events, WatchEventKind::kBroken), Strings{"step_1"});
  EXPECT_EQ(Names(*events, WatchEventKind::kReady), Strings{"step_2"});
}

TEST(Watcher, IgnoresHiddenDirectoriesAndFiles) {
  Fixture f;
  Watcher w = f.Open();
  WriteCheckpoint(f.root / ".tmp-step_1");
  std::ofstream(f.root / "notes.txt") << "x";
  f.clock.Advance(kSettle);
  EXPECT_EQ(Ready(w), Strings{});
  f.clock.Advance(kSettle);
  auto events = w.Poll();
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(events->empty());
  // The trainer renames it into place: a new directory, settled from now.
  fs::rename(f.root / ".tmp-step_1", f.root / "step_1");
  EXPECT_EQ(Ready(w), Strings{});
  f.clock.Advance(kSettle);
  EXPECT_EQ(Ready(w), Strings{"step_1"});
}

TEST(Watcher, RemembersWhatItPublishedAcrossRestarts) {
  Fixture f;
  WriteCheckpoint(f.root / "step_9");
  WriteCheckpoint(f.root / "step_10");
  {
    Watcher w = f.Open();
    EXPECT_EQ(Ready(w), Strings{});
    f.clock.Advance(kSettle);
    EXPECT_EQ(Ready(w), (Strings{"step_9", "step_10"}));
    ASSERT_TRUE(w.MarkPublished("step_9").ok());
    EXPECT_TRUE(w.IsPublished("step_9"));
    // Never twice: a published directory is not offered again, even if it is touched.
    std::ofstream(f.root / "step_9" / "extra.txt") << "x";
    f.clock.Advance(kSettle);
    EXPECT_EQ(Ready(w), Strings{"step_10"});
  }
  Watcher again = f.Open();
  EXPECT_TRUE(again.IsPublished("step_9"));
  EXPECT_FALSE(again.IsPublished("step_10"));
  EXPECT_EQ(Ready(again), Strings{});
  f.clock.Advance(kSettle);
  EXPECT_EQ(Ready(again), Strings{"step_10"});
  ASSERT_TRUE(again.MarkPublished("step_10").ok());
  f.clock.Advance(kSettle);
  EXPECT_EQ(Ready(again), Strings{});

  Watcher third = f.Open();
  EXPECT_EQ(third.published(), (NaturalNameSet{"step_9", "step_10"}));
  f.clock.Advance(kSettle);
  EXPECT_EQ(Ready(third), Strings{});
}

TEST(Watcher, ADirectoryOlderThanThePublishedOnesIsReportedOnceNotPublished) {
  Fixture f;
  Watcher w = f.Open();
  WriteCheckpoint(f.root / "step_10");
  f.clock.Advance(kSettle);
  EXPECT_EQ(Ready(w), Strings{});
  f.clock.Advance(kSettle);
  EXPECT_EQ(Ready(w), Strings{"step_10"});
  ASSERT_TRUE(w.MarkPublished("step_10").ok());
  WriteCheckpoint(f.root / "step_5");
  f.clock.Advance(kSettle);
  auto events = w.Poll();
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(Names(*events, WatchEventKind::kSkippedOlder), Strings{"step_5"});
  EXPECT_EQ(Names(*events, WatchEventKind::kReady), Strings{});
  f.clock.Advance(kSettle);
  events = w.Poll();
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(events->empty());
}

TEST(Watcher, RefusesAStateFileThatIsNotOurs) {
  Fixture f;
  ASSERT_TRUE(WriteFileAtomic(f.state, "something else\nstep_1\n").ok());
  auto w = Watcher::Open({.dir = f.root, .state_file = f.state, .settle = kSettle}, f.clock);
  EXPECT_EQ(w.status().code(), Code::kCorrupt);
  ASSERT_TRUE(WriteFileAtomic(f.state, "weightcast publish watch state v1\nstep_1").ok());
  w = Watcher::Open({.dir = f.root, .state_file = f.state, .settle = kSettle}, f.clock);
  EXPECT_EQ(w.status().code(), Code::kCorrupt);
}

TEST(Watcher, RefusesAMissingDirectory) {
  Fixture f;
  auto w =
      Watcher::Open({.dir = f.root / "nope", .state_file = f.state, .settle = kSettle}, f.clock);
  EXPECT_EQ(w.status().code(), Code::kInvalidArgument);
}

TEST(WatchStatePath, IsAHiddenFileInTheStoreRoot) {
  EXPECT_EQ(WatchStatePath("/s", "policy"), fs::path("/s/.publish-watch-policy"));
}

}  // namespace
}  // namespace weightcast::publish
