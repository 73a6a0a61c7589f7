// Delta codec benchmark: compression ratio against the order-0 entropy estimate of the XOR
// stream and against zstd -1 (plain XOR and full weights), and encode/decode throughput per core
// against memcpy and SHA-256, all measured in this run on data generated here.
//
//   bench_delta_codec [--mib 128] [--chunk-mib 8] [--quick]
//
// Base weights are N(0, 0.02) values; a target changes a fraction p of elements chosen uniformly
// at random (changes spread everywhere). A changed bf16 element moves by 1 ulp (70%), 2 ulps
// (20%) or 3-8 ulps (10%); a changed fp32 element moves by up to 2^10-2^14 ulps, the size of an
// Adam step relative to the weight. Last line: one JSON object.
#include <zstd.h>

#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "codec/chunk_codec.h"
#include "hash/digest.h"
#include "manifest/builder.h"

using namespace weightcast;
using namespace weightcast::codec;

namespace {

// CPU time of this thread: the machine this runs on is shared, and wall time counts the time
// other processes hold the core. Per-core throughput is bytes per CPU second of this thread.
struct Clock {
  using time_point = double;
  static double now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
};
double Seconds(Clock::time_point a) { return Clock::now() - a; }

struct Model {
  std::string dtype;
  int width = 2;
  std::vector<uint8_t> base, target;
};

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

Model Generate(int width, size_t bytes, double p, uint64_t seed) {
  Model m;
  m.width = width;
  m.dtype = width == 2 ? "bf16" : "fp32";
  const size_t n = bytes / width;
  m.base.resize(n * width);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (size_t i = 0; i < n; ++i) {
    const float f = normal(rng);
    if (width == 2) {
      const uint16_t b = ToBf16(f);
      std::memcpy(&m.base[i * 2], &b, 2);
    } else {
      std::memcpy(&m.base[i * 4], &f, 4);
    }
  }
  m.target = m.base;
  std::geometric_distribution<uint64_t> gap(p);
  std::uniform_real_distribution<double> u01(0, 1);
  for (uint64_t i = gap(rng); i < n; i += 1 + gap(rng)) {
    const bool up = rng() & 1;
    if (width == 2) {
      const double r = u01(rng);
      const int ulps = r < 0.7 ? 1 : r < 0.9 ? 2 : 3 + static_cast<int>(rng() % 6);
      uint16_t v;
      std::memcpy(&v, &m.target[i * 2], 2);
      const uint16_t mag = v & 0x7fff;
      const uint16_t sign = v & 0x8000;
      const uint16_t moved = up ? static_cast<uint16_t>(mag + ulps)
                                : static_cast<uint16_t>(mag >= ulps ? mag - ulps : ulps - mag);
      v = static_cast<uint16_t>(sign | (moved & 0x7fff));
      if (v == 0) v = 1;
      std::memcpy(&m.target[i * 2], &v, 2);
    } else {
      const uint32_t ulps = 1 + static_cast<uint32_t>(rng() % (1u << (10 + rng() % 5)));
      uint32_t v;
      std::memcpy(&v, &m.target[i * 4], 4);
      const uint32_t mag = v & 0x7fffffff;
      const uint32_t moved = up ? mag + ulps : (mag >= ulps ? mag - ulps : ulps - mag);
      v = (v & 0x80000000u) | (moved & 0x7fffffff);
      if (v == 0) v = 1;
      std::memcpy(&m.target[i * 4], &v, 4);
    }
  }
  return m;
}

double BinaryEntropy(double p) {
  if (p <= 0 || p >= 1) return 0;
  return -p * std::log2(p) - (1 - p) * std::log2(1 - p);
}

// Order-0 estimate of the XOR stream in bytes: n * (H(p) + p * H(nonzero XOR values)).
struct Estimate {
  double changed_fraction = 0;
  double bits_per_element = 0;
  double bytes = 0;
};
Estimate EntropyEstimate(const Model& m) {
  const size_t n = m.base.size() / m.width;
  std::unordered_map<uint32_t, uint64_t> hist;
  uint64_t changed = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t a = 0, b = 0;
    std::memcpy(&a, &m.base[i * m.width], m.width);
    std::memcpy(&b, &m.target[i * m.width], m.width);
    if (a != b) {
      ++hist[a ^ b];
      ++changed;
    }
  }
  double h = 0;
  for (const auto& [v, c] : hist) {
    const double q = static_cast<double>(c) / static_cast<double>(changed);
    h -= q * std::log2(q);
  }
  Estimate e;
  e.changed_fraction = static_cast<double>(changed) / static_cast<double>(n);
  e.bits_per_element = BinaryEntropy(e.changed_fraction) + e.changed_fraction * h;
  e.bytes = e.bits_per_element * static_cast<double>(n) / 8;
  return e;
}

