// Encoding one chunk of a version against the same chunk of a base version, and decoding it back.
//
// A payload is self-describing (docs/delta_format.md): a fixed header names the encoding, the
// transform and coder chosen for this chunk, the hash algorithm, the chunk length, the hash of
// the base chunk it applies to and the hash of the chunk it produces, then the segments (element
// widths) the transform used, then the coded stream. The decoder needs nothing else.
//
// Safety contract of decoding: a payload applies only onto the base it names, and only a result
// that hashes to the declared target ever reaches the caller's buffer. The base is passed as a
// HashedChunk, whose hash was either computed from its bytes or vouched for by a verified
// manifest, so the base check cannot be skipped. Any failure leaves `out` untouched and returns
// kFailedPrecondition (wrong base: fetch the chunk `full` instead) or kCorrupt (bad payload).
//
// The fast check (docs/verification.md): a payload whose bytes matched the SHA-256 that a signed
// manifest's delta table lists for it is a CheckedPayload; the decoder overloads that take one
// check the rebuilt chunk against the manifest's XXH3-128 of it (Manifest::fast_hashes) instead
// of hashing it with SHA-256. The payload's SHA-256 fixes every input of a deterministic decoder
// but the base, which the receiver verified; the XXH3 then catches a base that is not what its
// hash says, a decoder bug or a memory error. Nothing an attacker sends reaches the XXH3 without
// passing a SHA-256 first.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

#include "codec/transform.h"
#include "hash/digest.h"
#include "manifest/manifest.h"

namespace weightcast::codec {

enum class Transform : uint8_t {
  kNone = 0,        // the stream is the bytes themselves
  kPlanes = 1,      // byte planes per segment
  kSparse = 2,      // changed-element gaps + byte-plane XOR values (xor only)
  kSparseDiff = 3,  // changed-element gaps + byte-plane zigzag differences (xor only)
};

inline bool IsSparse(Transform t) { return t == Transform::kSparse || t == Transform::kSparseDiff; }

enum class Coder : uint8_t {
  kStored = 0,  // no entropy coder (the stream did not shrink)
  kZstd = 1,
  kLz4 = 2,
};

inline constexpr uint8_t kPayloadFormatVersion = 1;
inline constexpr size_t kPayloadFixedHeaderSize = 96;
// Bounds what a payload may ask the decoder to allocate.
inline constexpr uint64_t kMaxPayloadChunkSize = 256ull << 20;
// The most a sparse stream can hold per chunk byte: a changed 1-byte element costs its value
// byte plus a gap of at most 4 bytes (gaps in a chunk of at most 256 MiB fit in 4 bytes), or
// about 2 bytes with varint gaps. The decoder refuses a longer declared stream, which bounds
// what a hostile payload makes it allocate to this many chunks (the stream) plus the output.
inline constexpr uint64_t kMaxSparseStreamPerByte = 5;

struct PayloadHeader {
  ChunkEncoding encoding = ChunkEncoding::kFull;
  Transform transform = Transform::kNone;
  Coder coder = Coder::kStored;
  HashAlgorithm hash_algorithm = HashAlgorithm::kSha256;
  uint64_t chunk_size = 0;
  uint64_t stream_size = 0;  // length of the transformed stream, before the coder
  Digest base_hash{};        // zero for kFull
  Digest target_hash{};
  std::vector<Segment> segments;  // empty when transform is kNone
  size_t body_offset = 0;         // where the coded stream starts in the payload
};

// Parses and bounds-checks a payload header. Never reads outside `payload`.
Result<PayloadHeader> ParsePayloadHeader(std::span<const uint8_t> payload);

// Bytes of a chunk together with their hash. Construct it by hashing the bytes, or from a hash
// that a verified manifest vouches for (the store checked these bytes against it when it wrote
// them). Does not own the bytes; they must outlive the HashedChunk.
class HashedChunk {
 public:
  static HashedChunk Compute(std::span<const uint8_t> bytes, HashAlgorithm algorithm);
  static HashedChunk FromVerifiedManifest(std::span<const uint8_t> bytes, const Digest& hash,
                                          HashAlgorithm algorithm);

  std::span<const uint8_t> bytes() const { return bytes_; }
  const Digest& hash() const { return hash_; }
  HashAlgorithm algorithm() const { return algorithm_; }

