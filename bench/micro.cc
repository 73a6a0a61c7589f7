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

#include "codec/chunk_codec.h"
#include "codec/transform.h"
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

// An RL step's chunk: bf16 weights where 5% of the elements moved by 1-2 ulps, at the default
// chunk size. The publisher's encode (SHA-256 and XXH3-128 of the target in the same pass), the
// sparse scan alone, and the decode a receiver runs; bytes per second of the chunk.
struct RlChunk {
  static constexpr size_t kSize = 128u << 10;
  std::vector<uint8_t> base = Bytes(kSize);
  std::vector<uint8_t> target = base;
  std::vector<codec::Segment> segments{{kSize, 2}};
  RlChunk() {
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < kSize / 2; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      if ((state >> 33) % 100 < 5) {
        uint16_t v;
        std::memcpy(&v, &target[2 * i], 2);
        v = static_cast<uint16_t>(v + 1 + ((state >> 20) & 1));
        std::memcpy(&target[2 * i], &v, 2);
      }
    }
  }
};

void BM_RlSparseScan(benchmark::State& state) {
  RlChunk c;
  std::vector<uint8_t> out;
  for (auto _ : state) {
    out.clear();
    benchmark::DoNotOptimize(
        codec::SparseForward(c.target, c.base, c.segments, codec::SparseValues::kDiff, false, out));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * RlChunk::kSize));
}
BENCHMARK(BM_RlSparseScan);

void BM_RlEncodeHashing(benchmark::State& state) {
  RlChunk c;
  codec::CodecScratch scratch;
  const auto base = codec::HashedChunk::Compute(c.base, HashAlgorithm::kSha256);
  Digest hash, fast;
  for (auto _ : state) {
    auto e = codec::EncodeChunkHashing(base, c.target, c.segments, {}, scratch, &hash, &fast);
    benchmark::DoNotOptimize(e);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * RlChunk::kSize));
}
BENCHMARK(BM_RlEncodeHashing);

// The same encode as a publisher runs it in a step: each chunk of a 256 MiB version (past any
// cache) once, against its base chunk, so both are read from memory. The chunks are copies of
// the one above at different addresses.
void BM_RlEncodeHashingFromMemory(benchmark::State& state) {
  RlChunk c;
  constexpr size_t kChunks = (256u << 20) / RlChunk::kSize;
  std::vector<uint8_t> base(kChunks * RlChunk::kSize), target(base.size());
  for (size_t i = 0; i < kChunks; ++i) {
    std::memcpy(base.data() + i * RlChunk::kSize, c.base.data(), RlChunk::kSize);
    std::memcpy(target.data() + i * RlChunk::kSize, c.target.data(), RlChunk::kSize);
  }
  codec::CodecScratch scratch;
  const auto base_hash = codec::HashedChunk::Compute(c.base, HashAlgorithm::kSha256);
  Digest hash, fast;
  size_t i = 0;
  for (auto _ : state) {
    const std::span<const uint8_t> b(base.data() + i * RlChunk::kSize, RlChunk::kSize);
    const std::span<const uint8_t> t(target.data() + i * RlChunk::kSize, RlChunk::kSize);
    const auto based =
        codec::HashedChunk::FromVerifiedManifest(b, base_hash.hash(), HashAlgorithm::kSha256);
    auto e = codec::EncodeChunkHashing(based, t, c.segments, {}, scratch, &hash, &fast);
    benchmark::DoNotOptimize(e);
    i = (i + 1) % kChunks;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * RlChunk::kSize));
}
BENCHMARK(BM_RlEncodeHashingFromMemory);

void BM_RlDecode(benchmark::State& state) {
  RlChunk c;
  codec::CodecScratch scratch;
  const auto base = codec::HashedChunk::Compute(c.base, HashAlgorithm::kSha256);
  const auto target = codec::HashedChunk::Compute(c.target, HashAlgorithm::kSha256);
  auto e = codec::EncodeChunk(base, target, c.segments, {}, scratch);
  std::vector<uint8_t> out(RlChunk::kSize);
  for (auto _ : state) {
    benchmark::DoNotOptimize(codec::DecodeChunk(e->payload, base, nullptr, out, scratch));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * RlChunk::kSize));
}
BENCHMARK(BM_RlDecode);

// What a sampler does per chunk of an RL step: the payload patched into its live tensors and the
// chunk checked with XXH3-128, a block at a time.
void BM_RlPatchLive(benchmark::State& state) {
  RlChunk c;
  codec::CodecScratch scratch;
  const auto base = codec::HashedChunk::Compute(c.base, HashAlgorithm::kSha256);
  const auto target = codec::HashedChunk::Compute(c.target, HashAlgorithm::kSha256);
  auto e = codec::EncodeChunk(base, target, c.segments, {}, scratch);
  std::vector<uint8_t> live = c.base;
  std::vector<codec::ChunkPiece> pieces(1);
  pieces[0].live = live;
  for (auto _ : state) {
    state.PauseTiming();
    std::memcpy(live.data(), c.base.data(), live.size());
    state.ResumeTiming();
    benchmark::DoNotOptimize(codec::ApplyChunkInPlaceHashing(e->payload, base.hash(), pieces,
                                                             HashAlgorithm::kXxh3_128, scratch));
  }
  if (live != c.target) state.SkipWithError("the patched chunk differs from the target");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * RlChunk::kSize));
}
BENCHMARK(BM_RlPatchLive);

// The sparse patch alone, in place over one piece: changes patched in runs (the default), and
// change by change through Placement::At (what a placement that cannot name runs gets).
class OnePiece final : public codec::SparseApplier::Placement {
 public:
  OnePiece(std::vector<uint8_t>& bytes, bool runs) : bytes_(bytes), runs_(runs) {}
  uint8_t* At(uint64_t offset, uint64_t len) override {
    return offset + len <= bytes_.size() ? bytes_.data() + offset : nullptr;
  }
  uint8_t* Run(uint64_t offset, uint64_t* begin, uint64_t* end) override {
    if (!runs_ || offset >= bytes_.size()) return nullptr;
    *begin = 0;
    *end = bytes_.size();
    return bytes_.data();
  }

 private:
  std::vector<uint8_t>& bytes_;
  bool runs_;
};

void RlSparsePatch(benchmark::State& state, bool runs) {
  RlChunk c;
  std::vector<uint8_t> stream;
  codec::SparseForward(c.target, c.base, c.segments, codec::SparseValues::kDiff, false, stream);
  std::vector<uint8_t> live = c.base;
  for (auto _ : state) {
    state.PauseTiming();
    std::memcpy(live.data(), c.base.data(), live.size());
    state.ResumeTiming();
    codec::SparseApplier applier(stream, {}, c.segments, codec::SparseValues::kDiff);
    OnePiece at(live, runs);
    benchmark::DoNotOptimize(applier.ApplyInPlace(at));
  }
  if (live != c.target) state.SkipWithError("the patched chunk differs from the target");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * RlChunk::kSize));
}
void BM_RlSparsePatchRuns(benchmark::State& state) { RlSparsePatch(state, true); }
void BM_RlSparsePatchChangeByChange(benchmark::State& state) { RlSparsePatch(state, false); }
BENCHMARK(BM_RlSparsePatchRuns);
BENCHMARK(BM_RlSparsePatchChangeByChange);

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
