// The chunk payload format, both ways: header, transforms, coders, encoding and decoding, and the
// in-place patch of live tensors. Longer than most files on purpose: the writer and the reader of
// one format sit side by side, so a change to one is read against the other (docs/delta_format.md
// is the format; the element transforms are in transform.cc).
#include "codec/chunk_codec.h"

#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <optional>
#include <string>

#include "manifest/builder.h"
#include "util/text.h"

namespace weightcast::codec {

struct CodecScratch::State {
  ZSTD_CCtx* cctx = nullptr;
  ZSTD_DCtx* dctx = nullptr;
  std::vector<uint8_t> stream;   // transformed bytes before coding / after decoding
  std::vector<uint8_t> result;   // decoded chunk, hashed before it is copied out
  std::vector<size_t> sections;  // where the parts of `stream` end (planes, gap lists)
  std::vector<uint8_t> block;    // a patched block being hashed (sparse dry run)
  ~State() {
    ZSTD_freeCCtx(cctx);
    ZSTD_freeDCtx(dctx);
  }
};

struct ScratchAccess {
  static CodecScratch::State& Get(CodecScratch& s) { return *s.state_; }
};

CodecScratch::CodecScratch() : state_(std::make_unique<State>()) {
  state_->cctx = ZSTD_createCCtx();
  state_->dctx = ZSTD_createDCtx();
}
CodecScratch::~CodecScratch() = default;

namespace {

constexpr uint8_t kMagic[4] = {'W', 'C', 'D', 'P'};

// Hashing dominates decoding; the prefetching feed keeps SHA-NI busy (docs/bench/manifest.md).
Digest HashChunk(HashAlgorithm algorithm, std::span<const uint8_t> bytes) {
  Hasher hasher(algorithm);
  UpdateStreaming(hasher, algorithm, bytes);
  return hasher.Finish();
}

void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// Writes the header (fixed part + segments) at the start of `payload`, which must be empty.
void WriteHeader(const PayloadHeader& h, std::vector<uint8_t>& payload) {
  payload.assign(kPayloadFixedHeaderSize, 0);
  uint8_t* p = payload.data();
  std::memcpy(p, kMagic, 4);
  p[4] = kPayloadFormatVersion;
  p[5] = static_cast<uint8_t>(h.encoding);
  p[6] = static_cast<uint8_t>(h.transform);
  p[7] = static_cast<uint8_t>(h.coder);
  p[8] = static_cast<uint8_t>(h.hash_algorithm);
  Put32(p + 12, static_cast<uint32_t>(h.segments.size()));
  Put64(p + 16, h.chunk_size);
  Put64(p + 24, h.stream_size);
  std::memcpy(p + 32, h.base_hash.data(), 32);
  std::memcpy(p + 64, h.target_hash.data(), 32);
  for (const Segment& s : h.segments) {
    PutVarint(s.size, payload);
    payload.push_back(s.width);
  }
}

bool UsesWideElements(std::span<const Segment> segments) {
  for (const Segment& s : segments) {
    if (s.width > 1) return true;
  }
  return false;
}

// zstd models literals with one Huffman table per block. Ending a block where one part of the
// stream ends and another begins (gap bytes, then nearly constant high planes, then low planes)
// gives each part its own table; mixing them in one block costs about a bit per element.
// Parts shorter than this are merged with the next: a block's table costs tens of bytes.
constexpr size_t kMinSection = 2048;

Result<size_t> ZstdSections(std::span<const uint8_t> stream, std::span<const size_t> ends,
                            int level, ZSTD_CCtx* cctx, uint8_t* dst, size_t capacity) {
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_only);
  size_t r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  if (!ZSTD_isError(r)) r = ZSTD_CCtx_setPledgedSrcSize(cctx, stream.size());
  if (ZSTD_isError(r)) return Internal(std::string("zstd: ") + ZSTD_getErrorName(r));
  ZSTD_outBuffer out{dst, capacity, 0};
  size_t begin = 0;
  auto feed = [&](size_t end, ZSTD_EndDirective mode) -> Status {
    ZSTD_inBuffer in{stream.data() + begin, end - begin, 0};
    size_t left = 0;
    do {
      left = ZSTD_compressStream2(cctx, &out, &in, mode);
      if (ZSTD_isError(left)) return Internal(std::string("zstd: ") + ZSTD_getErrorName(left));
      if (out.pos == out.size && left != 0) return ResourceExhausted("zstd output full");
    } while (left != 0 || in.pos != in.size);
    begin = end;
    return Status::Ok();
  };
  for (size_t end : ends) {
    if (end >= stream.size()) break;
    if (end - begin < kMinSection) continue;
    WC_RETURN_IF_ERROR(feed(end, ZSTD_e_flush));
  }
  WC_RETURN_IF_ERROR(feed(stream.size(), ZSTD_e_end));
  return out.pos;
}

// Appends `stream` coded with the chosen coder to `payload`; falls back to storing it when the
// coder does not shrink it. Returns the coder used. `ends` (may be empty) marks parts.
Result<Coder> AppendCoded(std::span<const uint8_t> stream, std::span<const size_t> ends,
                          const ChunkEncodeOptions& options, CodecScratch::State& st,
                          std::vector<uint8_t>& payload) {
  const size_t at = payload.size();
  if (options.coder == Coder::kZstd && !stream.empty()) {
    // Each flushed block adds at most a block header beyond the bound.
    const size_t bound = ZSTD_compressBound(stream.size()) + 8 * (ends.size() + 1);
    payload.resize(at + bound);
    auto n = ZstdSections(stream, ends, options.zstd_level, st.cctx, payload.data() + at, bound);
    if (!n.ok()) {
      if (n.status().code() != Code::kResourceExhausted) return n.status();
    } else if (*n < stream.size()) {
      payload.resize(at + *n);
      return Coder::kZstd;
    }
  } else if (options.coder == Coder::kLz4 && !stream.empty()) {
    if (stream.size() > static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) {
      return InvalidArgument("chunk too large for lz4");
    }
    const int bound = LZ4_compressBound(static_cast<int>(stream.size()));
    payload.resize(at + static_cast<size_t>(bound));
    const int n = LZ4_compress_default(reinterpret_cast<const char*>(stream.data()),
                                       reinterpret_cast<char*>(payload.data() + at),
                                       static_cast<int>(stream.size()), bound);
    if (n <= 0) return Internal("lz4 compression failed");
    if (static_cast<size_t>(n) < stream.size()) {
      payload.resize(at + static_cast<size_t>(n));
      return Coder::kLz4;
    }
  }
  payload.resize(at);
  payload.insert(payload.end(), stream.begin(), stream.end());
  return Coder::kStored;
}

// Builds a complete payload: header + coded stream. The coder field is patched after coding.
Result<EncodedChunk> Assemble(PayloadHeader header, std::span<const uint8_t> stream,
                              const ChunkEncodeOptions& options, CodecScratch::State& st) {
  EncodedChunk out;
  header.stream_size = stream.size();
  WriteHeader(header, out.payload);
  WC_ASSIGN_OR_RETURN(Coder coder, AppendCoded(stream, st.sections, options, st, out.payload));
  out.payload[7] = static_cast<uint8_t>(coder);
  out.encoding = header.encoding;
  out.transform = header.transform;
  out.coder = coder;
  return out;
}

// Where each byte plane of a planes stream ends.
void PlaneSections(std::span<const Segment> segments, std::vector<size_t>& ends) {
  ends.clear();
  size_t off = 0;
  for (const Segment& s : segments) {
    const uint64_t n = s.size / s.width;
    for (int k = 1; k <= s.width; ++k) ends.push_back(off + k * n);
    off += s.size;
    ends.push_back(off);
  }
}

Result<EncodedChunk> EncodeFull(const HashedChunk& target, std::span<const Segment> segments,
                                const ChunkEncodeOptions& options, CodecScratch::State& st) {
  PayloadHeader h;
  h.encoding = ChunkEncoding::kFull;
  h.hash_algorithm = target.algorithm();
  h.chunk_size = target.bytes().size();
  h.target_hash = target.hash();
  if (UsesWideElements(segments)) {
    h.transform = Transform::kPlanes;
    h.segments.assign(segments.begin(), segments.end());
    st.stream.resize(target.bytes().size());
    PlanesForward(target.bytes(), {}, segments, st.stream);
    PlaneSections(segments, st.sections);
    return Assemble(std::move(h), st.stream, options, st);
  }
  h.transform = Transform::kNone;
  st.sections.clear();
  return Assemble(std::move(h), target.bytes(), options, st);
}

// `target_hash` null: hash the target while scanning it (sparse) or before (planes), and store
// the hash in `*hashed`. Returns a kSame chunk when the hash turns out equal to the base's.
// With `fast_hashed` (only with `hashed`), the target's XXH3-128 is computed in the same feed.
Result<EncodedChunk> EncodeXor(const HashedChunk& base, std::span<const uint8_t> target,
                               const Digest* target_hash, Digest* hashed,
                               std::span<const Segment> segments, const ChunkEncodeOptions& options,
                               CodecScratch::State& st, Digest* fast_hashed = nullptr) {
  const uint64_t size = target.size();
  const bool automatic = options.xor_transform == Transform::kNone;
  const Transform transform = automatic ? options.sparse_form : options.xor_transform;
  PayloadHeader h;
  h.encoding = ChunkEncoding::kXor;
  h.transform = transform;
  h.hash_algorithm = base.algorithm();
  h.chunk_size = size;
  h.base_hash = base.hash();
  h.segments.assign(segments.begin(), segments.end());
  st.stream.clear();
  st.sections.clear();
  std::optional<Hasher> hasher, fast;
  std::optional<HashFeed> feed;
  if (target_hash == nullptr) {
    hasher.emplace(base.algorithm());
    if (fast_hashed != nullptr) fast.emplace(HashAlgorithm::kXxh3_128);
    feed.emplace(*hasher, target, fast ? &*fast : nullptr);
  }
  if (IsSparse(transform)) {
    const uint64_t changed = SparseForward(
        target, base.bytes(), segments,
        transform == Transform::kSparseDiff ? SparseValues::kDiff : SparseValues::kXor,
        options.varint_gaps, st.stream, &st.sections, feed ? &*feed : nullptr);
    if (feed) *hashed = feed->Finish(fast_hashed);
    uint64_t elements = 0;
    for (const Segment& s : segments) elements += s.size / s.width;
    // One pass decides: the sparse stream is built while counting, and redone as planes only
    // when too many elements changed (then planes compress better).
    if (automatic &&
        static_cast<double>(changed) > options.sparse_max_changed * static_cast<double>(elements)) {
      h.transform = Transform::kPlanes;
      st.stream.resize(size);
      PlanesForward(target, base.bytes(), segments, st.stream);
      PlaneSections(segments, st.sections);
    }
  } else {
    if (feed) *hashed = feed->Finish(fast_hashed);
    st.stream.resize(size);
    PlanesForward(target, base.bytes(), segments, st.stream);
    PlaneSections(segments, st.sections);
  }
  h.target_hash = target_hash != nullptr ? *target_hash : *hashed;
  if (h.target_hash == base.hash()) {
    return EncodedChunk{ChunkEncoding::kSame, Transform::kNone, Coder::kStored, {}};
  }
  return Assemble(std::move(h), st.stream, options, st);
}

Status CheckSegmentsArg(std::span<const Segment> segments, uint64_t size) {
  Status s = ValidateSegments(segments, size);
  if (!s.ok()) return InvalidArgument("segments do not describe the chunk: " + s.message());
  return Status::Ok();
}

}  // namespace

