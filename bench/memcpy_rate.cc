// memcpy bandwidth of this machine, the reference for same-host transports (docs/BENCHMARKS.md,
// the "ucx" rows): copies BYTES in CHUNK-sized pieces from one 256 MiB buffer into another
// (both touched first, so no page faults are timed), like a receiver copying each chunk once.
//
//   bench_memcpy_rate [bytes=2GiB] [chunk=4MiB]
// Last line: {"bench":"memcpy_rate","bytes":...,"seconds":...,"gbit_per_s":...}
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "util/text.h"

int main(int argc, char** argv) {
  auto size_arg = [&](int i, const char* fallback) {
    auto parsed = weightcast::ParseSize(argc > i ? argv[i] : fallback);
    if (!parsed.ok()) {
      std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
      std::exit(2);
    }
    return *parsed;
  };
  const uint64_t bytes = size_arg(1, "2GiB");
  const uint64_t chunk = size_arg(2, "4MiB");
  constexpr uint64_t kRing = 256ull << 20;
  if (chunk == 0 || chunk > kRing) {
    std::fprintf(stderr, "chunk must be between 1 byte and 256 MiB\n");
    return 2;
  }
  std::vector<uint8_t> src(kRing, 7), dst(kRing, 0);
  uint64_t done = 0, offset = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (done < bytes) {
    const uint64_t n = std::min(chunk, bytes - done);
    if (offset + n > kRing) offset = 0;
    std::memcpy(dst.data() + offset, src.data() + offset, n);
    offset += n;
    done += n;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile uint8_t sink = dst[kRing / 2];
  (void)sink;
  std::printf(
      "{\"bench\":\"memcpy_rate\",\"bytes\":%llu,\"chunk\":%llu,\"seconds\":%.6f,"
      "\"gbit_per_s\":%.4f}\n",
      static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(chunk), seconds,
      bytes * 8 / seconds / 1e9);
  return 0;
}
