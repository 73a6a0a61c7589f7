#include "codec/version_codec.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "util/text.h"
#include "util/thread_pool.h"

namespace weightcast::codec {
namespace {

// What one worker needs; handed out from a pool because ParallelFor does not name the worker.
struct Worker {
  CodecScratch codec;
  std::vector<uint8_t> base_gather;
  std::vector<uint8_t> target_gather;
};

class WorkerPool {
 public:
  std::unique_ptr<Worker> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return std::make_unique<Worker>();
    auto w = std::move(free_.back());
    free_.pop_back();
    return w;
  }
  void Give(std::unique_ptr<Worker> w) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(w));
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> free_;
};

std::string ChunkName(ChunkIndex i) { return "chunk " + std::to_string(i.value()); }

size_t WindowFor(const VersionCodecOptions& options, const ThreadPool& pool) {
  return options.window != 0 ? options.window : 2 * pool.size();
}

// The encoder's default window is wider: its results are payloads, mostly far smaller than the
// chunks, and every window ends in a barrier where the workers wait for the slowest chunk. A
// window of 2 per thread with small chunks (256 KiB: 512 windows for 128 MiB) left the cores idle
// a tenth of the time. At least 32 MiB of chunks per window (payloads are at most a chunk each).
size_t EncodeWindowFor(const VersionCodecOptions& options, const ThreadPool& pool,
                       uint64_t chunk_size) {
  if (options.window != 0) return options.window;
  const size_t by_bytes = static_cast<size_t>((32ull << 20) / std::max<uint64_t>(chunk_size, 1));
  return std::max<size_t>(2 * pool.size(), by_bytes);
}

// The base chunk at the same index, or an empty range when the base has no such chunk.
ByteRange BaseRange(const Manifest& base, ChunkIndex i) {
  if (i.value() >= base.chunk_count()) return {};
  return base.ChunkRange(i);
}

}  // namespace

ReadPattern BaseReadPattern(const DeltaInfo& delta) {
  size_t with_payload = 0;
  for (const DeltaChunk& c : delta.chunks) with_payload += c.encoding != ChunkEncoding::kSame;
  return 2 * with_payload > delta.chunks.size() ? ReadPattern::kWhole : ReadPattern::kSparse;
}

Result<SnapshotReader> SnapshotReader::Open(const std::filesystem::path& root,
                                            const Manifest& manifest, ReadPattern pattern) {
  static const uint64_t memory_bytes =
      static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const bool populate = pattern == ReadPattern::kWhole && manifest.total_size() <= memory_bytes / 4;
  SnapshotReader r;
  for (const ManifestFile& f : manifest.files) {
    WC_ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(root / f.path, populate));
    if (m.size() != f.size) {
      return Corrupt((root / f.path).string() + ": " + std::to_string(m.size()) +
                     " bytes, the manifest says " + std::to_string(f.size));
    }
    r.offsets_.push_back(r.size_);
    r.parts_.push_back(m.bytes());
    r.size_ += m.size();
    r.files_.push_back(std::move(m));
  }
  return r;
}

SnapshotReader SnapshotReader::FromMemory(std::span<const uint8_t> bytes) {
  SnapshotReader r;
  r.offsets_.push_back(0);
  r.parts_.push_back(bytes);
  r.size_ = bytes.size();
  return r;
}

std::span<const uint8_t> SnapshotReader::Read(ByteRange range,
                                              std::vector<uint8_t>& scratch) const {
  if (range.size == 0) return {};
  // The last part starting at or before range.offset.
  auto it = std::upper_bound(offsets_.begin(), offsets_.end(), range.offset);
  size_t part = static_cast<size_t>(it - offsets_.begin()) - 1;
  // Skip empty files that start at the same offset.
  while (part < parts_.size() && range.offset - offsets_[part] >= parts_[part].size()) ++part;
  const uint64_t in_part = range.offset - offsets_[part];
  if (in_part + range.size <= parts_[part].size()) {
    return parts_[part].subspan(in_part, range.size);
  }
  scratch.resize(range.size);
  uint64_t done = 0;
  uint64_t at = in_part;
  while (done < range.size && part < parts_.size()) {
    const uint64_t n = std::min<uint64_t>(parts_[part].size() - at, range.size - done);
    if (n != 0) std::memcpy(scratch.data() + done, parts_[part].data() + at, n);
    done += n;
    at = 0;
    ++part;
  }
  return std::span<const uint8_t>(scratch).first(done);
}