HashedChunk HashedChunk::Compute(std::span<const uint8_t> bytes, HashAlgorithm algorithm) {
  return HashedChunk(bytes, HashChunk(algorithm, bytes), algorithm);
}

HashedChunk HashedChunk::FromVerifiedManifest(std::span<const uint8_t> bytes, const Digest& hash,
                                              HashAlgorithm algorithm) {
  return HashedChunk(bytes, hash, algorithm);
}

Result<PayloadHeader> ParsePayloadHeader(std::span<const uint8_t> payload) {
  if (payload.size() < kPayloadFixedHeaderSize) {
    return Corrupt("delta payload of " + std::to_string(payload.size()) +
                   " bytes is shorter than its header");
  }
  const uint8_t* p = payload.data();
  if (std::memcmp(p, kMagic, 4) != 0) return Corrupt("delta payload: bad magic");
  if (p[4] != kPayloadFormatVersion) {
    return Corrupt("delta payload: unsupported format version " + std::to_string(p[4]));
  }
  PayloadHeader h;
  if (p[5] != static_cast<uint8_t>(ChunkEncoding::kFull) &&
      p[5] != static_cast<uint8_t>(ChunkEncoding::kXor)) {
    return Corrupt("delta payload: bad encoding " + std::to_string(p[5]));
  }
  h.encoding = static_cast<ChunkEncoding>(p[5]);
  if (p[6] > static_cast<uint8_t>(Transform::kSparseDiff)) {
    return Corrupt("delta payload: bad transform " + std::to_string(p[6]));
  }
  h.transform = static_cast<Transform>(p[6]);
  if (p[7] > static_cast<uint8_t>(Coder::kLz4)) {
    return Corrupt("delta payload: bad coder " + std::to_string(p[7]));
  }
  h.coder = static_cast<Coder>(p[7]);
  if (p[8] != static_cast<uint8_t>(HashAlgorithm::kSha256) &&
      p[8] != static_cast<uint8_t>(HashAlgorithm::kXxh3_128)) {
    return Corrupt("delta payload: bad hash algorithm " + std::to_string(p[8]));
  }
  h.hash_algorithm = static_cast<HashAlgorithm>(p[8]);
  if (p[9] != 0 || p[10] != 0 || p[11] != 0) return Corrupt("delta payload: reserved bytes set");
  const uint32_t segment_count = Get32(p + 12);
  h.chunk_size = Get64(p + 16);
  h.stream_size = Get64(p + 24);
  std::memcpy(h.base_hash.data(), p + 32, 32);
  std::memcpy(h.target_hash.data(), p + 64, 32);
  if (h.chunk_size > kMaxPayloadChunkSize) {
    return Corrupt("delta payload: chunk size " + std::to_string(h.chunk_size) +
                   " exceeds the limit");
  }
  if (IsSparse(h.transform) && h.encoding != ChunkEncoding::kXor) {
    return Corrupt("delta payload: sparse transform on a full chunk");
  }
  if ((h.transform == Transform::kNone) != (segment_count == 0) && h.chunk_size != 0) {
    return Corrupt("delta payload: segment count does not match the transform");
  }
  if (segment_count > kMaxSegments || segment_count > h.chunk_size) {
    return Corrupt("delta payload: " + std::to_string(segment_count) + " segments");
  }
  size_t pos = kPayloadFixedHeaderSize;
  h.segments.reserve(segment_count);
  for (uint32_t i = 0; i < segment_count; ++i) {
    WC_ASSIGN_OR_RETURN(uint64_t size, GetVarint(payload, &pos));
    if (pos >= payload.size()) return Corrupt("delta payload: truncated segment list");
    h.segments.push_back({size, payload[pos++]});
  }
  if (h.transform != Transform::kNone) {
    WC_RETURN_IF_ERROR(ValidateSegments(h.segments, h.chunk_size).WithContext("delta payload"));
  }
  // An encoder's sparse stream is at most kMaxSparseStreamPerByte bytes per chunk byte plus a
  // count, a gap width, plane headers and a tail per segment (under 32 bytes); anything longer
  // is a lie that would make us allocate for nothing.
  const uint64_t max_stream = IsSparse(h.transform)
                                  ? kMaxSparseStreamPerByte * h.chunk_size + 32ull * segment_count
                                  : h.chunk_size;
  if (IsSparse(h.transform) ? h.stream_size > max_stream : h.stream_size != h.chunk_size) {
    return Corrupt("delta payload: stream size " + std::to_string(h.stream_size) +
                   " does not fit a chunk of " + std::to_string(h.chunk_size));
  }
  h.body_offset = pos;
  if (h.coder == Coder::kStored && payload.size() - pos != h.stream_size) {
    return Corrupt("delta payload: stored body of " + std::to_string(payload.size() - pos) +
                   " bytes, header says " + std::to_string(h.stream_size));
  }
  return h;
}

