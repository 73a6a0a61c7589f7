// Agent-side apply benchmark: the CPU an agent spends turning received delta payloads into
// staged bytes, per version, for the ways the decode can reach the staged file. All figures are
// measured in this run on data generated here, modes alternating within every round.
//
//   bench_agent_apply [--mib 128] [--chunk-kib 256] [--changed 0.01] [--rounds 5] [--dir /dev/shm]
//                     [--modes old,stream,buffer,mmap,floor] [--threads 1]
//
// A bf16 base of --mib MiB (a tmpfs file mapped afresh for every mode, as an agent maps its
// base), a target changing --changed of its elements by 1-3 ulps (spread over every chunk),
// encoded per chunk as the publisher does (EncodeChunk, default options). Each mode applies
// every payload to the base into a fresh preallocated (fallocate) staged file on --dir:
//   old:     DecodeChunk (dry run, then a second patch) into a chunk buffer, then pwrite: the
//            agent before this change
//   stream:  DecodeChunkStreaming, each hashed 32 KiB block pwritten at once (the agent now)
//   buffer:  DecodeChunkUnverifiedInto a reused chunk buffer (one pass), then one pwrite
//   mmap:    DecodeChunkUnverifiedInto a MAP_SHARED mapping of the staged file (no copy), the
//            chunk's pages populated first with madvise(MADV_POPULATE_WRITE)
//   mmap_nopopulate, stream_sparse (a file sized by ftruncate, not preallocated),
//   stream_populate (the base range prefaulted with MADV_POPULATE_READ): variants on request
//   floor:   one memcpy of the base and one SHA-256 pass over it: what no decoder can avoid
// The agent's two --verify-result settings (docs/verification.md) side by side, each
// with the payload's SHA-256 check the agent makes first:
//   verify_sha256: payload SHA-256, then DecodeChunkStreaming hashing the result with SHA-256
//   verify_fast:   CheckedPayload (payload SHA-256), then the fast DecodeChunkStreaming overload
//                  (the result checked against its XXH3-128)
//   sha256_pass, xxh3_pass: one SHA-256 / XXH3-128 pass over the target's bytes (from memory,
//                  chunk by chunk), the references the two settings are bounded by
// Reports process CPU seconds (getrusage, user + system) per mode (median over rounds), the
// preallocation's CPU, and old over each one-pass mode. Every mode's staged file is checked to
// hold the target. Last line: one JSON object.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codec/chunk_codec.h"
#include "hash/digest.h"
#include "manifest/builder.h"

using namespace weightcast;
using namespace weightcast::codec;

namespace {

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + 1e-6 * tv.tv_usec; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "bench_agent_apply: %s\n", why.c_str());
  std::exit(1);
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

struct Args {
  uint64_t mib = 128;
  uint64_t chunk_kib = 256;
  double changed = 0.01;
  int rounds = 5;
  int threads = 1;  // decoding threads of every mode but floor (the agent runs 2 to 8)
  std::string dir = "/dev/shm";
  std::vector<std::string> modes = {"old", "stream", "buffer", "mmap", "floor"};
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die("missing value for " + k);
      return argv[++i];
    };
    if (k == "--mib") {
      a.mib = std::stoull(next());
    } else if (k == "--chunk-kib") {
      a.chunk_kib = std::stoull(next());
    } else if (k == "--changed") {
      a.changed = std::stod(next());
    } else if (k == "--rounds") {
      a.rounds = std::stoi(next());
    } else if (k == "--threads") {
      a.threads = std::stoi(next());
    } else if (k == "--dir") {
      a.dir = next();
    } else if (k == "--modes") {
      // Comma-separated subset (for profiling one mode).
      a.modes.clear();
      std::string list = next();
      for (size_t at = 0; at <= list.size();) {
        size_t comma = list.find(',', at);
        if (comma == std::string::npos) comma = list.size();
        a.modes.push_back(list.substr(at, comma - at));
        at = comma + 1;
      }
    } else {
      Die("unknown flag " + k);
    }
  }
  if (a.mib == 0 || a.chunk_kib == 0 || a.rounds <= 0 || a.threads <= 0 || a.changed <= 0 ||
      a.changed >= 1) {
    Die("bad arguments");
  }
  for (const std::string& m : a.modes) {
    static const char* known[] = {
        "old",           "stream",          "buffer", "mmap",          "mmap_nopopulate",
        "stream_sparse", "stream_populate", "floor",  "verify_sha256", "verify_fast",
        "sha256_pass",   "xxh3_pass"};
    if (std::find(std::begin(known), std::end(known), m) == std::end(known)) {
      Die("unknown mode " + m);
    }
  }
  return a;
}