std::vector<Segment> ChunkSegments(const Manifest& manifest, ChunkIndex index) {
  const ByteRange range = manifest.ChunkRange(index);
  const std::vector<const ManifestTensor*> tensors = manifest.TensorsIn(range);
  return SegmentsForRange(tensors, range);
}

namespace {

// EncodeVersion, and EncodeVersionHashing when `target_hashes` is given (then the target's own
// chunk hashes are not read).
Result<DeltaInfo> EncodeAll(const Manifest& base, const SnapshotReader& base_bytes,
                            const Manifest& target, const SnapshotReader& target_bytes,
                            const PayloadSink& sink, std::vector<Digest>* target_hashes,
                            std::vector<Digest>* target_fast_hashes,
                            const VersionCodecOptions& options) {
  if (base.hash_algorithm != target.hash_algorithm) {
    return InvalidArgument("base and target manifests use different chunk hash algorithms");
  }
  if (base_bytes.size() != base.total_size() || target_bytes.size() != target.total_size()) {
    return InvalidArgument("snapshot bytes do not match their manifests' sizes");
  }
  const HashAlgorithm alg = target.hash_algorithm;
  DeltaInfo info;
  info.base_version = base.version;
  info.base_root = base.root;
  info.payload_hash_algorithm = HashAlgorithm::kSha256;
  const uint32_t count = target.chunk_count();
  info.chunks.resize(count);
  if (target_hashes != nullptr) target_hashes->assign(count, Digest{});
  if (target_fast_hashes != nullptr) target_fast_hashes->assign(count, Digest{});

  ThreadPool pool(options.threads);
  WorkerPool workers;
  const size_t window = EncodeWindowFor(options, pool, target.chunk_size);
  std::vector<Result<EncodedChunk>> results;
  for (uint32_t start = 0; start < count; start += static_cast<uint32_t>(window)) {
    const uint32_t n = std::min<uint32_t>(static_cast<uint32_t>(window), count - start);
    results.assign(n, Result<EncodedChunk>(Internal("not encoded")));
    pool.ParallelFor(n, [&](size_t k) {
      const ChunkIndex i(start + static_cast<uint32_t>(k));
      std::unique_ptr<Worker> w = workers.Take();
      const auto t = target_bytes.Read(target.ChunkRange(i), w->target_gather);
      const ByteRange br = BaseRange(base, i);
      const auto b = base_bytes.Read(br, w->base_gather);
      const Digest base_hash = br.size != 0 ? base.chunk_hashes[i.value()] : Digest{};
      const auto hb = HashedChunk::FromVerifiedManifest(b, base_hash, alg);
      const std::vector<Segment> segs = ChunkSegments(target, i);
      if (target_hashes != nullptr) {
        // An absent base chunk (empty, zero hash) makes EncodeChunkHashing hash and send full.
        results[k] = EncodeChunkHashing(
            hb, t, segs, options.chunk, w->codec, &(*target_hashes)[i.value()],
            target_fast_hashes != nullptr ? &(*target_fast_hashes)[i.value()] : nullptr);
      } else {
        const auto ht = HashedChunk::FromVerifiedManifest(t, target.chunk_hashes[i.value()], alg);
        results[k] = br.size != 0 ? EncodeChunk(hb, ht, segs, options.chunk, w->codec)
                                  : EncodeFullChunk(ht, segs, options.chunk, w->codec);
      }
      workers.Give(std::move(w));
    });
    for (uint32_t k = 0; k < n; ++k) {
      const ChunkIndex i(start + k);
      if (!results[k].ok()) return results[k].status().WithContext(ChunkName(i));
      EncodedChunk& e = *results[k];
      DeltaChunk& d = info.chunks[i.value()];
      d.encoding = e.encoding;
      d.payload_size = e.payload.size();
      if (e.encoding != ChunkEncoding::kSame) {
        d.payload_hash = Sha256(e.payload);
        WC_RETURN_IF_ERROR(sink(i, e.payload));
      }
      e.payload = {};  // release as soon as it is written
    }
  }
  return info;
}

}  // namespace