Result<EncodedChunk> EncodeChunk(const HashedChunk& base, const HashedChunk& target,
                                 std::span<const Segment> segments,
                                 const ChunkEncodeOptions& options, CodecScratch& scratch) {
  if (base.algorithm() != target.algorithm()) {
    return InvalidArgument("base and target chunks are hashed with different algorithms");
  }
  WC_RETURN_IF_ERROR(CheckSegmentsArg(segments, target.bytes().size()));
  CodecScratch::State& st = ScratchAccess::Get(scratch);
  const uint64_t size = target.bytes().size();
  if (base.bytes().size() == size && base.hash() == target.hash()) {
    return EncodedChunk{ChunkEncoding::kSame, Transform::kNone, Coder::kStored, {}};
  }
  if (base.bytes().size() != size || size == 0) return EncodeFull(target, segments, options, st);
  WC_ASSIGN_OR_RETURN(EncodedChunk best, EncodeXor(base, target.bytes(), &target.hash(), nullptr,
                                                   segments, options, st));
  if (static_cast<double>(best.payload.size()) >
      options.try_full_above * static_cast<double>(size)) {
    WC_ASSIGN_OR_RETURN(EncodedChunk full, EncodeFull(target, segments, options, st));
    if (full.payload.size() < best.payload.size()) best = std::move(full);
  }
  return best;
}

