// Building, serializing and validating manifests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "format/safetensors.h"
#include "manifest/chunk_size.h"
#include "manifest/manifest.h"

namespace weightcast {

inline constexpr uint64_t kMinChunkSize = 64ull << 10;
inline constexpr uint64_t kMaxChunkSize = 256ull << 20;

// Bounds that ValidateManifest and ParseManifest enforce (docs/manifest_format.md), so that bytes
// from outside cannot make a reader allocate without limit.
inline constexpr uint64_t kMaxManifestBytes = 1ull << 30;  // serialized; protobuf caps at 2 GiB
inline constexpr size_t kMaxManifestFiles = 1'000'000;
inline constexpr size_t kMaxManifestTensors = 10'000'000;
inline constexpr size_t kMaxManifestChunks = 100'000'000;
inline constexpr size_t kMaxManifestPathBytes = 4096;
inline constexpr size_t kMaxTensorNameBytes = 4096;
inline constexpr size_t kMaxTensorRank = 64;
inline constexpr size_t kMaxChannelBytes = 128;
inline constexpr size_t kMaxMetadataEntries = 1024;
inline constexpr size_t kMaxMetadataKeyBytes = 256;
inline constexpr size_t kMaxMetadataValueBytes = 64 << 10;

struct BuildOptions {
  uint64_t chunk_size = kAutoChunkSize;  // kAutoChunkSize: ChooseChunkSize(the checkpoint's size)
  HashAlgorithm algorithm = HashAlgorithm::kSha256;
  size_t threads = 0;  // 0: one per core
  // Also an XXH3-128 per chunk (Manifest::fast_hashes), in the same pass as the SHA-256 while the
  // bytes are in cache, so that agents check chunks rebuilt from deltas at memory speed
  // (docs/verification.md). Only for SHA-256 manifests; ignored for xxh3-128.
  bool fast_hashes = true;
  // Also a wsum-128 per chunk (Manifest::device_checks), for samplers whose live tensors sit in
  // device memory: they check each chunk written there with tensor operations on the device
  // (docs/gpu.md). One more pass over the version, so off unless asked for (`--device-checks`).
  bool device_checks = false;
};

// Feeds `bytes` to `hasher` (of `algorithm`) as fast as data streaming from memory allows. For
// SHA-256: in 4 KiB pieces, prefetching the next piece while the current one is hashed, about
// 1.4x faster than one Update over the whole span (docs/bench/manifest.md). XXH3 outruns the
// hardware prefetcher on its own and gets one Update.
// With `fast` (an XXH3-128 hasher), each piece is also fed to it while it is in cache.
void UpdateStreaming(Hasher& hasher, HashAlgorithm algorithm, std::span<const uint8_t> bytes,
                     Hasher* fast = nullptr);

// Builds the manifest of a checkpoint: streams every file (mmap), hashing chunks on a thread pool,
// and computes the root. Memory is bounded by the pool, not the checkpoint size.
Result<Manifest> BuildManifest(const Checkpoint& checkpoint, std::string channel, Version version,
                               const BuildOptions& options = {});

// The manifest of a checkpoint without its chunk hashes and root: files, tensors, chunk size and
// algorithm, from the headers only (no data byte is read). `chunk_hashes` holds one zero digest
// per chunk, so that chunk_count() and ChunkRange() already work; the root is unset. For a caller
// that hashes the chunks itself (the publisher hashes each chunk while delta-encoding it) and then
// calls FinishManifest. Same checks as BuildManifest.
Result<Manifest> BuildManifestLayout(const Checkpoint& checkpoint, std::string channel,
                                     Version version, const BuildOptions& options = {});

// Completes a manifest from BuildManifestLayout: sets the chunk hashes (one per chunk, in order)
// and the root, then validates it. kInvalidArgument when the count does not match.
Status FinishManifest(Manifest& manifest, std::vector<Digest> chunk_hashes);
// The same, also setting the fast hashes (empty: none; else one XXH3-128 per chunk).
Status FinishManifest(Manifest& manifest, std::vector<Digest> chunk_hashes,
                      std::vector<Digest> fast_hashes);

// Hashes the chunks of the flat byte space formed by `files` under `root` (used by BuildManifest
// and by store verification). Fails if a file's size differs from its entry. With
// `fast_hashes`, also the XXH3-128 of every chunk, in the same pass (each 4 KiB piece is fed to
// both hashers while it is in cache), into `*fast_hashes`.
Result<std::vector<Digest>> HashChunks(const std::filesystem::path& root,
                                       const std::vector<ManifestFile>& files, uint64_t chunk_size,
                                       HashAlgorithm algorithm, size_t threads = 0,
                                       std::vector<Digest>* fast_hashes = nullptr);

// Whether a manifest built with `options` carries fast hashes.
// HashChunks over bytes held in memory (one file's image, or every file's back to back).
Result<std::vector<Digest>> HashChunksInMemory(std::span<const uint8_t> bytes, uint64_t chunk_size,
                                               HashAlgorithm algorithm, size_t threads = 0,
                                               std::vector<Digest>* fast_hashes = nullptr);

inline bool WantsFastHashes(const BuildOptions& options) {
  return options.fast_hashes && options.algorithm == HashAlgorithm::kSha256;
}

// The root hash: SHA-256 over the canonical encoding of the version's content (files, tensors,
// chunk size, hash algorithm, chunk hashes). Channel, version number and delta section are not
// part of it: the same bytes have the same identity however they travel.
// The encoding is defined byte for byte in docs/manifest_format.md ("Root hash").
Digest ComputeRoot(const Manifest& manifest);

// The bytes ComputeRoot hashes (exposed for tests and for other implementations to compare).
std::string CanonicalRootEncoding(const Manifest& manifest);

// Channel names: 1..kMaxChannelBytes of [A-Za-z0-9._-], not starting with '.'. They become
// directory names in the store, hence the strict alphabet.
Status ValidateChannelName(std::string_view channel);

// Checks internal consistency: offsets contiguous, tensors inside their files, chunk count
// matching total size and chunk size, sizes bounded, root matching ComputeRoot.
Status ValidateManifest(const Manifest& manifest);

// Protobuf encoding (docs/manifest_format.md). Parse bounds every size, then validates.
std::string SerializeManifest(const Manifest& manifest);
Result<Manifest> ParseManifest(std::span<const uint8_t> bytes);

Status WriteManifestFile(const std::filesystem::path& path, const Manifest& manifest);
Result<Manifest> ReadManifestFile(const std::filesystem::path& path);

}  // namespace weightcast