// bf16 weights of magnitude ~0.02 (exponent 2^-6..2^-5, random mantissa and sign), and a target
// that moves a fraction of them by 1-3 ulps.
void Generate(const Args& a, std::vector<uint8_t>& base, std::vector<uint8_t>& target) {
  const size_t bytes = a.mib << 20;
  base.resize(bytes);
  std::mt19937_64 rng(42);
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t r = rng();
    for (int k = 0; k < 4; ++k) {
      const uint16_t lane = static_cast<uint16_t>(r >> (16 * k));
      const uint16_t bf = static_cast<uint16_t>((lane & 0x807f) | ((0x79 + (lane >> 14 & 1)) << 7));
      std::memcpy(&base[i + 2 * k], &bf, 2);
    }
  }
  target = base;
  std::geometric_distribution<uint64_t> gap(a.changed);
  const size_t n = bytes / 2;
  for (uint64_t i = gap(rng); i < n; i += 1 + gap(rng)) {
    uint16_t v;
    std::memcpy(&v, &target[2 * i], 2);
    const int step = 1 + static_cast<int>(rng() % 3);
    v = static_cast<uint16_t>((rng() & 1) ? v + step : v - step);
    std::memcpy(&target[2 * i], &v, 2);
  }
}

struct Encoded {
  std::vector<Digest> base_hashes, target_hashes, target_fast, payload_sha;
  std::vector<std::vector<uint8_t>> payloads;
  uint64_t payload_bytes = 0;
};

// A staged file of `size` bytes: preallocated (fallocate, as the store does) or sparse.
int OpenStaged(const std::string& path, uint64_t size, bool preallocate = true) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) Die("open " + path + ": " + std::strerror(errno));
  const int r = preallocate ? ::fallocate(fd, 0, 0, static_cast<off_t>(size))
                            : ::ftruncate(fd, static_cast<off_t>(size));
  if (r != 0) Die("sizing the staged file: " + std::string(std::strerror(errno)));
  return fd;
}