Result<EncodedChunk> EncodeChunkHashing(const HashedChunk& base, std::span<const uint8_t> target,
                                        std::span<const Segment> segments,
                                        const ChunkEncodeOptions& options, CodecScratch& scratch,
                                        Digest* target_hash, Digest* fast_hash) {
  WC_RETURN_IF_ERROR(CheckSegmentsArg(segments, target.size()));
  if (base.bytes().size() != target.size() || target.empty()) {
    // No base chunk to compare with (a new or resized chunk): the target is read for each hash.
    const HashedChunk t = HashedChunk::Compute(target, base.algorithm());
    *target_hash = t.hash();
    if (fast_hash != nullptr) *fast_hash = HashBytes(HashAlgorithm::kXxh3_128, target);
    return EncodeChunk(base, t, segments, options, scratch);
  }
  CodecScratch::State& st = ScratchAccess::Get(scratch);
  WC_ASSIGN_OR_RETURN(EncodedChunk best, EncodeXor(base, target, nullptr, target_hash, segments,
                                                   options, st, fast_hash));
  if (best.encoding != ChunkEncoding::kSame &&
      static_cast<double>(best.payload.size()) >
          options.try_full_above * static_cast<double>(target.size())) {
    const HashedChunk t = HashedChunk::FromVerifiedManifest(target, *target_hash, base.algorithm());
    WC_ASSIGN_OR_RETURN(EncodedChunk full, EncodeFull(t, segments, options, st));
    if (full.payload.size() < best.payload.size()) best = std::move(full);
  }
  return best;
}

Result<EncodedChunk> EncodeFullChunk(const HashedChunk& target, std::span<const Segment> segments,
                                     const ChunkEncodeOptions& options, CodecScratch& scratch) {
  WC_RETURN_IF_ERROR(CheckSegmentsArg(segments, target.bytes().size()));
  return EncodeFull(target, segments, options, ScratchAccess::Get(scratch));
}

namespace {

// A parsed, checked and decompressed payload.
struct Prepared {
  PayloadHeader h;
  std::span<const uint8_t> stream;
  std::span<const uint8_t> xor_base;  // empty for kFull
  // The fast check: the result must have this XXH3-128 (and is not hashed with h.hash_algorithm).
  const Digest* fast = nullptr;

  // What the result is hashed with.
  HashAlgorithm result_algorithm() const {
    return fast != nullptr ? HashAlgorithm::kXxh3_128 : h.hash_algorithm;
  }
};

// Everything before the inverse transform: header, hash algorithm, target, base and size checks,
// then the coder (into st.stream unless stored).
Result<Prepared> Prepare(std::span<const uint8_t> payload, const HashedChunk& base,
                         const Digest* expected_target, const Digest* fast, uint64_t out_size,
                         CodecScratch::State& st, bool check_base = true) {
  Prepared p;
  p.fast = fast;
  WC_ASSIGN_OR_RETURN(p.h, ParsePayloadHeader(payload));
  const PayloadHeader& h = p.h;
  const bool is_xor = h.encoding == ChunkEncoding::kXor;
  if (h.hash_algorithm != base.algorithm()) {
    const std::string m = "delta payload hashed with " +
                          std::string(HashAlgorithmName(h.hash_algorithm)) + ", we hold " +
                          std::string(HashAlgorithmName(base.algorithm()));
    return is_xor ? FailedPrecondition(m) : Corrupt(m);
  }
  if (expected_target != nullptr && *expected_target != h.target_hash) {
    return Corrupt("delta payload produces chunk " + ToHex(h.target_hash) +
                   ", the manifest lists " + ToHex(*expected_target));
  }
  if (out_size != h.chunk_size) {
    return Corrupt("delta payload is for a chunk of " + std::to_string(h.chunk_size) +
                   " bytes, the output holds " + std::to_string(out_size));
  }
  if (is_xor && check_base) {
    if (base.bytes().size() != h.chunk_size || base.hash() != h.base_hash) {
      return FailedPrecondition("delta payload applies to base chunk " + ToHex(h.base_hash) +
                                ", we hold " + ToHex(base.hash()) + " (" +
                                std::to_string(base.bytes().size()) + " bytes)");
    }
    p.xor_base = base.bytes();
  }
  const std::span<const uint8_t> body = payload.subspan(h.body_offset);
  switch (h.coder) {
    case Coder::kStored:
      p.stream = body;
      break;
    case Coder::kZstd: {
      st.stream.resize(h.stream_size);
      const size_t n = ZSTD_decompressDCtx(st.dctx, st.stream.data(), st.stream.size(), body.data(),
                                           body.size());
      if (ZSTD_isError(n)) {
        return Corrupt(std::string("delta payload: zstd: ") + ZSTD_getErrorName(n));
      }
      if (n != h.stream_size) return Corrupt("delta payload: zstd stream has the wrong length");
      p.stream = st.stream;
      break;
    }
    case Coder::kLz4: {
      if (body.size() > static_cast<size_t>(INT_MAX) || h.stream_size > INT_MAX) {
        return Corrupt("delta payload: lz4 body too large");
      }
      st.stream.resize(h.stream_size);
      const int n = LZ4_decompress_safe(
          reinterpret_cast<const char*>(body.data()), reinterpret_cast<char*>(st.stream.data()),
          static_cast<int>(body.size()), static_cast<int>(st.stream.size()));
      if (n < 0 || static_cast<uint64_t>(n) != h.stream_size) {
        return Corrupt("delta payload: lz4 stream is corrupt or has the wrong length");
      }
      p.stream = st.stream;
      break;
    }
  }
  return p;
}

// `got` is the result's hash with p.result_algorithm().
Status CheckTarget(const Digest& got, const Prepared& p) {
  if (p.fast != nullptr) {
    if (got != *p.fast) {
      return Corrupt("delta payload decodes to a chunk whose xxh3-128 is " +
                     ToHex(std::span(got).first(16)) + ", the manifest's fast hash is " +
                     ToHex(std::span(*p.fast).first(16)) +
                     " (a base that is not what its hash says, a decoder bug or a memory error)");
    }
    return Status::Ok();
  }
  if (got != p.h.target_hash) {
    return Corrupt("delta payload decodes to " + ToHex(got) + ", expected " +
                   ToHex(p.h.target_hash));
  }
  return Status::Ok();
}

// Planes and none: the inverse transform into `result` (the chunk's size), then its hash.
Status InverseWhole(const Prepared& p, std::span<uint8_t> result) {
  const PayloadHeader& h = p.h;
  switch (h.transform) {
    case Transform::kNone:
      if (p.stream.size() != h.chunk_size) return Corrupt("delta payload: stream length");
      if (!p.xor_base.empty()) {
        for (uint64_t i = 0; i < h.chunk_size; ++i) result[i] = p.stream[i] ^ p.xor_base[i];
      } else if (h.chunk_size != 0) {
        std::memcpy(result.data(), p.stream.data(), h.chunk_size);
      }
      break;
    case Transform::kPlanes:
      WC_RETURN_IF_ERROR(PlanesInverse(p.stream, p.xor_base, h.segments, result));
      break;
    case Transform::kSparse:
    case Transform::kSparseDiff:
      return Internal("sparse payloads are applied block by block");
  }
  return CheckTarget(HashChunk(p.result_algorithm(), result), p);
}

SparseValues ValuesOf(Transform t) {
  return t == Transform::kSparseDiff ? SparseValues::kDiff : SparseValues::kXor;
}

// Sparse payloads are patched onto the base a block at a time and each block is hashed while it
// is in cache: the base is read once, no whole-chunk copy of it is made, and the result is hashed
// without another trip to memory. With `dst` empty the blocks go to a small scratch block and
// only the hash is kept (a dry run before touching the caller's buffer).
constexpr size_t kPatchBlock = kDecodeBlock;

Status PatchAndHash(const Prepared& p, std::span<uint8_t> dst, CodecScratch::State& st) {
  const PayloadHeader& h = p.h;
  SparseApplier applier(p.stream, p.xor_base, h.segments, ValuesOf(h.transform));
  Hasher hasher(p.result_algorithm());
  if (dst.empty()) st.block.resize(kPatchBlock);
  for (uint64_t at = 0; at < h.chunk_size; at += kPatchBlock) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kPatchBlock, h.chunk_size - at));
    const std::span<uint8_t> block =
        dst.empty() ? std::span<uint8_t>(st.block).first(n) : dst.subspan(at, n);
    WC_RETURN_IF_ERROR(applier.Fill(at, block));
    hasher.Update(block);
  }
  WC_RETURN_IF_ERROR(applier.Finish());
  return CheckTarget(hasher.Finish(), p);
}

