// A version's manifest: its files, tensors and chunks, and the root hash that identifies it.
//
// The snapshot of a version is its files concatenated in `files` order (sorted by path) into one
// flat byte space, cut into chunks of `chunk_size` bytes (the last one may be shorter). A chunk
// may span the end of one file and the start of the next.
// The serialized form (protobuf) is documented in docs/manifest_format.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "format/safetensors.h"
#include "hash/digest.h"

namespace weightcast {

inline constexpr uint32_t kManifestFormatVersion = 1;

struct ManifestFile {
  std::string path;  // relative, '/'-separated
  uint64_t size = 0;
  uint64_t offset = 0;  // where the file starts in the flat byte space
};

struct ManifestTensor {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
  uint32_t file_index = 0;
  uint64_t offset = 0;  // absolute, in the flat byte space
  uint64_t size = 0;
};

// How one chunk of a delta version travels (codec/ produces these).
enum class ChunkEncoding : uint8_t {
  kFull = 0,  // the chunk itself, compressed
  kSame = 1,  // identical to the base chunk: nothing is sent
  kXor = 2,   // target XOR base, transformed and compressed
};

struct DeltaChunk {
  ChunkEncoding encoding = ChunkEncoding::kFull;
  uint64_t payload_size = 0;  // bytes on the wire (0 for kSame)
  Digest payload_hash{};      // hash of the payload bytes, checked before decoding
};

// Present when the version is published as a delta: it names its base by version and root.
struct DeltaInfo {
  Version base_version;
  Digest base_root{};
  std::vector<DeltaChunk> chunks;  // one per chunk of the version
  // What every payload_hash is: SHA-256 from every current writer. An older manifest of an
  // xxh3-128 version parses with kXxh3_128 here (its payloads are hashed with the chunk
  // algorithm); such a table never enables the fast check (docs/verification.md).
  HashAlgorithm payload_hash_algorithm = HashAlgorithm::kSha256;
};

struct ByteRange {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t end() const { return offset + size; }
};

struct Manifest {
  uint32_t format_version = kManifestFormatVersion;
  std::string channel;
  Version version;
  HashAlgorithm hash_algorithm = HashAlgorithm::kSha256;
  uint64_t chunk_size = 0;
  std::vector<ManifestFile> files;
  std::vector<ManifestTensor> tensors;  // sorted by offset
  std::vector<Digest> chunk_hashes;
  // Empty, or one XXH3-128 per chunk (16 digest bytes, then 16 zero bytes, like an xxh3-128 chunk
  // hash) of a SHA-256 manifest, computed in the same pass as the chunk hashes. An agent checks a
  // chunk it rebuilt from an authenticated delta payload against it instead of the SHA-256
  // (docs/verification.md). Not part of the root: the signature covers it, as it covers `delta`.
  std::vector<Digest> fast_hashes;
  // Empty, or one wsum-128 (HashAlgorithm::kWeightedSum128: 16 bytes, then 16 zero bytes) per
  // chunk: what a sampler whose live tensors sit in device memory checks each chunk it wrote
  // there against, with tensor operations on that device (docs/gpu.md). Not a hash: it catches
  // a decoder bug, a transfer or a memory error, as fast_hashes do on the host; what comes from
  // the network passed its SHA-256 first. Not part of the root; the signature covers it.
  std::vector<Digest> device_checks;
  std::map<std::string, std::string> metadata;
  std::optional<DeltaInfo> delta;
  Digest root{};  // see ComputeRoot

  uint64_t total_size() const;
  uint32_t chunk_count() const { return static_cast<uint32_t>(chunk_hashes.size()); }
  bool has_fast_hashes() const { return !fast_hashes.empty(); }
  bool has_device_checks() const { return !device_checks.empty(); }
  ByteRange ChunkRange(ChunkIndex index) const;
  // Chunks that hold any byte of the tensors whose names match `pattern` (glob: * and ?).
  std::vector<ChunkIndex> ChunksForTensors(std::string_view pattern) const;
  // Tensors that overlap a byte range (for the codec's dtype-aware transforms).
  std::vector<const ManifestTensor*> TensorsIn(ByteRange range) const;
};

}  // namespace weightcast
