// How long a reader of `current` is blocked while an agent switches versions, next to
// the time the agent spends bringing the version in.
//
//   bench_switch_blocking [--size 256MiB] [--files 4] [--switches 5] [--dir DIR]
//
// A store holds a channel with a committed version. A reader thread opens each file under
// STORE/CHANNEL/current in a loop (open, read the first 4 KiB - where a safetensors header
// is - close), timing every iteration. Meanwhile the main thread, for each switch, stages the
// next version chunk by chunk (Store::BeginStaging + PutChunk: hash check and write, i.e. the
// local half of a fetch with no network; the "stage" figure), then commits it
// (Store::Commit: fsync, move into versions/, atomic rename of `current`, collection of old
// versions; the "commit" window), and after the commits rolls back and forth between the two
// kept versions (Store::Rollback: the "rollback" window).
//
// Blocked time of a window = the longest reader iteration that overlaps it. Baseline = reader
// iterations that overlap no window. The reader pauses 50 us between iterations. Any failed open or
// read is an error (a reader must always find a complete version). Last line: one JSON object.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "hash/digest.h"
#include "manifest/builder.h"
#include "manifest/manifest.h"
#include "store/store.h"
#include "util/text.h"

namespace wc = weightcast;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kChannel[] = "policy";
constexpr uint64_t kChunk = 8ull << 20;