Status DecodeInto(std::span<const uint8_t> payload, const HashedChunk& base,
                  const Digest* expected_target, const Digest* fast, std::span<uint8_t> out,
                  CodecScratch& scratch) {
  CodecScratch::State& st = ScratchAccess::Get(scratch);
  WC_ASSIGN_OR_RETURN(Prepared p, Prepare(payload, base, expected_target, fast, out.size(), st));
  if (IsSparse(p.h.transform)) {
    // Verify without writing `out`, then patch `out` directly: two reads of the base, but no
    // chunk-sized scratch and no copy of the result.
    WC_RETURN_IF_ERROR(PatchAndHash(p, {}, st));
    SparseApplier applier(p.stream, p.xor_base, p.h.segments, ValuesOf(p.h.transform));
    Status s;
    // Block by block, so each change lands in a block just copied (still in cache).
    for (uint64_t at = 0; at < out.size() && s.ok(); at += kPatchBlock) {
      s = applier.Fill(at, out.subspan(at, std::min<uint64_t>(kPatchBlock, out.size() - at)));
    }
    if (s.ok()) s = applier.Finish();
    // The stream was fully checked by the dry run; failing now would be a bug.
    if (!s.ok()) return Internal("sparse payload failed after verifying: " + s.message());
    return Status::Ok();
  }
  st.result.resize(p.h.chunk_size);
  WC_RETURN_IF_ERROR(InverseWhole(p, st.result));
  if (!out.empty()) std::memcpy(out.data(), st.result.data(), out.size());
  return Status::Ok();
}

Status DecodeToBuffer(std::span<const uint8_t> payload, const HashedChunk& base,
                      const Digest* expected_target, const Digest* fast, uint64_t chunk_size,
                      std::vector<uint8_t>& buffer, CodecScratch& scratch) {
  CodecScratch::State& st = ScratchAccess::Get(scratch);
  WC_ASSIGN_OR_RETURN(Prepared p, Prepare(payload, base, expected_target, fast, chunk_size, st));
  buffer.resize(p.h.chunk_size);
  if (IsSparse(p.h.transform)) return PatchAndHash(p, buffer, st);
  return InverseWhole(p, buffer);
}

Status DecodeUnverifiedInto(std::span<const uint8_t> payload, const HashedChunk& base,
                            const Digest* expected_target, const Digest* fast,
                            std::span<uint8_t> out, CodecScratch& scratch) {
  CodecScratch::State& st = ScratchAccess::Get(scratch);
  WC_ASSIGN_OR_RETURN(Prepared p, Prepare(payload, base, expected_target, fast, out.size(), st));
  if (IsSparse(p.h.transform)) return PatchAndHash(p, out, st);
  return InverseWhole(p, out);
}