void PwriteAll(int fd, const uint8_t* p, size_t n, uint64_t at) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(at));
    if (w < 0) {
      if (errno == EINTR) continue;
      Die("pwrite: " + std::string(std::strerror(errno)));
    }
    p += w;
    n -= static_cast<size_t>(w);
    at += static_cast<uint64_t>(w);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  const uint64_t chunk = a.chunk_kib << 10;
  std::vector<uint8_t> base_mem, target;
  Generate(a, base_mem, target);
  const uint64_t size = base_mem.size();
  const uint64_t chunks = (size + chunk - 1) / chunk;

  // The base lives in a tmpfs file mapped read-only, as an agent's committed version does.
  const std::string base_path = a.dir + "/wc-agent-apply-base";
  const int base_fd = OpenStaged(base_path, size);
  PwriteAll(base_fd, base_mem.data(), size, 0);
  void* bm = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, base_fd, 0);
  if (bm == MAP_FAILED) Die("mmap base");
  std::span<const uint8_t> base(static_cast<const uint8_t*>(bm), size);
  // Every mode maps the base afresh, as an agent does per target: its page faults count.
  auto remap_base = [&] {
    ::munmap(bm, size);
    bm = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, base_fd, 0);
    if (bm == MAP_FAILED) Die("mmap base");
    base = std::span<const uint8_t>(static_cast<const uint8_t*>(bm), size);
  };
  std::vector<uint8_t>().swap(base_mem);

  Encoded v;
  {
    CodecScratch scratch;
    ChunkEncodeOptions options;
    for (uint64_t c = 0; c < chunks; ++c) {
      const uint64_t at = c * chunk, n = std::min(chunk, size - at);
      const HashedChunk hb = HashedChunk::Compute(base.subspan(at, n), HashAlgorithm::kSha256);
      const HashedChunk ht = HashedChunk::Compute(std::span<const uint8_t>(target).subspan(at, n),
                                                  HashAlgorithm::kSha256);
      const Segment seg{n, 2};
      auto e = EncodeChunk(hb, ht, {&seg, 1}, options, scratch);
      if (!e.ok()) Die(e.status().ToString());
      if (e->encoding == ChunkEncoding::kSame) Die("a chunk did not change; raise --changed");
      v.base_hashes.push_back(hb.hash());
      v.target_hashes.push_back(ht.hash());
      v.target_fast.push_back(
          HashBytes(HashAlgorithm::kXxh3_128, std::span<const uint8_t>(target).subspan(at, n)));
      v.payload_sha.push_back(Sha256(e->payload));
      v.payload_bytes += e->payload.size();
      v.payloads.push_back(std::move(e->payload));
    }
  }

  const std::string staged_path = a.dir + "/wc-agent-apply-staged";
  CodecScratch scratch;
  std::vector<uint8_t> decoded;
  auto hashed_base = [&](uint64_t c) {
    const uint64_t at = c * chunk, n = std::min(chunk, size - at);
    return HashedChunk::FromVerifiedManifest(base.subspan(at, n), v.base_hashes[c],
                                             HashAlgorithm::kSha256);
  };

  // The agent decodes on a pool of workers: with --threads N, thread t applies the chunks
  // c = t mod N, each thread with its own scratch (the staged file is shared, as in the agent).
  auto parallel =
      [&](const std::function<void(uint64_t, CodecScratch&, std::vector<uint8_t>&)>& one_chunk) {
        auto worker = [&](int t) {
          CodecScratch own_scratch;
          std::vector<uint8_t> own_decoded;
          for (uint64_t c = static_cast<uint64_t>(t); c < chunks;
               c += static_cast<uint64_t>(a.threads)) {
            one_chunk(c, t == 0 ? scratch : own_scratch, t == 0 ? decoded : own_decoded);
          }
        };
        std::vector<std::thread> others;
        for (int t = 1; t < a.threads; ++t) others.emplace_back(worker, t);
        worker(0);
        for (std::thread& th : others) th.join();
      };
  auto run_old = [&](int fd) {
    parallel([&](uint64_t c, CodecScratch& sc, std::vector<uint8_t>& buf) {
      const uint64_t at = c * chunk, n = std::min(chunk, size - at);
      buf.resize(n);
      Check(DecodeChunk(v.payloads[c], hashed_base(c), &v.target_hashes[c], buf, sc), "decode");
      PwriteAll(fd, buf.data(), n, at);
    });
  };
  auto run_stream = [&](int fd, bool populate_base) {
    parallel([&](uint64_t c, CodecScratch& sc, std::vector<uint8_t>&) {
      const uint64_t at = c * chunk, n = std::min(chunk, size - at);
      if (populate_base) ::madvise(const_cast<uint8_t*>(base.data()) + at, n, MADV_POPULATE_READ);
      Check(DecodeChunkStreaming(
                v.payloads[c], hashed_base(c), &v.target_hashes[c], n,
                [&](uint64_t off, std::span<const uint8_t> block) {
                  PwriteAll(fd, block.data(), block.size(), at + off);
                  return Status::Ok();
                },
                sc),
            "decode");
    });
  };
  auto run_buffer = [&](int fd) {
    parallel([&](uint64_t c, CodecScratch& sc, std::vector<uint8_t>& buf) {
      const uint64_t at = c * chunk, n = std::min(chunk, size - at);
      buf.resize(n);
      Check(DecodeChunkUnverifiedInto(v.payloads[c], hashed_base(c), &v.target_hashes[c], buf, sc),
            "decode");
      PwriteAll(fd, buf.data(), n, at);
    });
  };
  auto run_mmap = [&](int fd, bool populate) {
    void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) Die("mmap staged");
    auto* out = static_cast<uint8_t*>(m);
    parallel([&](uint64_t c, CodecScratch& sc, std::vector<uint8_t>&) {
      const uint64_t at = c * chunk, n = std::min(chunk, size - at);
      // Page-aligned start: chunk offsets are multiples of the chunk size.
      if (populate) ::madvise(out + at, n, MADV_POPULATE_WRITE);
      Check(DecodeChunkUnverifiedInto(v.payloads[c], hashed_base(c), &v.target_hashes[c],
                                      {out + at, n}, sc),
            "decode");
    });
    ::munmap(m, size);
  };
  auto run_verify = [&](int fd, bool fast) {
    parallel([&](uint64_t c, CodecScratch& sc, std::vector<uint8_t>&) {
      const uint64_t at = c * chunk, n = std::min(chunk, size - at);
      const DecodedBlockSink sink = [&](uint64_t off, std::span<const uint8_t> block) {
        PwriteAll(fd, block.data(), block.size(), at + off);
        return Status::Ok();
      };
      auto checked = CheckedPayload::Check(v.payloads[c], v.payloads[c].size(), v.payload_sha[c]);
      Check(checked.status(), "payload hash");
      Check(fast ? DecodeChunkStreaming(*checked, hashed_base(c), &v.target_hashes[c],
                                        v.target_fast[c], n, sink, sc)
                 : DecodeChunkStreaming(v.payloads[c], hashed_base(c), &v.target_hashes[c], n, sink,
                                        sc),
            "decode");
    });
  };
  auto hash_pass = [&](HashAlgorithm alg) {
    parallel([&](uint64_t c, CodecScratch&, std::vector<uint8_t>&) {
      const uint64_t at = c * chunk, n = std::min(chunk, size - at);
      Hasher h(alg);
      UpdateStreaming(h, alg, std::span<const uint8_t>(target).subspan(at, n));
      if (h.Finish() != (alg == HashAlgorithm::kSha256 ? v.target_hashes[c] : v.target_fast[c])) {
        Die("hash pass mismatch");
      }
    });
  };
  auto floor = [&]() {
    decoded.resize(chunk);
    Hasher h(HashAlgorithm::kSha256);
    for (uint64_t c = 0; c < chunks; ++c) {
      const uint64_t at = c * chunk, n = std::min(chunk, size - at);
      std::memcpy(decoded.data(), base.data() + at, n);
      UpdateStreaming(h, HashAlgorithm::kSha256, std::span<const uint8_t>(decoded).first(n));
      (void)h.Finish();
    }
  };

  const std::vector<std::string>& modes = a.modes;
  std::map<std::string, std::vector<double>> cpu;
  std::vector<double> prealloc;
  for (int r = 0; r < a.rounds; ++r) {
    for (const std::string& mode : modes) {
      int fd = -1;
      const bool no_file = mode == "floor" || mode == "sha256_pass" || mode == "xxh3_pass";
      if (!no_file) {
        const double t0 = CpuSeconds();
        fd = OpenStaged(staged_path, size, mode != "stream_sparse");
        prealloc.push_back(CpuSeconds() - t0);
      }
      remap_base();
      const double t0 = CpuSeconds();
      if (mode == "old") run_old(fd);
      if (mode == "stream" || mode == "stream_sparse") run_stream(fd, false);
      if (mode == "stream_populate") run_stream(fd, true);
      if (mode == "buffer") run_buffer(fd);
      if (mode == "mmap") run_mmap(fd, true);
      if (mode == "mmap_nopopulate") run_mmap(fd, false);
      if (mode == "floor") floor();
      if (mode == "verify_sha256") run_verify(fd, false);
      if (mode == "verify_fast") run_verify(fd, true);
      if (mode == "sha256_pass") hash_pass(HashAlgorithm::kSha256);
      if (mode == "xxh3_pass") hash_pass(HashAlgorithm::kXxh3_128);
      cpu[mode].push_back(CpuSeconds() - t0);
      if (fd >= 0) {
        // Check what landed in the file is the target, then drop it.
        std::vector<uint8_t> back(size);
        if (::pread(fd, back.data(), size, 0) != static_cast<ssize_t>(size) || back != target) {
          Die(mode + ": the staged file does not hold the target");
        }
        ::close(fd);
        ::unlink(staged_path.c_str());
      }
    }
  }
  ::munmap(bm, size);
  ::close(base_fd);
  ::unlink(base_path.c_str());

  auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  std::string json = "{\"bench\":\"agent_apply\",\"mib\":" + std::to_string(a.mib) +
                     ",\"chunk_kib\":" + std::to_string(a.chunk_kib) +
                     ",\"payload_bytes\":" + std::to_string(v.payload_bytes) +
                     ",\"rounds\":" + std::to_string(a.rounds) +
                     ",\"threads\":" + std::to_string(a.threads);
  char buf[128];
  for (const std::string& mode : modes) {
    std::printf("%-16s cpu-s per version: median %.4f (rounds:", mode.c_str(), median(cpu[mode]));
    for (double x : cpu[mode]) std::printf(" %.4f", x);
    std::printf(")\n");
    std::snprintf(buf, sizeof(buf), ",\"%s_cpu_s\":%.4f", mode.c_str(), median(cpu[mode]));
    json += buf;
  }
  if (!prealloc.empty()) {
    std::snprintf(buf, sizeof(buf), ",\"prealloc_cpu_s\":%.4f", median(prealloc));
    json += buf;
  }
  for (const char* mode : {"stream", "buffer", "mmap"}) {
    if (cpu.count("old") == 0 || cpu.count(mode) == 0) continue;
    std::snprintf(buf, sizeof(buf), ",\"old_over_%s\":%.2f", mode,
                  median(cpu["old"]) / median(cpu[mode]));
    json += buf;
  }
  if (cpu.count("verify_sha256") != 0 && cpu.count("verify_fast") != 0) {
    std::snprintf(buf, sizeof(buf), ",\"sha256_over_fast\":%.2f",
                  median(cpu["verify_sha256"]) / median(cpu["verify_fast"]));
    json += buf;
  }
  for (const char* pass : {"sha256_pass", "xxh3_pass"}) {
    if (cpu.count(pass) == 0) continue;
    std::snprintf(buf, sizeof(buf), ",\"%s_gb_per_cpu_s\":%.2f", pass,
                  static_cast<double>(size) / 1e9 / median(cpu[pass]));
    json += buf;
  }
  json += "}";
  std::printf("%s\n", json.c_str());
  return 0;
}
