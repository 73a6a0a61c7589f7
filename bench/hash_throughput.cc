// Chunk hashing throughput: SHA-256 and XXH3-128 (and wsum-128, the device check, in one
// Update per chunk) through our Hasher on one core, per chunk size,
// and HashChunks (the manifest builder's mmap path) over a file in the page cache on one core and
// on all cores. The reference (openssl speed, memcpy) is measured by bench/hash_vs_openssl.sh in
// the same run; memcpy is measured here too.
//
//   bench_hash_throughput [--seconds 1] [--file-mib 512] [--dir /tmp]
//
// Last line: one JSON object. GB/s are decimal (1e9 bytes per second).
//
// "Per core" figures of the Hasher divide by the hashing thread's user CPU time, the divisor
// `openssl speed` uses by default: on a machine shared with other work, wall time would measure
// the scheduler, not the hash. User+system CPU time and wall-clock figures are given too;
// HashChunks figures (several threads, system calls per chunk) divide by the process's CPU time.
#include <sys/resource.h>
#include <unistd.h>

#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hash/digest.h"
#include "manifest/builder.h"

using namespace weightcast;

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// User CPU time of the calling thread: the divisor `openssl speed` uses.
double ThreadUserSeconds() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec) * 1e-6;
}

struct Rate {
  double user_gbps = 0;  // bytes per second of this thread's user CPU time (as openssl speed)
  double cpu_gbps = 0;   // bytes per second of this thread's CPU time, user + system
  double wall_gbps = 0;  // bytes per second of wall-clock time
};

std::vector<uint8_t> RandomBuffer(size_t n) {
  std::vector<uint8_t> out(n);
  std::mt19937_64 rng(42);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(out.data() + i, &v, 8);
  }
  return out;
}

// Hashes `buffer` chunk by chunk (one Hasher::Update per chunk, as the builder does for a chunk
// inside one file) for at least `seconds` of CPU time.
Rate HasherGbps(HashAlgorithm algorithm, const std::vector<uint8_t>& buffer, uint64_t chunk,
                double seconds, bool streaming = true) {
  Hasher hasher(algorithm);
  uint64_t bytes = 0;
  uint8_t sink = 0;
  const auto start = Clock::now();
  const double cpu_start = ThreadCpuSeconds();
  const double user_start = ThreadUserSeconds();
  while (ThreadCpuSeconds() - cpu_start < seconds) {
    for (uint64_t pos = 0; pos + chunk <= buffer.size(); pos += chunk) {
      if (streaming) {
        UpdateStreaming(hasher, algorithm, {buffer.data() + pos, chunk});
      } else {
        hasher.Update({buffer.data() + pos, chunk});
      }
      sink ^= hasher.Finish()[0];
      bytes += chunk;
    }
  }
  Rate r;
  r.user_gbps = static_cast<double>(bytes) / (ThreadUserSeconds() - user_start) / 1e9;
  r.cpu_gbps = static_cast<double>(bytes) / (ThreadCpuSeconds() - cpu_start) / 1e9;
  r.wall_gbps = static_cast<double>(bytes) / Since(start) / 1e9;
  if (sink == 0x5a) r.wall_gbps += 1e-12;  // keeps `sink`, and so the hashing, alive
  return r;
}