Status DecodeStreaming(std::span<const uint8_t> payload, const HashedChunk& base,
                       const Digest* expected_target, const Digest* fast, uint64_t chunk_size,
                       const DecodedBlockSink& sink, CodecScratch& scratch) {
  CodecScratch::State& st = ScratchAccess::Get(scratch);
  WC_ASSIGN_OR_RETURN(Prepared p, Prepare(payload, base, expected_target, fast, chunk_size, st));
  const PayloadHeader& h = p.h;
  Hasher hasher(p.result_algorithm());
  if (IsSparse(h.transform)) {
    SparseApplier applier(p.stream, p.xor_base, h.segments, ValuesOf(h.transform));
    st.block.resize(kDecodeBlock);
    for (uint64_t at = 0; at < h.chunk_size; at += kDecodeBlock) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kDecodeBlock, h.chunk_size - at));
      const std::span<uint8_t> block = std::span<uint8_t>(st.block).first(n);
      WC_RETURN_IF_ERROR(applier.Fill(at, block));
      hasher.Update(block);
      WC_RETURN_IF_ERROR(sink(at, block));
    }
    WC_RETURN_IF_ERROR(applier.Finish());
    return CheckTarget(hasher.Finish(), p);
  }
  // Planes and none undo their transform over the whole chunk; the result is then hashed and
  // handed over a block at a time while it is in cache.
  st.result.resize(h.chunk_size);
  switch (h.transform) {
    case Transform::kNone:
      if (p.stream.size() != h.chunk_size) return Corrupt("delta payload: stream length");
      if (!p.xor_base.empty()) {
        for (uint64_t i = 0; i < h.chunk_size; ++i) st.result[i] = p.stream[i] ^ p.xor_base[i];
      } else if (h.chunk_size != 0) {
        std::memcpy(st.result.data(), p.stream.data(), h.chunk_size);
      }
      break;
    case Transform::kPlanes:
      WC_RETURN_IF_ERROR(PlanesInverse(p.stream, p.xor_base, h.segments, st.result));
      break;
    case Transform::kSparse:
    case Transform::kSparseDiff:
      return Internal("unreachable");
  }
  for (uint64_t at = 0; at < h.chunk_size; at += kDecodeBlock) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kDecodeBlock, h.chunk_size - at));
    const std::span<const uint8_t> block = std::span<const uint8_t>(st.result).subspan(at, n);
    hasher.Update(block);
    WC_RETURN_IF_ERROR(sink(at, block));
  }
  return CheckTarget(hasher.Finish(), p);
}

}  // namespace

Status DecodeChunk(std::span<const uint8_t> payload, const HashedChunk& base,
                   const Digest* expected_target, std::span<uint8_t> out, CodecScratch& scratch) {
  return DecodeInto(payload, base, expected_target, nullptr, out, scratch);
}

Status DecodeChunk(const CheckedPayload& payload, const HashedChunk& base,
                   const Digest* expected_target, const Digest& fast_target, std::span<uint8_t> out,
                   CodecScratch& scratch) {
  return DecodeInto(payload.bytes(), base, expected_target, &fast_target, out, scratch);
}

Status DecodeChunkToBuffer(std::span<const uint8_t> payload, const HashedChunk& base,
                           const Digest* expected_target, uint64_t chunk_size,
                           std::vector<uint8_t>& buffer, CodecScratch& scratch) {
  return DecodeToBuffer(payload, base, expected_target, nullptr, chunk_size, buffer, scratch);
}

Status DecodeChunkToBuffer(const CheckedPayload& payload, const HashedChunk& base,
                           const Digest* expected_target, const Digest& fast_target,
                           uint64_t chunk_size, std::vector<uint8_t>& buffer,
                           CodecScratch& scratch) {
  return DecodeToBuffer(payload.bytes(), base, expected_target, &fast_target, chunk_size, buffer,
                        scratch);
}

Status DecodeChunkUnverifiedInto(std::span<const uint8_t> payload, const HashedChunk& base,
                                 const Digest* expected_target, std::span<uint8_t> out,
                                 CodecScratch& scratch) {
  return DecodeUnverifiedInto(payload, base, expected_target, nullptr, out, scratch);
}

Status DecodeChunkUnverifiedInto(const CheckedPayload& payload, const HashedChunk& base,
                                 const Digest* expected_target, const Digest& fast_target,
                                 std::span<uint8_t> out, CodecScratch& scratch) {
  return DecodeUnverifiedInto(payload.bytes(), base, expected_target, &fast_target, out, scratch);
}

Status DecodeChunkStreaming(std::span<const uint8_t> payload, const HashedChunk& base,
                            const Digest* expected_target, uint64_t chunk_size,
                            const DecodedBlockSink& sink, CodecScratch& scratch) {
  return DecodeStreaming(payload, base, expected_target, nullptr, chunk_size, sink, scratch);
}

Status DecodeChunkStreaming(const CheckedPayload& payload, const HashedChunk& base,
                            const Digest* expected_target, const Digest& fast_target,
                            uint64_t chunk_size, const DecodedBlockSink& sink,
                            CodecScratch& scratch) {
  return DecodeStreaming(payload.bytes(), base, expected_target, &fast_target, chunk_size, sink,
                         scratch);
}

std::string_view VerifyResultName(VerifyResult v) {
  return v == VerifyResult::kSha256 ? "sha256" : "fast";
}

Result<VerifyResult> ParseVerifyResult(std::string_view name) {
  if (name == "fast") return VerifyResult::kFast;
  if (name == "sha256") return VerifyResult::kSha256;
  return InvalidArgument("--verify-result must be fast or sha256, not '" + std::string(name) + "'");
}

Result<CheckedPayload> CheckedPayload::Check(std::span<const uint8_t> payload,
                                             uint64_t expected_size,
                                             const Digest& expected_sha256) {
  if (payload.size() != expected_size) {
    return Corrupt("delta payload of " + std::to_string(payload.size()) +
                   " bytes, the manifest lists " + std::to_string(expected_size));
  }
  // Prefetching feed: payloads arrive from memory, not from cache (builder.h).
  Hasher hasher(HashAlgorithm::kSha256);
  UpdateStreaming(hasher, HashAlgorithm::kSha256, payload);
  if (hasher.Finish() != expected_sha256) {
    return Corrupt("delta payload does not match its sha256 in the manifest");
  }
  return CheckedPayload(payload);
}

bool UsesFastCheck(const Manifest& manifest, VerifyResult mode) {
  return mode == VerifyResult::kFast && manifest.has_fast_hashes() &&
         manifest.hash_algorithm == HashAlgorithm::kSha256 && manifest.delta.has_value() &&
         manifest.delta->payload_hash_algorithm == HashAlgorithm::kSha256;
}

namespace {

// SparseApplier::Placement over a chunk's pieces: a cursor that only moves forward, since the
// applier visits changes in increasing offset order.
class PiecePlacement final : public SparseApplier::Placement {
 public:
  explicit PiecePlacement(std::span<const ChunkPiece> pieces) : pieces_(pieces) {}