// zstd -1 over each chunk of `data` (or data XOR base), summed.
size_t ZstdChunks(const std::vector<uint8_t>& data, const std::vector<uint8_t>* base,
                  size_t chunk) {
  std::vector<uint8_t> buf(chunk), out(ZSTD_compressBound(chunk));
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  size_t total = 0;
  for (size_t off = 0; off < data.size(); off += chunk) {
    const size_t len = std::min(chunk, data.size() - off);
    for (size_t i = 0; i < len; ++i) buf[i] = data[off + i] ^ (base ? (*base)[off + i] : 0);
    total += ZSTD_compressCCtx(cctx, out.data(), out.size(), buf.data(), len, 1);
  }
  ZSTD_freeCCtx(cctx);
  return total;
}

struct CodecRun {
  size_t payload_bytes = 0;
  double encode_s = 0;
  double decode_s = 0;
  double decode_buffer_s = 0;  // DecodeChunkToBuffer
  size_t xor_chunks = 0, full_chunks = 0, same_chunks = 0;
  bool ok = true;
};

// Encodes every chunk (hashing the target chunk, as a publisher that has not built the manifest
// yet would; the base hash comes from the base's manifest) and decodes it again with the full
// check (base hash, decode, hash of the result) into the caller's buffer (DecodeChunk) and into
// a staging buffer (DecodeChunkToBuffer). One thread.
CodecRun RunCodec(const Model& m, size_t chunk, const ChunkEncodeOptions& opt, bool decode) {
  CodecRun r;
  CodecScratch scratch;
  const size_t count = (m.base.size() + chunk - 1) / chunk;
  std::vector<Digest> base_hashes(count), target_hashes(count);
  std::vector<std::vector<uint8_t>> payloads(count);
  for (size_t c = 0; c < count; ++c) {
    const size_t off = c * chunk, len = std::min(chunk, m.base.size() - off);
    base_hashes[c] = Sha256(std::span(m.base).subspan(off, len));
  }
  auto t0 = Clock::now();
  for (size_t c = 0; c < count; ++c) {
    const size_t off = c * chunk, len = std::min(chunk, m.base.size() - off);
    const auto tb = std::span(m.target).subspan(off, len);
    const auto base = HashedChunk::FromVerifiedManifest(std::span(m.base).subspan(off, len),
                                                        base_hashes[c], HashAlgorithm::kSha256);
    const Segment seg{len, static_cast<uint8_t>(m.width)};
    // The target is hashed inside the encoder, while it is compared with the base.
    auto e = EncodeChunkHashing(base, tb, std::span(&seg, 1), opt, scratch, &target_hashes[c]);
    if (!e.ok()) {
      std::fprintf(stderr, "encode: %s\n", e.status().ToString().c_str());
      r.ok = false;
      return r;
    }
    r.payload_bytes += e->payload.size();
    r.xor_chunks += e->encoding == ChunkEncoding::kXor;
    r.full_chunks += e->encoding == ChunkEncoding::kFull;
    r.same_chunks += e->encoding == ChunkEncoding::kSame;
    payloads[c] = std::move(e->payload);
  }
  r.encode_s = Seconds(t0);
  if (!decode) return r;
  std::vector<uint8_t> out(chunk);
  t0 = Clock::now();
  for (size_t c = 0; c < count; ++c) {
    const size_t off = c * chunk, len = std::min(chunk, m.base.size() - off);
    const auto base = HashedChunk::FromVerifiedManifest(std::span(m.base).subspan(off, len),
                                                        base_hashes[c], HashAlgorithm::kSha256);
    if (payloads[c].empty()) continue;  // same: the base bytes are the target
    const Status s =
        DecodeChunk(payloads[c], base, &target_hashes[c], std::span(out).first(len), scratch);
    if (!s.ok()) {
      std::fprintf(stderr, "decode: %s\n", s.ToString().c_str());
      r.ok = false;
    }
  }
  r.decode_s = Seconds(t0);
  // The same checks into a private staging buffer (DecodeVersion's path: no copy to `out`).
  std::vector<uint8_t> staging;
  t0 = Clock::now();
  for (size_t c = 0; c < count; ++c) {
    const size_t off = c * chunk, len = std::min(chunk, m.base.size() - off);
    const auto base = HashedChunk::FromVerifiedManifest(std::span(m.base).subspan(off, len),
                                                        base_hashes[c], HashAlgorithm::kSha256);
    if (payloads[c].empty()) continue;
    const Status s =
        DecodeChunkToBuffer(payloads[c], base, &target_hashes[c], len, staging, scratch);
    if (!s.ok() || std::memcmp(staging.data(), m.target.data() + off, len) != 0) {
      std::fprintf(stderr, "decode to buffer: %s\n", s.ToString().c_str());
      r.ok = false;
    }
  }
  r.decode_buffer_s = Seconds(t0);
  return r;
}