Result<DeltaInfo> EncodeVersion(const Manifest& base, const SnapshotReader& base_bytes,
                                const Manifest& target, const SnapshotReader& target_bytes,
                                const PayloadSink& sink, const VersionCodecOptions& options) {
  return EncodeAll(base, base_bytes, target, target_bytes, sink, nullptr, nullptr, options);
}

Result<DeltaInfo> EncodeVersionHashing(const Manifest& base, const SnapshotReader& base_bytes,
                                       const Manifest& target, const SnapshotReader& target_bytes,
                                       const PayloadSink& sink, std::vector<Digest>* target_hashes,
                                       const VersionCodecOptions& options,
                                       std::vector<Digest>* target_fast_hashes) {
  if (target_hashes == nullptr) return InvalidArgument("no place for the target's chunk hashes");
  return EncodeAll(base, base_bytes, target, target_bytes, sink, target_hashes, target_fast_hashes,
                   options);
}

Status DecodeVersion(const Manifest& base, const SnapshotReader& base_bytes, const Manifest& target,
                     const PayloadSource& payloads, const VerifiedChunkSink& sink,
                     const VersionCodecOptions& options) {
  if (!target.delta.has_value()) return InvalidArgument("the target manifest has no delta");
  const DeltaInfo& delta = *target.delta;
  if (delta.base_root != base.root || delta.base_version != base.version) {
    return FailedPrecondition(
        "the delta applies to version " + std::to_string(delta.base_version.value()) + " (root " +
        ToHex(delta.base_root) + "), we hold version " + std::to_string(base.version.value()) +
        " (root " + ToHex(base.root) + ")");
  }
  if (base.hash_algorithm != target.hash_algorithm) {
    return Corrupt("the delta's base and target use different hash algorithms");
  }
  if (delta.chunks.size() != target.chunk_count()) {
    return Corrupt("the delta table has " + std::to_string(delta.chunks.size()) + " entries for " +
                   std::to_string(target.chunk_count()) + " chunks");
  }
  if (base_bytes.size() != base.total_size()) {
    return InvalidArgument("base bytes do not match the base manifest's size");
  }
  const HashAlgorithm alg = target.hash_algorithm;
  const bool fast = UsesFastCheck(target, options.verify_result);
  ThreadPool pool(options.threads);
  WorkerPool workers;
  const size_t window = WindowFor(options, pool);
  const uint32_t count = target.chunk_count();
  // The pool of chunk buffers: one output buffer per chunk in flight, reused window to window.
  std::vector<std::vector<uint8_t>> buffers(std::min<size_t>(window, count));
  std::vector<std::span<const uint8_t>> ready(buffers.size());
  std::vector<Status> statuses(buffers.size());

  for (uint32_t start = 0; start < count; start += static_cast<uint32_t>(window)) {
    const uint32_t n = std::min<uint32_t>(static_cast<uint32_t>(window), count - start);
    pool.ParallelFor(n, [&](size_t k) {
      const ChunkIndex i(start + static_cast<uint32_t>(k));
      statuses[k] = [&]() -> Status {
        const DeltaChunk& d = delta.chunks[i.value()];
        const ByteRange tr = target.ChunkRange(i);
        const ByteRange br = BaseRange(base, i);
        std::vector<uint8_t>& buf = buffers[k];
        if (d.encoding == ChunkEncoding::kSame) {
          if (br.size != tr.size ||
              base.chunk_hashes[i.value()] != target.chunk_hashes[i.value()]) {
            return Corrupt("marked same, but the base chunk differs from the target's");
          }
          ready[k] = base_bytes.Read(br, buf);
          return Status::Ok();
        }
        WC_ASSIGN_OR_RETURN(std::span<const uint8_t> payload, payloads(i));
        std::optional<CheckedPayload> checked;
        if (fast) {
          Result<CheckedPayload> c = CheckedPayload::Check(payload, d.payload_size, d.payload_hash);
          if (!c.ok()) return Corrupt("payload does not match the delta table's size and hash");
          checked = *c;
        } else if (payload.size() != d.payload_size ||
                   HashBytes(delta.payload_hash_algorithm, payload) != d.payload_hash) {
          return Corrupt("payload does not match the delta table's size and hash");
        }
        std::unique_ptr<Worker> w = workers.Take();
        const auto b = base_bytes.Read(br, w->base_gather);
        const Digest base_hash = br.size != 0 ? base.chunk_hashes[i.value()] : Digest{};
        const HashedChunk hb = HashedChunk::FromVerifiedManifest(b, base_hash, alg);
        const Status s =
            checked ? DecodeChunkToBuffer(*checked, hb, &target.chunk_hashes[i.value()],
                                          target.fast_hashes[i.value()], tr.size, buf, w->codec)
                    : DecodeChunkToBuffer(payload, hb, &target.chunk_hashes[i.value()], tr.size,
                                          buf, w->codec);
        workers.Give(std::move(w));
        WC_RETURN_IF_ERROR(s);
        ready[k] = buf;
        return Status::Ok();
      }();
    });
    for (uint32_t k = 0; k < n; ++k) {
      const ChunkIndex i(start + k);
      WC_RETURN_IF_ERROR(statuses[k].WithContext(ChunkName(i)));
      WC_RETURN_IF_ERROR(sink(i, ready[k]));
    }
  }
  return Status::Ok();
}