[[noreturn]] void Die(const std::string& what, const wc::Status& st) {
  std::fprintf(stderr, "bench_switch_blocking: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

// The version's bytes: deterministic noise, every chunk stamped with the version so versions
// differ in every chunk (a full switch; the store does not care how versions relate).
void FillVersion(std::vector<uint8_t>& flat, uint64_t version) {
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i + 8 <= flat.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(&flat[i], &x, 8);
  }
  for (size_t at = 0; at < flat.size(); at += kChunk) {
    std::memcpy(&flat[at], &version, std::min<size_t>(8, flat.size() - at));
  }
}

wc::Manifest MakeManifest(const std::vector<uint8_t>& flat, uint32_t files, uint64_t version) {
  wc::Manifest m;
  m.channel = kChannel;
  m.version = wc::Version(version);
  m.chunk_size = kChunk;
  const uint64_t per_file = flat.size() / files;
  uint64_t offset = 0;
  for (uint32_t f = 0; f < files; ++f) {
    uint64_t size = f + 1 == files ? flat.size() - offset : per_file;
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05u-of-%05u.safetensors", f + 1, files);
    m.files.push_back({name, size, offset});
    offset += size;
  }
  for (uint64_t at = 0; at < flat.size(); at += kChunk) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, flat.size() - at));
    m.chunk_hashes.push_back(wc::HashBytes(m.hash_algorithm, std::span(&flat[at], n)));
  }
  m.root = wc::ComputeRoot(m);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t size = 256ull << 20;
  uint32_t files = 4;
  uint32_t switches = 5;
  std::string dir_flag;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_switch_blocking: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--size") {
      auto s = wc::ParseSize(value());
      if (!s.ok() || *s < kChunk) {
        std::fprintf(stderr, "bench_switch_blocking: --size must be a size of at least 8MiB\n");
        return 2;
      }
      size = *s;
    } else if (a == "--files") {
      files = static_cast<uint32_t>(std::strtoul(value().c_str(), nullptr, 10));
    } else if (a == "--switches") {
      switches = static_cast<uint32_t>(std::strtoul(value().c_str(), nullptr, 10));
    } else if (a == "--dir") {
      dir_flag = value();
    } else {
      std::fprintf(stderr,
                   "usage: bench_switch_blocking [--size 256MiB] [--files 4] [--switches 5] "
                   "[--dir DIR]\n");
      return 2;
    }
  }
  if (files == 0 || files > 64 || switches == 0 || switches > 100) {
    std::fprintf(stderr, "bench_switch_blocking: --files in 1..64, --switches in 1..100\n");
    return 2;
  }

  std::string pattern =
      ((dir_flag.empty() ? fs::temp_directory_path() : fs::path(dir_flag)) / "wc_switch_XXXXXX")
          .string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const fs::path root = pattern;
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{root};

  auto store = wc::Store::Open(root / "store");
  if (!store.ok()) Die("open store", store.status());
  std::vector<uint8_t> flat(size);

  // Stages version `v` through the chunk API and returns how long that took.
  auto stage = [&](uint64_t v) {
    FillVersion(flat, v);
    wc::Manifest m = MakeManifest(flat, files, v);
    auto start = Clock::now();
    auto staged = store->BeginStaging(kChannel, m);
    if (!staged.ok()) Die("begin staging", staged.status());
    for (uint32_t c = 0; c < m.chunk_count(); ++c) {
      wc::ByteRange r = m.ChunkRange(wc::ChunkIndex(c));
      wc::Status st = staged->PutChunk(wc::ChunkIndex(c), std::span(&flat[r.offset], r.size));
      if (!st.ok()) Die("put chunk", st);
    }
    wc::Status st = staged->Flush();
    if (!st.ok()) Die("flush", st);
    return Clock::now() - start;
  };
  stage(1);
  if (wc::Status st = store->Commit(kChannel, wc::Version(1)); !st.ok()) Die("commit v1", st);

  std::vector<std::string> paths;
  {
    auto m = store->GetManifest(kChannel, wc::Version(1));
    if (!m.ok()) Die("manifest", m.status());
    for (const auto& f : m->files)
      paths.push_back((store->CurrentPath(kChannel) / f.path).string());
  }

  // Windows are numbered by an epoch the main thread bumps when one opens and when it closes
  // (odd: inside window (epoch - 1) / 2). The reader reads it before and after each iteration,
  // so an iteration that spans a whole window is attributed to it as well.
  const uint32_t windows = 2 * switches;
  std::atomic<uint64_t> epoch{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> errors{0};
  std::vector<double> window_worst(windows, 0.0);  // written by the reader only
  std::vector<double> baseline;                    // every 16th iteration outside windows
  double baseline_max = 0;
  uint64_t reader_iterations = 0;
  std::thread reader([&] {
    std::vector<char> buf(4096);
    size_t f = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const uint64_t e0 = epoch.load();
      auto start = Clock::now();
      int fd = ::open(paths[f].c_str(), O_RDONLY | O_CLOEXEC);
      bool ok = fd >= 0 && ::pread(fd, buf.data(), buf.size(), 0) == ssize_t(buf.size());
      if (fd >= 0) ::close(fd);
      const double took = Ms(Clock::now() - start);
      const uint64_t e1 = epoch.load();
      if (!ok) errors.fetch_add(1);
      ++reader_iterations;
      if (e0 == e1 && e0 % 2 == 0) {
        if (reader_iterations % 16 == 0) baseline.push_back(took);
        baseline_max = std::max(baseline_max, took);
      } else {
        for (uint64_t w = e0 / 2; w <= (e1 - 1) / 2 && w < windows; ++w) {
          window_worst[w] = std::max(window_worst[w], took);
        }
      }
      f = (f + 1) % paths.size();
      // A reader that polls every 50 us sees any block longer than that and leaves the cores to
      // the staging it is measured against.
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });

  std::vector<double> stage_ms, commit_ms, rollback_ms;
  auto window = [&](auto&& fn) {
    epoch.fetch_add(1);
    auto start = Clock::now();
    fn();
    auto took = Clock::now() - start;
    epoch.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return Ms(took);
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // baseline before any switch
  for (uint32_t s = 0; s < switches; ++s) {
    const uint64_t v = 2 + s;
    stage_ms.push_back(Ms(stage(v)));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    commit_ms.push_back(window([&] {
      if (wc::Status st = store->Commit(kChannel, wc::Version(v)); !st.ok()) Die("commit", st);
    }));
  }
  // Back and forth between the two kept versions: a switch with nothing to fsync or collect.
  const uint64_t newest = 1 + switches;
  for (uint32_t s = 0; s < switches; ++s) {
    wc::Version to(s % 2 == 0 ? newest - 1 : newest);
    rollback_ms.push_back(window([&] {
      if (auto r = store->Rollback(kChannel, to); !r.ok()) Die("rollback", r.status());
    }));
  }
  stop.store(true);
  reader.join();

  std::vector<double> commit_blocked(window_worst.begin(), window_worst.begin() + switches);
  std::vector<double> rollback_blocked(window_worst.begin() + switches, window_worst.end());
  const double commit_blocked_max = *std::max_element(commit_blocked.begin(), commit_blocked.end());
  const double rollback_blocked_max =
      *std::max_element(rollback_blocked.begin(), rollback_blocked.end());
  const double stage_median = Median(stage_ms);

  std::printf("version %s in %u files, %u switches, %llu reader iterations, %llu reader errors\n",
              wc::FormatBytes(size).c_str(), files, switches,
              static_cast<unsigned long long>(reader_iterations),
              static_cast<unsigned long long>(errors.load()));
  std::printf("stage (hash check + write, no network): median %.1f ms\n", stage_median);
  std::printf("commit: median %.2f ms; reader blocked: median %.3f ms, max %.3f ms\n",
              Median(commit_ms), Median(commit_blocked), commit_blocked_max);
  std::printf("rollback: median %.2f ms; reader blocked: median %.3f ms, max %.3f ms\n",
              Median(rollback_ms), Median(rollback_blocked), rollback_blocked_max);
  std::printf("reader baseline (no switch): p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
              Percentile(baseline, 0.5), Percentile(baseline, 0.99), baseline_max);
  std::printf(
      "{\"bench\":\"switch_blocking\",\"version_bytes\":%llu,\"files\":%u,\"switches\":%u,"
      "\"reader_iterations\":%llu,\"reader_errors\":%llu,\"stage_ms_median\":%.3f,"
      "\"commit_ms_median\":%.3f,\"commit_blocked_ms_median\":%.3f,\"commit_blocked_ms_max\":%.3f,"
      "\"rollback_ms_median\":%.3f,\"rollback_blocked_ms_median\":%.3f,"
      "\"rollback_blocked_ms_max\":%.3f,\"baseline_ms_p50\":%.4f,\"baseline_ms_p99\":%.4f,"
      "\"blocked_max_over_stage\":%.5f,\"goal_blocked_ms\":10,\"goal_met\":%s}\n",
      static_cast<unsigned long long>(size), files, switches,
      static_cast<unsigned long long>(reader_iterations),
      static_cast<unsigned long long>(errors.load()), stage_median, Median(commit_ms),
      Median(commit_blocked), commit_blocked_max, Median(rollback_ms), Median(rollback_blocked),
      rollback_blocked_max, Percentile(baseline, 0.5), Percentile(baseline, 0.99),
      std::max(commit_blocked_max, rollback_blocked_max) / stage_median,
      errors.load() == 0 && std::max(commit_blocked_max, rollback_blocked_max) < 10.0 ? "true"
                                                                                      : "false");
  return errors.load() == 0 ? 0 : 1;
}