double MemcpyGbps(const std::vector<uint8_t>& buffer, double seconds) {
  std::vector<uint8_t> dst(buffer.size());
  uint64_t bytes = 0;
  const double cpu_start = ThreadCpuSeconds();
  while (ThreadCpuSeconds() - cpu_start < seconds) {
    std::memcpy(dst.data(), buffer.data(), buffer.size());
    bytes += buffer.size();
  }
  return static_cast<double>(bytes) / (ThreadCpuSeconds() - cpu_start) / 1e9 +
         (dst[7] == 1 ? 1e-12 : 0);
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

Rate HashChunksGbps(const std::filesystem::path& dir, const std::vector<ManifestFile>& files,
                    uint64_t chunk, HashAlgorithm algorithm, size_t threads, double seconds) {
  uint64_t bytes = 0;
  const auto start = Clock::now();
  const double cpu_start = ProcessCpuSeconds();
  while (Since(start) < seconds) {
    Result<std::vector<Digest>> r = HashChunks(dir, files, chunk, algorithm, threads);
    if (!r.ok()) {
      std::fprintf(stderr, "HashChunks: %s\n", r.status().ToString().c_str());
      std::exit(1);
    }
    bytes += files.back().size;
  }
  Rate r;
  r.cpu_gbps = static_cast<double>(bytes) / (ProcessCpuSeconds() - cpu_start) / 1e9;
  r.wall_gbps = static_cast<double>(bytes) / Since(start) / 1e9;
  return r;
}

std::string Key(HashAlgorithm a) {
  switch (a) {
    case HashAlgorithm::kSha256:
      return "sha256";
    case HashAlgorithm::kXxh3_128:
      return "xxh3_128";
    case HashAlgorithm::kWeightedSum128:
      return "wsum_128";
  }
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  uint64_t file_mib = 512;
  std::filesystem::path dir = std::filesystem::temp_directory_path();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds")
      seconds = std::stod(argv[i + 1]);
    else if (flag == "--file-mib")
      file_mib = std::stoull(argv[i + 1]);
    else if (flag == "--dir")
      dir = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: %s [--seconds S] [--file-mib N] [--dir DIR]\n", argv[0]);
      return 2;
    }
  }
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const std::vector<uint64_t> chunk_sizes = {1ull << 20, 4ull << 20, 8ull << 20, 16ull << 20};
  const std::vector<uint8_t> buffer = RandomBuffer(64ull << 20);

  std::string json = "{\"cores\":" + std::to_string(cores);
  char line[256];
  const double memcpy_gbps = MemcpyGbps(buffer, seconds);
  std::printf("memcpy 64 MiB: %.2f GB/s\n", memcpy_gbps);
  std::snprintf(line, sizeof line, ",\"memcpy_gbps\":%.3f", memcpy_gbps);
  json += line;

  // 0. The workload of `openssl speed -bytes 8192`: one 8 KiB buffer hashed over and over, so the
  // data stays in L1. This isolates our wrapper's overhead from memory bandwidth.
  {
    const std::vector<uint8_t> small(buffer.begin(), buffer.begin() + 8192);
    const Rate g = HasherGbps(HashAlgorithm::kSha256, small, small.size(), seconds);
    std::printf("hasher sha256   8 KiB in cache: %.3f GB/s per core (user time)\n", g.user_gbps);
    std::snprintf(line, sizeof line, ",\"hasher_sha256_8kib_incache_gbps\":%.3f", g.user_gbps);
    json += line;
  }

  // Without the builder's prefetching: one Hasher::Update per chunk. wsum-128 is the device check
  // a publisher computes with --device-checks (one more pass over each version).
  for (HashAlgorithm a :
       {HashAlgorithm::kSha256, HashAlgorithm::kXxh3_128, HashAlgorithm::kWeightedSum128}) {
    const Rate g = HasherGbps(a, buffer, 8ull << 20, seconds, /*streaming=*/false);
    std::printf("hasher %-8s chunk  8 MiB, one Update: %.3f GB/s per core (user time)\n",
                std::string(HashAlgorithmName(a)).c_str(), g.user_gbps);
    std::snprintf(line, sizeof line, ",\"hasher_%s_8mib_single_update_gbps\":%.3f", Key(a).c_str(),
                  g.user_gbps);
    json += line;
  }

  // 1. Our Hasher fed as the builder feeds it (UpdateStreaming) on one core, per chunk size,
  // cycling through 64 MiB so that every chunk streams from memory as it does from the page cache
  // when building a manifest.
  for (HashAlgorithm a : {HashAlgorithm::kSha256, HashAlgorithm::kXxh3_128}) {
    for (uint64_t c : chunk_sizes) {
      const Rate g = HasherGbps(a, buffer, c, seconds);
      std::printf(
          "hasher %-8s chunk %2llu MiB: %.3f GB/s per core (user time), %.3f (user+sys), %.3f "
          "wall\n",
          std::string(HashAlgorithmName(a)).c_str(), static_cast<unsigned long long>(c >> 20),
          g.user_gbps, g.cpu_gbps, g.wall_gbps);
      std::snprintf(line, sizeof line, ",\"hasher_%s_%llumib_gbps\":%.3f", Key(a).c_str(),
                    static_cast<unsigned long long>(c >> 20), g.user_gbps);
      json += line;
      std::snprintf(line, sizeof line, ",\"hasher_%s_%llumib_cpu_gbps\":%.3f", Key(a).c_str(),
                    static_cast<unsigned long long>(c >> 20), g.cpu_gbps);
      json += line;
      std::snprintf(line, sizeof line, ",\"hasher_%s_%llumib_wall_gbps\":%.3f", Key(a).c_str(),
                    static_cast<unsigned long long>(c >> 20), g.wall_gbps);
      json += line;
    }
  }

  // 2. HashChunks over a file in the page cache: the builder's path (open, mmap window, hash,
  // unmap per chunk), on one core and on all cores.
  const std::filesystem::path file = dir / ("wc_hash_bench_" + std::to_string(::getpid()));
  {
    std::ofstream out(file, std::ios::binary);
    for (uint64_t i = 0; i < file_mib; i += 64) {
      out.write(reinterpret_cast<const char*>(buffer.data()),
                static_cast<std::streamsize>(std::min<uint64_t>(64, file_mib - i) << 20));
    }
  }
  const std::vector<ManifestFile> files = {{file.filename().string(), file_mib << 20, 0}};
  (void)HashChunksGbps(dir, files, 8ull << 20, HashAlgorithm::kXxh3_128, 0, 0.01);  // warm cache
  for (HashAlgorithm a : {HashAlgorithm::kSha256, HashAlgorithm::kXxh3_128}) {
    for (uint64_t c : chunk_sizes) {
      for (size_t threads : {size_t{1}, cores}) {
        const Rate g = HashChunksGbps(dir, files, c, a, threads, seconds);
        std::printf(
            "HashChunks %-8s chunk %2llu MiB, %zu thread(s): %.3f GB/s wall, %.3f GB/s per "
            "CPU-second\n",
            std::string(HashAlgorithmName(a)).c_str(), static_cast<unsigned long long>(c >> 20),
            threads, g.wall_gbps, g.cpu_gbps);
        std::snprintf(line, sizeof line,
                      ",\"hashchunks_%s_%llumib_%zut_wall_gbps\":%.3f,"
                      "\"hashchunks_%s_%llumib_%zut_cpu_gbps\":%.3f",
                      Key(a).c_str(), static_cast<unsigned long long>(c >> 20), threads,
                      g.wall_gbps, Key(a).c_str(), static_cast<unsigned long long>(c >> 20),
                      threads, g.cpu_gbps);
        json += line;
      }
    }
  }
  std::filesystem::remove(file);
  std::printf("%s}\n", json.c_str());
  return 0;
}