  uint8_t* At(uint64_t offset, uint64_t len) override {
    while (i_ < pieces_.size() && start_ + pieces_[i_].size() <= offset)
      start_ += pieces_[i_++].size();
    if (i_ == pieces_.size() || offset + len > start_ + pieces_[i_].size()) {
      straddled_ = true;  // an element across two pieces: the pieces do not follow the tensors
      return nullptr;
    }
    const ChunkPiece& p = pieces_[i_];
    return p.live.empty() ? nullptr : p.live.data() + (offset - start_);
  }
  uint8_t* Run(uint64_t offset, uint64_t* begin, uint64_t* end) override {
    while (i_ < pieces_.size() && start_ + pieces_[i_].size() <= offset)
      start_ += pieces_[i_++].size();
    if (i_ == pieces_.size() || pieces_[i_].live.empty()) return nullptr;
    *begin = start_;
    *end = start_ + pieces_[i_].size();
    return pieces_[i_].live.data();
  }
  bool straddled() const { return straddled_; }

 private:
  std::span<const ChunkPiece> pieces_;
  size_t i_ = 0;
  uint64_t start_ = 0;  // chunk offset of pieces_[i_]
  bool straddled_ = false;
};

}  // namespace

namespace {

// Hashes bytes [begin, end) of a chunk held in pieces.
void HashPieceRange(std::span<const ChunkPiece> pieces, uint64_t begin, uint64_t end,
                    Hasher& hasher) {
  uint64_t at = 0;
  for (const ChunkPiece& p : pieces) {
    const uint64_t size = p.size();
    if (at + size > begin && at < end) {
      const uint64_t from = std::max(begin, at) - at;
      const uint64_t to = std::min(end, at + size) - at;
      const std::span<const uint8_t> bytes =
          p.live.empty() ? p.fixed : std::span<const uint8_t>(p.live);
      hasher.Update(bytes.subspan(from, to - from));
    }
    at += size;
    if (at >= end) break;
  }
}

}  // namespace

Result<Digest> ApplyChunkInPlaceHashing(std::span<const uint8_t> payload, const Digest& base_hash,
                                        std::span<const ChunkPiece> pieces, HashAlgorithm algorithm,
                                        CodecScratch& scratch) {
  WC_ASSIGN_OR_RETURN(const PayloadHeader h, ParsePayloadHeader(payload));
  if (h.encoding != ChunkEncoding::kXor || !IsSparse(h.transform)) {
    WC_RETURN_IF_ERROR(ApplyChunkInPlace(payload, base_hash, pieces, scratch));
    return HashPieces(pieces, algorithm);
  }
  CodecScratch::State& st = ScratchAccess::Get(scratch);
  uint64_t chunk_size = 0;
  for (const ChunkPiece& p : pieces) chunk_size += p.size();
  if (chunk_size != h.chunk_size) {
    return FailedPrecondition("delta payload is for a chunk of " + std::to_string(h.chunk_size) +
                              " bytes, the live chunk holds " + std::to_string(chunk_size));
  }
  if (h.base_hash != base_hash) {
    return FailedPrecondition("delta payload applies to base chunk " + ToHex(h.base_hash) +
                              ", the live chunk is " + ToHex(base_hash));
  }
  const HashedChunk vouched =
      HashedChunk::FromVerifiedManifest(std::span<const uint8_t>(), base_hash, h.hash_algorithm);
  WC_ASSIGN_OR_RETURN(const Prepared p,
                      Prepare(payload, vouched, nullptr, nullptr, h.chunk_size, st,
                              /*check_base=*/false));
  SparseApplier applier(p.stream, {}, h.segments, ValuesOf(h.transform));
  PiecePlacement placement(pieces);
  Hasher hasher(algorithm);
  constexpr uint64_t kBlock = 64 << 10;
  for (uint64_t at = 0; at < h.chunk_size; at += kBlock) {
    const uint64_t end = std::min(h.chunk_size, at + kBlock);
    WC_RETURN_IF_ERROR(applier.ApplyInPlaceUntil(placement, end));
    HashPieceRange(pieces, at, end, hasher);
  }
  WC_RETURN_IF_ERROR(applier.Finish());
  if (placement.straddled())
    return Corrupt("delta payload changes an element across two live pieces");
  return hasher.Finish();
}

namespace {

// Prepare for a chunk that lies elsewhere (live pieces, device memory): the payload must be for a
// chunk of `chunk_size` bytes and, for xor, name `base_hash` as its base. Prepare checks sizes
// and the base against a HashedChunk; the base bytes are not at hand, so give it the vouched
// hash over an empty span and skip its size check.
Result<Prepared> PrepareElsewhere(std::span<const uint8_t> payload, const Digest& base_hash,
                                  uint64_t chunk_size, CodecScratch::State& st) {
  WC_ASSIGN_OR_RETURN(const PayloadHeader h, ParsePayloadHeader(payload));
  if (chunk_size != h.chunk_size) {
    return FailedPrecondition("delta payload is for a chunk of " + std::to_string(h.chunk_size) +
                              " bytes, the live chunk holds " + std::to_string(chunk_size));
  }
  if (h.encoding == ChunkEncoding::kXor && h.base_hash != base_hash) {
    return FailedPrecondition("delta payload applies to base chunk " + ToHex(h.base_hash) +
                              ", the live chunk is " + ToHex(base_hash));
  }
  const HashedChunk vouched =
      HashedChunk::FromVerifiedManifest(std::span<const uint8_t>(), base_hash, h.hash_algorithm);
  return Prepare(payload, vouched, nullptr, nullptr, h.chunk_size, st, /*check_base=*/false);
}

}  // namespace

