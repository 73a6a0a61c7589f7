// The crash-safety proof by force: a child process stages and commits versions in a loop and is
// SIGKILLed at random instants (10 microseconds to 1 s after it starts, so kills land in Open's
// recovery, in staging, in chunk writes, between record batches and inside every commit step).
// After each kill the parent reopens the store and checks the invariant of docs/store_layout.md:
// - `current` names a complete committed version whose files hash to its manifest (or the channel
//   has none yet), and it never moves backwards (the child only moves forwards);
// - every kept version verifies; no temporary or half-built entry survives Open;
// - every staging version left resumes, and each chunk its record vouches for reads back with the
//   right hash.
// The next child resumes whatever staging it finds, so versions keep committing across kills.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "store/layout.h"
#include "store/store.h"
#include "store_test_util.h"

namespace weightcast {
namespace {

using store_test::ChunkOf;
using store_test::Flat;
using store_test::MakeManifest;
using store_test::SampleFiles;
using store_test::TempDir;

namespace fs = std::filesystem;

constexpr char kChannel[] = "policy";

std::vector<store_test::TestFile> FilesFor(Version v) { return SampleFiles(v.value(), 2); }

// Runs in the forked child until killed. Exits non-zero on any error so the parent notices.
[[noreturn]] void ChildLoop(const fs::path& root, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto store = Store::Open(root, {.keep_versions = 2, .record_batch = 2});
  if (!store.ok()) _exit(10);
  while (true) {
    auto staging = store->ListStaging(kChannel);
    if (!staging.ok()) _exit(11);
    Result<StagedVersion> staged = Status(Internal("unset"));
    Version v;
    if (!staging->empty()) {
      v = staging->front();
      staged = store->ResumeStaging(kChannel, v);
    } else {
      auto next = store->NextVersion(kChannel);
      if (!next.ok()) _exit(12);
      v = *next;
      staged = store->BeginStaging(kChannel, MakeManifest(kChannel, v, FilesFor(v)));
    }
    if (!staged.ok()) _exit(13);
    std::string flat = Flat(FilesFor(v));
    std::vector<ChunkIndex> missing = staged->MissingChunks();
    std::shuffle(missing.begin(), missing.end(), rng);
    for (ChunkIndex i : missing) {
      if (!staged->PutChunk(i, ChunkOf(flat, staged->manifest(), i)).ok()) _exit(14);
    }
    if (!store->Commit(kChannel, v).ok()) _exit(15);
  }
}

// Checks the invariant after a kill; returns the current version (0 when none).
uint64_t CheckInvariant(const fs::path& root, uint64_t previous_current, int* resumable) {
  auto store = Store::Open(root, {.keep_versions = 2});
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return previous_current;
  fs::path ch = root / kChannel;
  if (!fs::exists(ch)) {
    EXPECT_EQ(previous_current, 0u);
    return 0;
  }
  const std::set<std::string> allowed = {"versions", "manifests", "staging", "current"};
  // Results held in locals: a range-for over *Temporary() would dangle.
  auto entries = store::ListDir(ch);
  for (const std::string& name : *entries) {
    EXPECT_TRUE(allowed.count(name)) << "leftover " << (ch / name);
  }
  auto current = store->Current(kChannel);
  uint64_t now = 0;
  if (current.ok()) {
    now = current->value();
    Status st = store->Verify(kChannel, *current);
    EXPECT_TRUE(st.ok()) << "current version " << now << ": " << st.ToString();
  } else {
    EXPECT_EQ(current.status().code(), Code::kNotFound) << current.status().ToString();
  }
  EXPECT_GE(now, previous_current) << "current moved backwards";

  auto list = store->List(kChannel);
  EXPECT_TRUE(list.ok());
  EXPECT_LE(list->size(), 3u);  // two kept plus at most one committed past a kill
  for (const VersionInfo& info : *list) {
    EXPECT_TRUE(info.has_manifest) << info.version.value();
    EXPECT_LE(info.version.value(), now) << "a committed version newer than current";
    Status st = store->Verify(kChannel, info.version);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  auto manifests = store::ListDir(ch / "manifests");
  for (const std::string& name : *manifests) {
    auto v =
        name.size() > 4 ? store::ParseVersionName(name.substr(0, name.size() - 4)) : std::nullopt;
    EXPECT_TRUE(v.has_value() && fs::is_directory(ch / "versions" / store::VersionName(*v)))
        << "stray manifest " << name;
  }
  auto staging = store::ListDir(ch / "staging");
  for (const std::string& name : *staging) {
    auto v = store::ParseVersionName(name);
    EXPECT_TRUE(v.has_value()) << "stray staging entry " << name;
    if (!v) continue;
    EXPECT_GT(v->value(), now);
    auto staged = store->ResumeStaging(kChannel, *v);
    EXPECT_TRUE(staged.ok()) << staged.status().ToString();
    if (!staged.ok()) continue;
    ++*resumable;
    const Manifest& m = staged->manifest();
    for (uint32_t i = 0; i < m.chunk_count(); ++i) {
      if (!staged->HasChunk(ChunkIndex(i))) continue;
      auto bytes = staged->ReadChunk(ChunkIndex(i));
      EXPECT_TRUE(bytes.ok());
      if (bytes.ok()) {
        EXPECT_EQ(HashBytes(m.hash_algorithm, *bytes), m.chunk_hashes[i])
            << "record vouches for chunk " << i << " of staging " << name << " with bad bytes";
      }
    }
  }
  return now;
}

TEST(StoreCrash, KilledAtRandomInstantsLeavesOldOrNewVersionNeverAMix) {
  TempDir dir;
  fs::path root = dir.path() / "store";
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // Log-uniform between 10 us and 1 s: every order of magnitude is hit about equally often, so
  // kills land in Open, staging, chunk writes and each commit step (a commit takes ~35 fsyncs,
  // tens of milliseconds on a VM disk), and some children live long enough to commit several.
  std::uniform_real_distribution<double> log_delay(std::log(10.0), std::log(1'000'000.0));

  const auto start = std::chrono::steady_clock::now();
  const auto budget = std::chrono::seconds(15);
  uint64_t current = 0;
  int iterations = 0;
  int resumable = 0;
  int exited = 0;
  while (iterations < 80 && std::chrono::steady_clock::now() - start < budget) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ChildLoop(root, seed + static_cast<uint64_t>(iterations));
    ::usleep(static_cast<useconds_t>(std::exp(log_delay(rng))));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (WIFEXITED(status)) {
      ++exited;
      ADD_FAILURE() << "child exited by itself with status " << WEXITSTATUS(status);
    }
    current = CheckInvariant(root, current, &resumable);
    ++iterations;
    if (HasFailure()) break;
  }
  EXPECT_GE(iterations, 20);
  EXPECT_EQ(exited, 0);
  ASSERT_FALSE(HasFailure());

  // Last, a child left alone must carry on from wherever the final kill left the store and
  // commit two more versions: recovery and resumed staging lose no ground. (Waiting for it, not
  // counting commits during the loop, keeps this independent of how slow the machine is.)
  const uint64_t before = current;
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ChildLoop(root, seed ^ 0x5eed);
  auto read_only = Store::Open(root, {.read_only = true});
  uint64_t seen = before;
  for (int i = 0; i < 2000 && seen < before + 2; ++i) {
    ::usleep(10'000);
    if (!read_only.ok()) read_only = Store::Open(root, {.read_only = true});
    if (read_only.ok()) {
      auto v = read_only->Current(kChannel);
      if (v.ok()) seen = v->value();
    }
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_FALSE(WIFEXITED(status)) << "child exited with status " << WEXITSTATUS(status);
  current = CheckInvariant(root, current, &resumable);
  EXPECT_GE(current, before + 2) << "no progress from the store the kills left";
  RecordProperty("iterations", iterations);
  RecordProperty("committed", static_cast<int>(current));
  RecordProperty("resumable_stagings_seen", resumable);
  std::printf("crash loop: %d kills, %llu versions committed, %d staging versions resumed\n",
              iterations, static_cast<unsigned long long>(current), resumable);
}

}  // namespace
}  // namespace weightcast