std::string Fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 128, chunk_mib = 8;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mib" && i + 1 < argc)
      mib = std::stoul(argv[++i]);
    else if (a == "--chunk-mib" && i + 1 < argc)
      chunk_mib = std::stoul(argv[++i]);
    else if (a == "--quick")
      quick = true;
    else {
      std::fprintf(stderr, "usage: bench_delta_codec [--mib N] [--chunk-mib N] [--quick]\n");
      return 2;
    }
  }
  const size_t bytes = mib << 20, chunk = chunk_mib << 20;

  // References measured in this run.
  std::vector<uint8_t> a(bytes, 1), b(bytes);
  auto t0 = Clock::now();
  for (int i = 0; i < 3; ++i) std::memcpy(b.data(), a.data(), bytes);
  const double memcpy_gbs = 3.0 * bytes / Seconds(t0) / 1e9;
  t0 = Clock::now();
  Digest sink = Sha256(b);
  const double sha_gbs = bytes / Seconds(t0) / 1e9;
  // The same with the prefetching feed the manifest builder and the decoder use.
  t0 = Clock::now();
  {
    Hasher hasher(HashAlgorithm::kSha256);
    UpdateStreaming(hasher, HashAlgorithm::kSha256, b);
    sink[1] = hasher.Finish()[1];
  }
  const double sha_stream_gbs = bytes / Seconds(t0) / 1e9;
  a.clear();
  a.shrink_to_fit();
  b.clear();
  b.shrink_to_fit();
  std::printf(
      "model %zu MiB, chunk %zu MiB, 1 thread; memcpy %.2f GB/s, sha256 %.2f GB/s, sha256 "
      "streaming %.2f GB/s (%02x%02x)\n",
      mib, chunk_mib, memcpy_gbs, sha_gbs, sha_stream_gbs, sink[0], sink[1]);

  std::string json = "{\"bench\":\"delta_codec\",\"model_mib\":" + std::to_string(mib) +
                     ",\"chunk_mib\":" + std::to_string(chunk_mib) + ",\"threads\":1" +
                     ",\"clock\":\"thread_cpu\"" + ",\"memcpy_gbs\":" + Fmt("%.3f", memcpy_gbs) +
                     ",\"sha256_gbs\":" + Fmt("%.3f", sha_gbs) +
                     ",\"sha256_streaming_gbs\":" + Fmt("%.3f", sha_stream_gbs) + ",\"runs\":[";
  bool first = true, all_ok = true;
  const std::vector<double> fractions =
      quick ? std::vector<double>{0.01} : std::vector<double>{0.01, 0.05, 0.25};
  for (int width : {2, 4}) {
    for (double p : fractions) {
      const Model m = Generate(width, bytes, p, 42 + width);
      const Estimate est = EntropyEstimate(m);
      const size_t zstd_xor = ZstdChunks(m.target, &m.base, chunk);
      const size_t zstd_full = ZstdChunks(m.target, nullptr, chunk);
      const double model = static_cast<double>(m.base.size());
      std::printf(
          "\n%s p=%.2f (measured %.4f): estimate %.3f bits/elem ratio %.1f | zstd-1 xor "
          "ratio %.2f | zstd-1 full ratio %.3f\n",
          m.dtype.c_str(), p, est.changed_fraction, est.bits_per_element, model / est.bytes,
          model / zstd_xor, model / zstd_full);
      struct Variant {
        std::string name;
        ChunkEncodeOptions opt;
        bool timed;
      };
      std::vector<Variant> variants;
      variants.push_back({"default", {}, true});
      if (!quick) {
        ChunkEncodeOptions o;
        o.xor_transform = Transform::kPlanes;
        variants.push_back({"planes+zstd1", o, false});
        o.xor_transform = Transform::kSparse;
        o.varint_gaps = true;
        variants.push_back({"sparse-xor-varint+zstd1", o, false});
        o.varint_gaps = false;
        variants.push_back({"sparse-xor+zstd1", o, false});
        o.xor_transform = Transform::kSparseDiff;
        o.varint_gaps = true;
        variants.push_back({"sparse-diff-varint+zstd1", o, false});
        o = {};
        o.zstd_level = 3;
        variants.push_back({"auto+zstd3", o, false});
        o.zstd_level = 9;
        variants.push_back({"auto+zstd9", o, false});
        o = {};
        o.coder = Coder::kLz4;
        variants.push_back({"auto+lz4", o, true});
      }
      for (const Variant& v : variants) {
        const CodecRun r = RunCodec(m, chunk, v.opt, v.timed);
        all_ok = all_ok && r.ok;
        const double ratio = model / static_cast<double>(r.payload_bytes);
        std::printf(
            "  %-24s payload %10zu B ratio %7.2f (%.3f of estimate, %.2fx zstd-1 xor) "
            "chunks xor/full/same %zu/%zu/%zu",
            v.name.c_str(), r.payload_bytes, ratio, ratio / (model / est.bytes),
            ratio / (model / zstd_xor), r.xor_chunks, r.full_chunks, r.same_chunks);
        if (v.timed) {
          std::printf(" | encode %.2f GB/s decode %.2f GB/s (to buffer %.2f)",
                      model / r.encode_s / 1e9, model / r.decode_s / 1e9,
                      model / r.decode_buffer_s / 1e9);
        }
        std::printf("\n");
        if (!v.timed) continue;
        json += std::string(first ? "" : ",") + "{\"dtype\":\"" + m.dtype +
                "\",\"p\":" + Fmt("%.4f", est.changed_fraction) + ",\"variant\":\"" + v.name +
                "\",\"ratio\":" + Fmt("%.2f", ratio) +
                ",\"estimate_ratio\":" + Fmt("%.2f", model / est.bytes) +
                ",\"of_estimate\":" + Fmt("%.3f", ratio / (model / est.bytes)) +
                ",\"zstd1_xor_ratio\":" + Fmt("%.2f", model / zstd_xor) +
                ",\"zstd1_full_ratio\":" + Fmt("%.3f", model / zstd_full) +
                ",\"encode_gbs\":" + Fmt("%.3f", model / r.encode_s / 1e9) +
                ",\"decode_gbs\":" + Fmt("%.3f", model / r.decode_s / 1e9) +
                ",\"decode_buffer_gbs\":" + Fmt("%.3f", model / r.decode_buffer_s / 1e9) +
                ",\"encode_vs_sha256\":" + Fmt("%.3f", model / r.encode_s / 1e9 / sha_gbs) +
                ",\"decode_vs_sha256\":" + Fmt("%.3f", model / r.decode_s / 1e9 / sha_gbs) +
                ",\"decode_buffer_vs_sha256\":" +
                Fmt("%.3f", model / r.decode_buffer_s / 1e9 / sha_gbs) +
                ",\"encode_vs_memcpy\":" + Fmt("%.3f", model / r.encode_s / 1e9 / memcpy_gbs) +
                ",\"decode_vs_memcpy\":" + Fmt("%.3f", model / r.decode_s / 1e9 / memcpy_gbs) + "}";
        first = false;
      }
    }
  }
  json += std::string("],\"ok\":") + (all_ok ? "true" : "false") + "}";
  std::printf("%s\n", json.c_str());
  return all_ok ? 0 : 1;
}