Status ApplyChunkInPlace(std::span<const uint8_t> payload, const Digest& base_hash,
                         std::span<const ChunkPiece> pieces, CodecScratch& scratch) {
  CodecScratch::State& st = ScratchAccess::Get(scratch);
  uint64_t chunk_size = 0;
  for (const ChunkPiece& piece : pieces) chunk_size += piece.size();
  WC_ASSIGN_OR_RETURN(Prepared p, PrepareElsewhere(payload, base_hash, chunk_size, st));
  const PayloadHeader& h = p.h;
  const bool is_xor = h.encoding == ChunkEncoding::kXor;
  if (is_xor && IsSparse(h.transform)) {
    SparseApplier applier(p.stream, {}, h.segments, ValuesOf(h.transform));
    PiecePlacement placement(pieces);
    WC_RETURN_IF_ERROR(applier.ApplyInPlace(placement));
    if (placement.straddled()) {
      return Corrupt("delta payload changes an element across two live pieces");
    }
    return Status::Ok();
  }
  // Dense forms: gather (the base, for xor), undo the transform, write the live pieces back.
  st.result.resize(h.chunk_size);
  if (is_xor) {
    uint64_t at = 0;
    for (const ChunkPiece& piece : pieces) {
      const std::span<const uint8_t> src =
          piece.live.empty() ? piece.fixed : std::span<const uint8_t>(piece.live);
      if (!src.empty()) std::memcpy(st.result.data() + at, src.data(), src.size());
      at += src.size();
    }
    p.xor_base = st.result;
  }
  std::vector<uint8_t>& out = st.block;
  out.resize(h.chunk_size);
  switch (h.transform) {
    case Transform::kNone:
      if (p.stream.size() != h.chunk_size) return Corrupt("delta payload: stream length");
      for (uint64_t i = 0; i < h.chunk_size; ++i) {
        out[i] =
            p.xor_base.empty() ? p.stream[i] : static_cast<uint8_t>(p.stream[i] ^ p.xor_base[i]);
      }
      break;
    case Transform::kPlanes:
      WC_RETURN_IF_ERROR(PlanesInverse(p.stream, p.xor_base, h.segments, out));
      break;
    case Transform::kSparse:
    case Transform::kSparseDiff:
      // A full payload is never sparse (the encoder only makes sparse xor payloads).
      return Corrupt("delta payload: a sparse transform on a full chunk");
  }
  uint64_t at = 0;
  for (const ChunkPiece& piece : pieces) {
    if (!piece.live.empty()) std::memcpy(piece.live.data(), out.data() + at, piece.live.size());
    at += piece.size();
  }
  return Status::Ok();
}

Result<ChunkChanges> DecodeChanges(std::span<const uint8_t> payload, const Digest& base_hash,
                                   uint64_t chunk_size, CodecScratch& scratch) {
  CodecScratch::State& st = ScratchAccess::Get(scratch);
  WC_ASSIGN_OR_RETURN(Prepared p, PrepareElsewhere(payload, base_hash, chunk_size, st));
  const PayloadHeader& h = p.h;
  const bool is_xor = h.encoding == ChunkEncoding::kXor;
  ChunkChanges out;
  if (is_xor && IsSparse(h.transform)) {
    SparseApplier applier(p.stream, {}, h.segments, ValuesOf(h.transform));
    // Groups by (width, add): at most 8, found by a linear search in the order they appear.
    auto group = [&](uint8_t width, bool add) -> ElementChanges& {
      for (ElementChanges& g : out.groups) {
        if (g.width == width && g.add == add) return g;
      }
      ElementChanges& g = out.groups.emplace_back();
      g.width = width;
      g.add = add;
      return g;
    };
    auto put = [](ElementChanges& g, uint64_t offset, uint64_t value) {
      g.offsets.push_back(offset);
      for (uint8_t k = 0; k < g.width; ++k)
        g.values.push_back(static_cast<uint8_t>(value >> (8 * k)));
    };
    WC_RETURN_IF_ERROR(applier.ForEachChange([&](const SparseApplier::Change& c) {
      if (c.len == 1 || c.len == 2 || c.len == 4 || c.len == 8) {
        put(group(static_cast<uint8_t>(c.len), c.add), c.offset, c.value);
        return;
      }
      // The tail of an element a chunk edge cut (always a XOR): one byte at a time.
      for (uint64_t k = 0; k < c.len; ++k) put(group(1, false), c.offset + k, c.value >> (8 * k));
    }));
    return out;
  }
  out.kind = is_xor ? ChunkChanges::Kind::kXorBytes : ChunkChanges::Kind::kFull;
  out.bytes.resize(h.chunk_size);
  switch (h.transform) {
    case Transform::kNone:
      if (p.stream.size() != h.chunk_size) return Corrupt("delta payload: stream length");
      if (h.chunk_size != 0) std::memcpy(out.bytes.data(), p.stream.data(), h.chunk_size);
      break;
    case Transform::kPlanes:
      // Without a base the inverse gives the transformed bytes themselves: the XOR, or the chunk.
      WC_RETURN_IF_ERROR(PlanesInverse(p.stream, {}, h.segments, out.bytes));
      break;
    case Transform::kSparse:
    case Transform::kSparseDiff:
      return Corrupt("delta payload: a sparse transform on a full chunk");
  }
  return out;
}

Digest HashPieces(std::span<const ChunkPiece> pieces, HashAlgorithm algorithm) {
  Hasher hasher(algorithm);
  for (const ChunkPiece& p : pieces) {
    hasher.Update(p.live.empty() ? p.fixed : std::span<const uint8_t>(p.live));
  }
  return hasher.Finish();
}

std::string_view TransformName(Transform transform) {
  switch (transform) {
    case Transform::kNone:
      return "none";
    case Transform::kPlanes:
      return "planes";
    case Transform::kSparse:
      return "sparse";
    case Transform::kSparseDiff:
      return "sparse-diff";
  }
  return "?";
}

std::string_view CoderName(Coder coder) {
  switch (coder) {
    case Coder::kStored:
      return "stored";
    case Coder::kZstd:
      return "zstd";
    case Coder::kLz4:
      return "lz4";
  }
  return "?";
}

std::string_view EncodingName(ChunkEncoding encoding) {
  switch (encoding) {
    case ChunkEncoding::kFull:
      return "full";
    case ChunkEncoding::kSame:
      return "same";
    case ChunkEncoding::kXor:
      return "xor";
  }
  return "?";
}

}  // namespace weightcast::codec
