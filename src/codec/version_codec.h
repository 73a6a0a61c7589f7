// Whole-version delta encode and decode: every chunk of a target version against the same chunk
// of a base version, over a thread pool, streaming in bounded memory.
//
// Memory: at most `window` chunks are in flight (encoded payloads or decoded chunk buffers, plus
// one CodecScratch per worker); base and target bytes are read through read-only mmaps, so a
// version of any size streams through window * chunk_size bytes of heap.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <vector>

#include <weightcast/status.h>

#include "codec/chunk_codec.h"
#include "manifest/manifest.h"
#include "util/file.h"

namespace weightcast::codec {

// A snapshot's flat byte space, read through mmaps of its files (or one span in memory). Chunks
// that lie inside one file are returned as views of the mapping without copying. Thread-safe
// for concurrent reads.
// How a reader will touch a snapshot. kWhole (every chunk: hashing, encoding, a delta that
// changes most chunks): the mappings are populated when opened, one call instead of a page fault
// every few pages, which on a VM is a sixth of a coordinated RL step's fetch (docs/rl_step.md);
// only for a snapshot of at most a quarter of the machine's memory, since populating a file
// that is not cached reads all of it. kSparse: pages come in as they are read.
enum class ReadPattern { kSparse, kWhole };

// kWhole when more than half of `delta`'s chunks have a payload, else kSparse: what a node that
// decodes the version onto its base reads of the base.
ReadPattern BaseReadPattern(const DeltaInfo& delta);

class SnapshotReader {
 public:
  // Maps every file of `manifest` under `root`; fails if one is missing or has another size.
  static Result<SnapshotReader> Open(const std::filesystem::path& root, const Manifest& manifest,
                                     ReadPattern pattern = ReadPattern::kSparse);
  // Views `bytes` (which must outlive the reader) as a snapshot.
  static SnapshotReader FromMemory(std::span<const uint8_t> bytes);

  uint64_t size() const { return size_; }
  // The bytes of `range` (which must lie inside the snapshot): a view into the mapping when the
  // range lies in one file, otherwise gathered into `scratch`.
  std::span<const uint8_t> Read(ByteRange range, std::vector<uint8_t>& scratch) const;