 private:
  HashedChunk(std::span<const uint8_t> bytes, const Digest& hash, HashAlgorithm algorithm)
      : bytes_(bytes), hash_(hash), algorithm_(algorithm) {}
  std::span<const uint8_t> bytes_;
  Digest hash_{};
  HashAlgorithm algorithm_ = HashAlgorithm::kSha256;
};

// What a receiver checks a chunk rebuilt from a delta payload against (`--verify-result`).
enum class VerifyResult : uint8_t {
  // The manifest's XXH3-128 of the chunk, after the payload matched its SHA-256, when the signed
  // manifest has fast hashes (and SHA-256 payload hashes); otherwise as kSha256. The default.
  kFast = 0,
  // The manifest's chunk hash (SHA-256) of the rebuilt chunk, always, at SHA-256 speed.
  kSha256 = 1,
};
std::string_view VerifyResultName(VerifyResult v);  // "fast", "sha256"
Result<VerifyResult> ParseVerifyResult(std::string_view name);

// A delta payload whose bytes matched the size and SHA-256 that a verified manifest's delta table
// lists for its chunk. Only Check makes one (it hashes the bytes), so a decoder handed a
// CheckedPayload knows the payload is the publisher's own, byte for byte. Does not own the bytes;
// they must outlive it.
class CheckedPayload {
 public:
  // kCorrupt (nothing decoded) when the size or the SHA-256 differ from `expected_size` and
  // `expected_sha256` (DeltaChunk::payload_size and payload_hash of a table whose
  // payload_hash_algorithm is SHA-256).
  static Result<CheckedPayload> Check(std::span<const uint8_t> payload, uint64_t expected_size,
                                      const Digest& expected_sha256);
  std::span<const uint8_t> bytes() const { return bytes_; }

 private:
  explicit CheckedPayload(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  std::span<const uint8_t> bytes_;
};

// Whether the chunks of `manifest` rebuilt from its delta payloads are checked with the fast path
// under `mode`: kFast, the manifest has fast hashes, and its delta table's payload hashes are
// SHA-256.
bool UsesFastCheck(const Manifest& manifest, VerifyResult mode);

struct ChunkEncodeOptions {
  Coder coder = Coder::kZstd;
  int zstd_level = 1;
  // Transform for xor chunks; kNone means choose: sparse when few elements changed, else planes.
  Transform xor_transform = Transform::kNone;
  // A changed-element fraction at or below which xor chunks use the sparse form.
  double sparse_max_changed = 0.6;
  // Values of the automatically chosen sparse form (kSparseDiff or kSparse).
  Transform sparse_form = Transform::kSparseDiff;
  // Gaps as LEB128 varints instead of fixed-width byte planes.
  bool varint_gaps = false;
  // Also compress the chunk `full` and keep it when smaller. Skipped (it costs a full
  // compression) when the xor payload is already below this fraction of the chunk.
  double try_full_above = 0.5;
};

// Reusable per-thread buffers and coder contexts. Not thread-safe; one per worker.
class CodecScratch {
 public:
  CodecScratch();
  ~CodecScratch();
  CodecScratch(const CodecScratch&) = delete;
  CodecScratch& operator=(const CodecScratch&) = delete;

  struct State;  // defined in chunk_codec.cc

