// Google Benchmark micro-benchmarks of the hot primitives, each next to memcpy of the same bytes
// in the same run. Google Benchmark prints its usual table; the last line is one JSON object with
// every benchmark's bytes per second and its ratio to memcpy.
//   build/release/bench/bench_micro [--benchmark_min_time=0.2]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "format/safetensors.h"
#include "hash/digest.h"

namespace weightcast {
namespace {

constexpr size_t kChunk = 8u << 20;

std::vector<uint8_t> Bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  return v;
}

void BM_Memcpy(benchmark::State& state) {
  auto src = Bytes(kChunk);
  std::vector<uint8_t> dst(kChunk);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kChunk);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kChunk));
}
BENCHMARK(BM_Memcpy);

void BM_Sha256(benchmark::State& state) {
  auto src = Bytes(kChunk);
  for (auto _ : state) benchmark::DoNotOptimize(Sha256(src));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kChunk));
}
BENCHMARK(BM_Sha256);

void BM_Xxh3_128(benchmark::State& state) {
  auto src = Bytes(kChunk);
  for (auto _ : state) benchmark::DoNotOptimize(HashBytes(HashAlgorithm::kXxh3_128, src));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kChunk));
}
BENCHMARK(BM_Xxh3_128);

// A header of 1,000 tensors, the size of a 7B model's shard.
void BM_ParseSafetensorsHeader(benchmark::State& state) {
  std::string json = "{";
  uint64_t offset = 0;
  for (int i = 0; i < 1000; ++i) {
    if (i > 0) json += ",";
    json += "\"model.layers." + std::to_string(i) +
            ".weight\":{\"dtype\":\"BF16\",\"shape\":[64,64],"
            "\"data_offsets\":[" +
            std::to_string(offset) + "," + std::to_string(offset + 8192) + "]}";
    offset += 8192;
  }
  json += "}";
  while ((8 + json.size()) % 8 != 0) json += ' ';
  std::vector<uint8_t> prefix(8 + json.size());
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(prefix.data() + 8, json.data(), json.size());
  for (auto _ : state) {
    auto header = ParseSafetensorsHeader(prefix, prefix.size() + offset, "bench.safetensors");
    if (!header.ok()) state.SkipWithError(header.status().ToString().c_str());
    benchmark::DoNotOptimize(header);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * json.size()));
}
BENCHMARK(BM_ParseSafetensorsHeader);

// Keeps the console table and remembers each benchmark's bytes per second for the JSON line.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      auto it = run.counters.find("bytes_per_second");
      if (it != run.counters.end()) bytes_per_second[run.benchmark_name()] = it->second;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> bytes_per_second;
};

}  // namespace
}  // namespace weightcast

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  weightcast::CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  double memcpy_bps = reporter.bytes_per_second["BM_Memcpy"];
  std::string json = "{\"bench\":\"micro\"";
  for (const auto& [name, bps] : reporter.bytes_per_second) {
    char item[160];
    std::snprintf(item, sizeof item, ",\"%s_gbps\":%.3f,\"%s_vs_memcpy\":%.3f", name.c_str(),
                  bps / 1e9, name.c_str(), memcpy_bps > 0 ? bps / memcpy_bps : 0.0);
    json += item;
  }
  std::printf("%s}\n", json.c_str());
  return 0;
}