 private:
  std::vector<MappedFile> files_;
  std::vector<uint64_t> offsets_;  // start of each file in the flat space
  std::vector<std::span<const uint8_t>> parts_;
  uint64_t size_ = 0;
};

// Element-width segments of one chunk of `manifest`, from the tensors it holds.
std::vector<Segment> ChunkSegments(const Manifest& manifest, ChunkIndex index);

struct VersionCodecOptions {
  ChunkEncodeOptions chunk;
  size_t threads = 0;  // 0: one per core
  // Chunks in flight; 0: 2 per thread (EncodeVersion: at least 32 MiB of chunks, see
  // version_codec.cc).
  size_t window = 0;
  // DecodeVersion: what a chunk rebuilt from a payload is checked against (chunk_codec.h). kFast
  // only for a target manifest whose signature was verified (the fast check leans on its delta
  // table and fast hashes, which the root does not cover); hence kSha256 by default.
  VerifyResult verify_result = VerifyResult::kSha256;
};

// Receives encoded payloads in chunk order, one call at a time (kSame chunks are not passed).
using PayloadSink = std::function<Status(ChunkIndex, std::span<const uint8_t> payload)>;

// Encodes `target` against `base`. Chunk hashes come from the manifests (the bytes must be the
// ones the manifests describe). Returns the DeltaInfo a delta manifest of `target` carries (its
// payload hashes are SHA-256 of the payloads, whatever the chunk hash algorithm). Fails
// if the hash algorithms differ or a sink call fails. The base may be any earlier version.
Result<DeltaInfo> EncodeVersion(const Manifest& base, const SnapshotReader& base_bytes,
                                const Manifest& target, const SnapshotReader& target_bytes,
                                const PayloadSink& sink, const VersionCodecOptions& options = {});

// EncodeVersion for a target whose chunk hashes are not known yet (a publisher building the
// manifest from the bytes it encodes): `target` gives the layout (files, tensors, chunk size and
// algorithm; its chunk hashes are ignored, e.g. BuildManifestLayout's placeholders). Each chunk
// is hashed while it is compared with the base chunk (EncodeChunkHashing), so its bytes are read
// from memory once, and the hashes go to `*target_hashes` (one per chunk, in order). The
// DeltaInfo and the payloads are the ones EncodeVersion gives once the hashes are in `target`.
// The base's hashes must be the verified ones of its bytes, as for EncodeVersion. With
// `target_fast_hashes`, each chunk's XXH3-128 goes there too, from the same pass (the manifest's
// fast hashes).
Result<DeltaInfo> EncodeVersionHashing(const Manifest& base, const SnapshotReader& base_bytes,
                                       const Manifest& target, const SnapshotReader& target_bytes,
                                       const PayloadSink& sink, std::vector<Digest>* target_hashes,
                                       const VersionCodecOptions& options = {},
                                       std::vector<Digest>* target_fast_hashes = nullptr);

// Returns the payload of a chunk (kXor or kFull). Called from worker threads concurrently.
using PayloadSource = std::function<Result<std::span<const uint8_t>>(ChunkIndex)>;
// Receives every chunk of the target, verified, in chunk order, one call at a time.
using VerifiedChunkSink = std::function<Status(ChunkIndex, std::span<const uint8_t> bytes)>;

// Rebuilds the target version from `base` (whose bytes the store verified against `base`'s
// manifest) and the payloads of `target.delta`. Refuses with kFailedPrecondition when the delta
// names another base. Each payload is checked against the payload hash in the delta table, then
// decoded; each chunk is checked against the target manifest's chunk hash before it reaches the
// sink, or against its fast hash (XXH3-128) when options.verify_result and the manifest allow
// (UsesFastCheck). `same` chunks are passed through without hashing: their base hash equals the
// target's.
// Stops at the first failure (kCorrupt / kFailedPrecondition, naming the chunk); the sink has
// then seen only verified chunks before it.
Status DecodeVersion(const Manifest& base, const SnapshotReader& base_bytes, const Manifest& target,
                     const PayloadSource& payloads, const VerifiedChunkSink& sink,
                     const VersionCodecOptions& options = {});

// Checks the bytes of chunk `index` of `manifest` that a receiver copied from its own verified
// base (a `same` chunk: the base's chunk hash equals the target's), before it records them as
// verified: against the manifest's fast hash when it has them and `mode` is kFast (no byte here
// came from a peer, so XXH3 only has to catch a base that changed since it was verified, or a
// memory error), else against the chunk hash. kCorrupt on a mismatch. Never use it for bytes a
// peer sent: those need the chunk hash (SHA-256).
Status CheckLocalCopy(const Manifest& manifest, ChunkIndex index, std::span<const uint8_t> bytes,
                      VerifyResult mode);

// Catch-up planning for a receiver several versions behind.
enum class CatchUpAction : uint8_t {
  kKeep,        // every step is `same`: the chunk the receiver holds is current
  kApplyChain,  // fetch the payloads of steps first_step.. and apply them in order
  kFetchFull,   // fetch the chunk of the newest version as a whole
};

struct ChunkCatchUp {
  CatchUpAction action = CatchUpAction::kFetchFull;
  uint32_t first_step = 0;  // kApplyChain: the first step whose payload is needed
  uint64_t bytes = 0;       // bytes this choice moves
};

struct CatchUpPlan {
  std::vector<ChunkCatchUp> chunks;  // one per chunk of the newest version
  uint64_t total_bytes = 0;
  uint64_t all_full_bytes = 0;  // what fetching every chunk full would move
};

// `chain[k]` is the delta table of version k+1 against version k, where version 0 is the one the
// receiver holds and the last entry's version is the goal. `full_bytes[i]` is what fetching chunk
// i of the goal full costs. Per chunk, picks whichever of applying the chain and fetching full
// moves fewer bytes; a `full` step inside the chain restarts it there, and a chunk missing from
// an intermediate version can only be reached from a later full step.
Result<CatchUpPlan> PlanCatchUp(std::span<const DeltaInfo> chain,
                                std::span<const uint64_t> full_bytes);

}  // namespace weightcast::codec