 private:
  friend struct ScratchAccess;
  std::unique_ptr<State> state_;
};

struct EncodedChunk {
  ChunkEncoding encoding = ChunkEncoding::kSame;
  Transform transform = Transform::kNone;
  Coder coder = Coder::kStored;
  std::vector<uint8_t> payload;  // empty for kSame
};

// Encodes `target` against `base` as kSame (equal hashes: nothing to send), kXor or kFull,
// whichever is smallest. `segments` describe the element widths of the target chunk; they must
// cover it exactly (kInvalidArgument otherwise). A base of another length, or an empty base
// (none exists), gives kFull. Both hashes must use the same algorithm.
Result<EncodedChunk> EncodeChunk(const HashedChunk& base, const HashedChunk& target,
                                 std::span<const Segment> segments,
                                 const ChunkEncodeOptions& options, CodecScratch& scratch);

// EncodeChunk for a target whose hash is not known yet (a publisher that has not built the
// manifest): hashes `target` with the base's algorithm while comparing it with the base, so its
// bytes are read from memory once, and stores the hash in `*target_hash`. Same result as
// EncodeChunk(base, HashedChunk::Compute(target, base.algorithm()), ...). With `fast_hash`, the
// target's XXH3-128 goes there too, from the same pass (the manifest's fast hash).
Result<EncodedChunk> EncodeChunkHashing(const HashedChunk& base, std::span<const uint8_t> target,
                                        std::span<const Segment> segments,
                                        const ChunkEncodeOptions& options, CodecScratch& scratch,
                                        Digest* target_hash, Digest* fast_hash = nullptr);

// Encodes `target` as kFull alone (no base), e.g. for a receiver that has no usable base.
Result<EncodedChunk> EncodeFullChunk(const HashedChunk& target, std::span<const Segment> segments,
                                     const ChunkEncodeOptions& options, CodecScratch& scratch);

// Decodes a kXor or kFull payload into `out` (exactly the chunk length). For kXor the payload's
// base hash must equal base.hash() (kFailedPrecondition otherwise); kFull ignores the base. The
// result is hashed and must equal the payload's target hash and, when given, `expected_target`
// (the hash the receiver's manifest lists). On any error `out` is not written.
Status DecodeChunk(std::span<const uint8_t> payload, const HashedChunk& base,
                   const Digest* expected_target, std::span<uint8_t> out, CodecScratch& scratch);

// The fast-check overloads of the four decoders below: the same checks of the payload, base and
// target hash fields, but the rebuilt chunk is hashed with XXH3-128 only and must equal
// `fast_target` (the manifest's fast hash of the chunk; kCorrupt otherwise, with the same
// guarantees about `out` as the overload it mirrors). The payload's SHA-256 was checked when the
// CheckedPayload was made.
Status DecodeChunk(const CheckedPayload& payload, const HashedChunk& base,
                   const Digest* expected_target, const Digest& fast_target, std::span<uint8_t> out,
                   CodecScratch& scratch);

// The same checks, decoding into `buffer` (resized to chunk_size) without the final copy. Use it
// only for a private staging buffer (a pool slot): on error its contents are unspecified, so it
// must never be the caller's target itself.
Status DecodeChunkToBuffer(std::span<const uint8_t> payload, const HashedChunk& base,
                           const Digest* expected_target, uint64_t chunk_size,
                           std::vector<uint8_t>& buffer, CodecScratch& scratch);
Status DecodeChunkToBuffer(const CheckedPayload& payload, const HashedChunk& base,
                           const Digest* expected_target, const Digest& fast_target,
                           uint64_t chunk_size, std::vector<uint8_t>& buffer,
                           CodecScratch& scratch);

// Decodes straight into `out` (exactly the chunk length), which may be the bytes' final home,
// e.g. a writable mapping of a staged file: the same checks as DecodeChunk in one pass (a sparse
// payload is patched into `out` a block at a time and each block hashed while it is in cache;
// no dry run, no copy). `out` is written BEFORE the result's hash is checked, so after an error
// its contents are unspecified: the caller must not treat them as verified (a staged chunk is
// not marked verified, so a resume fetches it again). Returns Ok only when the bytes in `out`
// hash to the payload's target and to `expected_target` (when given).
Status DecodeChunkUnverifiedInto(std::span<const uint8_t> payload, const HashedChunk& base,
                                 const Digest* expected_target, std::span<uint8_t> out,
                                 CodecScratch& scratch);
Status DecodeChunkUnverifiedInto(const CheckedPayload& payload, const HashedChunk& base,
                                 const Digest* expected_target, const Digest& fast_target,
                                 std::span<uint8_t> out, CodecScratch& scratch);

// Receives a decoded chunk front to back in blocks of at most kDecodeBlock bytes: `offset` is
// where `block` starts in the chunk; the span is valid only during the call. A non-OK status
// stops decoding and is returned.
using DecodedBlockSink = std::function<Status(uint64_t offset, std::span<const uint8_t> block)>;
inline constexpr size_t kDecodeBlock = 32 << 10;

// Decodes a chunk of `chunk_size` bytes and passes it to `sink` block by block, hashing each
// block as it goes (sparse transforms: one pass, each block patched into a cache-sized scratch;
// planes and none: the chunk is decoded whole into the scratch first). The sink sees bytes
// BEFORE the hash of the whole chunk is checked: the result is valid only if this returns Ok,
// and on any error whatever the sink stored must be treated as unverified.
Status DecodeChunkStreaming(std::span<const uint8_t> payload, const HashedChunk& base,
                            const Digest* expected_target, uint64_t chunk_size,
                            const DecodedBlockSink& sink, CodecScratch& scratch);
Status DecodeChunkStreaming(const CheckedPayload& payload, const HashedChunk& base,
                            const Digest* expected_target, const Digest& fast_target,
                            uint64_t chunk_size, const DecodedBlockSink& sink,
                            CodecScratch& scratch);

// One piece of a chunk that lies scattered in memory the caller holds, e.g. the live tensors a
// sampler serves from: `live` bytes the apply may rewrite, or `fixed` bytes it must leave as they
// are (they already hold the target's bytes, e.g. a file header read from the store). Exactly one
// of the two is non-empty. Pieces are given front to back and cover the chunk without gaps.
struct ChunkPiece {
  std::span<uint8_t> live;
  std::span<const uint8_t> fixed;
  uint64_t size() const { return live.empty() ? fixed.size() : live.size(); }
};

// Applies a kXor payload to a chunk where it lies, its live pieces holding the base chunk whose
// hash is `base_hash` (the caller vouches for it: the bytes were verified as that chunk), or a
// kFull payload whatever they hold. Sparse payloads rewrite only the changed elements (no pass
// over the chunk); planes and none gather the chunk into a scratch buffer, undo the transform and
// write the live pieces back. Does NOT verify the result: the caller hashes the pieces
// (HashPieces) and compares with its manifest. Errors: kFailedPrecondition (the payload names
// another base, or another chunk size) with nothing written; kCorrupt (a bad payload) possibly
// after some live bytes were rewritten, so the caller must then treat the chunk as damaged.
Status ApplyChunkInPlace(std::span<const uint8_t> payload, const Digest& base_hash,
                         std::span<const ChunkPiece> pieces, CodecScratch& scratch);

// ApplyChunkInPlace and then the hash of the result (as HashPieces), in one pass: a sparse
// payload is patched and hashed a block at a time, so each block is hashed while its patched
// cache lines are still in cache (one trip through memory instead of two).
Result<Digest> ApplyChunkInPlaceHashing(std::span<const uint8_t> payload, const Digest& base_hash,
                                        std::span<const ChunkPiece> pieces, HashAlgorithm algorithm,
                                        CodecScratch& scratch);

// A payload decoded into what a device does to the chunk where it lies (docs/gpu.md): the host
// decodes, the device only gathers, combines and scatters, and never runs the codec.
struct ElementChanges {
  uint8_t width = 1;  // 1, 2, 4 or 8 bytes
  bool add = false;   // the value is added mod 2^(8 width) to the element; otherwise XORed into it
  std::vector<uint64_t> offsets;  // chunk offsets of the changed elements, increasing
  std::vector<uint8_t> values;    // `width` little-endian bytes per element
};
struct ChunkChanges {
  enum class Kind : uint8_t {
    kElements,  // a sparse payload: the changed elements, one group per (width, add)
    kXorBytes,  // a dense xor payload: `bytes` is the chunk XOR its base
    kFull,      // a full payload: `bytes` is the chunk
  };
  Kind kind = Kind::kElements;
  std::vector<ElementChanges> groups;  // kElements: the tails of cut elements as 1-byte XORs
  std::vector<uint8_t> bytes;          // kXorBytes, kFull: chunk_size bytes
};

// Decodes a kXor payload whose base is the chunk `base_hash` names, or a kFull payload, into the
// changes that rebuild the chunk from its base. Does not verify the result (no base is at hand):
// the caller checks the rebuilt chunk against its manifest, as after ApplyChunkInPlace. Errors:
// kFailedPrecondition (another base, another chunk size), kCorrupt (a bad payload).
Result<ChunkChanges> DecodeChanges(std::span<const uint8_t> payload, const Digest& base_hash,
                                   uint64_t chunk_size, CodecScratch& scratch);

// The hash of a chunk held in pieces (front to back), as the manifest computes it.
Digest HashPieces(std::span<const ChunkPiece> pieces, HashAlgorithm algorithm);

std::string_view TransformName(Transform transform);
std::string_view CoderName(Coder coder);
std::string_view EncodingName(ChunkEncoding encoding);

}  // namespace weightcast::codec