Status CheckLocalCopy(const Manifest& manifest, ChunkIndex index, std::span<const uint8_t> bytes,
                      VerifyResult mode) {
  const uint32_t i = index.value();
  if (i >= manifest.chunk_count() || bytes.size() != manifest.ChunkRange(index).size) {
    return Corrupt("chunk " + std::to_string(i) + ": " + std::to_string(bytes.size()) +
                   " bytes do not fit the manifest");
  }
  const bool fast = mode == VerifyResult::kFast && manifest.has_fast_hashes();
  const Digest got =
      fast ? HashBytes(HashAlgorithm::kXxh3_128, bytes) : HashBytes(manifest.hash_algorithm, bytes);
  if (got != (fast ? manifest.fast_hashes[i] : manifest.chunk_hashes[i])) {
    return Corrupt("chunk " + std::to_string(i) +
                   " copied from the local base does not match its " +
                   (fast ? "fast hash" : "hash") + " in the manifest");
  }
  return Status::Ok();
}

Result<CatchUpPlan> PlanCatchUp(std::span<const DeltaInfo> chain,
                                std::span<const uint64_t> full_bytes) {
  if (chain.empty()) return InvalidArgument("an empty delta chain");
  for (size_t k = 1; k < chain.size(); ++k) {
    if (chain[k].base_version <= chain[k - 1].base_version) {
      return InvalidArgument("delta chain out of order at step " + std::to_string(k));
    }
  }
  const std::vector<DeltaChunk>& goal = chain.back().chunks;
  if (full_bytes.size() != goal.size()) {
    return InvalidArgument("full sizes for " + std::to_string(full_bytes.size()) +
                           " chunks, the goal has " + std::to_string(goal.size()));
  }
  CatchUpPlan plan;
  plan.chunks.resize(goal.size());
  for (size_t i = 0; i < goal.size(); ++i) {
    // Walk back from the goal, adding payloads, until a full step or the version held.
    uint64_t cost = 0;
    bool reachable = false;
    bool all_same = true;
    size_t first = 0;
    for (size_t k = chain.size(); k-- > 0;) {
      if (i >= chain[k].chunks.size()) break;  // the chunk did not exist in version k+1
      const DeltaChunk& d = chain[k].chunks[i];
      cost += d.payload_size;
      first = k;
      if (d.encoding == ChunkEncoding::kFull) {
        reachable = true;
        all_same = false;
        break;
      }
      if (d.encoding != ChunkEncoding::kSame) all_same = false;
      if (k == 0) reachable = true;
    }
    ChunkCatchUp& c = plan.chunks[i];
    if (reachable && all_same) {
      c = {CatchUpAction::kKeep, 0, 0};
    } else if (reachable && cost < full_bytes[i]) {
      c = {CatchUpAction::kApplyChain, static_cast<uint32_t>(first), cost};
    } else {
      c = {CatchUpAction::kFetchFull, 0, full_bytes[i]};
    }
    plan.total_bytes += c.bytes;
    plan.all_full_bytes += full_bytes[i];
  }
  return plan;
}

}  // namespace weightcast::codec
