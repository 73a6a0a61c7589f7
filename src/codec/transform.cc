// The element transforms of codec/transform.h, forward and inverse: byte planes, the sparse scan
// and the sparse applier that patches a chunk (or live tensors) in place. Past 800 lines because
// each transform's writer and its reader of untrusted bytes sit side by side, so a change to one
// is read against the other (the stream layouts are docs/delta_format.md).
#include "codec/transform.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

namespace weightcast::codec {
namespace {

static_assert(std::endian::native == std::endian::little,
              "byte planes index element bytes by shifting a little-endian load");

template <int W>
struct Word;
template <>
struct Word<1> {
  using T = uint8_t;
};
template <>
struct Word<2> {
  using T = uint16_t;
};
template <>
struct Word<4> {
  using T = uint32_t;
};
template <>
struct Word<8> {
  using T = uint64_t;
};

template <int W>
inline typename Word<W>::T Load(const uint8_t* p) {
  typename Word<W>::T v;
  std::memcpy(&v, p, W);
  return v;
}

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Fast varint read for the hot loop: `end` bounds the read; returns false on truncation/overlong.
inline bool ReadVarint(const uint8_t* data, size_t size, size_t* pos, uint64_t* value) {
  uint64_t result = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (*pos >= size) return false;
    const uint8_t byte = data[(*pos)++];
    if (shift == 63 && byte > 1) return false;  // would overflow 64 bits
    result |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      *value = result;
      return true;
    }
  }
  return false;
}

template <int W, bool kXor>
void PlanesForwardSeg(const uint8_t* t, const uint8_t* b, uint64_t n, uint8_t* out) {
  if constexpr (W == 1) {
    for (uint64_t i = 0; i < n; ++i) out[i] = kXor ? (t[i] ^ b[i]) : t[i];
  } else {
    for (uint64_t i = 0; i < n; ++i) {
      auto v = Load<W>(t + i * W);
      if constexpr (kXor) v ^= Load<W>(b + i * W);
      for (int k = 0; k < W; ++k) out[k * n + i] = static_cast<uint8_t>(v >> (8 * k));
    }
  }
}

template <int W, bool kXor>
void PlanesInverseSeg(const uint8_t* in, const uint8_t* b, uint64_t n, uint8_t* out) {
  if constexpr (W == 1) {
    for (uint64_t i = 0; i < n; ++i) out[i] = kXor ? (in[i] ^ b[i]) : in[i];
  } else {
    using T = typename Word<W>::T;
    for (uint64_t i = 0; i < n; ++i) {
      T v = 0;
      for (int k = 0; k < W; ++k) v |= static_cast<T>(static_cast<T>(in[k * n + i]) << (8 * k));
      if constexpr (kXor) v ^= Load<W>(b + i * W);
      std::memcpy(out + i * W, &v, W);
    }
  }
}

template <bool kXor>
void PlanesForwardDispatch(int w, const uint8_t* t, const uint8_t* b, uint64_t n, uint8_t* out) {
  switch (w) {
    case 1:
      PlanesForwardSeg<1, kXor>(t, b, n, out);
      break;
    case 2:
      PlanesForwardSeg<2, kXor>(t, b, n, out);
      break;
    case 4:
      PlanesForwardSeg<4, kXor>(t, b, n, out);
      break;
    default:
      PlanesForwardSeg<8, kXor>(t, b, n, out);
      break;
  }
}

template <bool kXor>
void PlanesInverseDispatch(int w, const uint8_t* in, const uint8_t* b, uint64_t n, uint8_t* out) {
  switch (w) {
    case 1:
      PlanesInverseSeg<1, kXor>(in, b, n, out);
      break;
    case 2:
      PlanesInverseSeg<2, kXor>(in, b, n, out);
      break;
    case 4:
      PlanesInverseSeg<4, kXor>(in, b, n, out);
      break;
    default:
      PlanesInverseSeg<8, kXor>(in, b, n, out);
      break;
  }
}

// The W-byte lanes of `d` that are not zero, as one set bit inside each such lane (the lane of
// bit k is k / (8 W)).
template <int W>
inline uint64_t NonzeroLanes(uint64_t d) {
  if constexpr (W == 8) {
    return d != 0 ? 1 : 0;
  } else {
    // Fold each lane's bytes into its low byte, then carry a nonzero low byte into bit 8 (bit 7
    // for bytes, where the high bit is kept apart so the add cannot carry across lanes).
    if constexpr (W == 1) {
      constexpr uint64_t kLow7 = 0x7f7f7f7f7f7f7f7full;
      return (((d & kLow7) + kLow7) | d) & ~kLow7;
    } else {
      if constexpr (W == 4) d |= d >> 16;
      d |= d >> 8;
      constexpr uint64_t kLowByte = W == 2 ? 0x00ff00ff00ff00ffull : 0x000000ff000000ffull;
      return ((d & kLowByte) + kLowByte) & ~kLowByte & (kLowByte << 1);
    }
  }
}

// Calls fn(i) for every element index i in [0, n) where t and b differ, in increasing order.
// Skips equal 32-byte blocks with word compares, which is where a sparse chunk spends its time.
// With `feed`, each piece of the target is hashed just before it is scanned.
template <int W, typename Fn>
void ForEachChanged(const uint8_t* t, const uint8_t* b, uint64_t n, Fn&& fn,
                    HashFeed* feed = nullptr) {
  const uint64_t bytes = n * W;
  uint64_t pos = 0;
  uint64_t fed = 0;
  while (pos + 32 <= bytes) {
    if (feed != nullptr && pos >= fed) {
      fed = std::min(bytes, pos + HashFeed::kPiece);
      feed->Upto(t + fed);
    }
    const uint64_t x = (Load64(t + pos) ^ Load64(b + pos)) |
                       (Load64(t + pos + 8) ^ Load64(b + pos + 8)) |
                       (Load64(t + pos + 16) ^ Load64(b + pos + 16)) |
                       (Load64(t + pos + 24) ^ Load64(b + pos + 24));
    if (x != 0) {
      for (uint64_t w = pos; w < pos + 32; w += 8) {
        // One bit per changed element, visited lowest first: no branch per element, which at a
        // few percent changed would mispredict about once per change.
        for (uint64_t lanes = NonzeroLanes<W>(Load64(t + w) ^ Load64(b + w)); lanes != 0;
             lanes &= lanes - 1) {
          fn(w / W + static_cast<uint64_t>(std::countr_zero(lanes)) / (8 * W));
        }
      }
    }
    pos += 32;
  }
  for (uint64_t i = pos / W; i < n; ++i) {
    if (std::memcmp(t + i * W, b + i * W, W) != 0) fn(i);
  }
}

template <int W>
inline uint64_t ZigZag(uint64_t d) {
  constexpr int kBits = 8 * W;
  const uint64_t mask = kBits == 64 ? ~0ull : ((1ull << kBits) - 1);
  d &= mask;
  const uint64_t sign = (d >> (kBits - 1)) & 1;
  return ((d << 1) & mask) ^ (sign ? mask : 0);
}

template <int W>
inline uint64_t UnZigZag(uint64_t z) {
  constexpr int kBits = 8 * W;
  const uint64_t mask = kBits == 64 ? ~0ull : ((1ull << kBits) - 1);
  return ((z >> 1) ^ ((z & 1) ? mask : 0)) & mask;
}

uint8_t GapWidthFor(uint64_t max_gap) {
  if (max_gap < (1ull << 8)) return 1;
  if (max_gap < (1ull << 16)) return 2;
  if (max_gap < (1ull << 32)) return 4;
  return 8;
}

// A plane of `count` byte values, stored with the fewest bits per value that hold its largest
// value (0: all zero, nothing stored; 1, 2, 4: packed LSB first; 8: raw). Packing lets the
// entropy coder's Huffman stage spend under one bit per value on near-constant planes (the high
// bytes of gaps and of small differences), which it cannot do for single bytes.
void PutPlane(const uint8_t* plane, uint64_t count, std::vector<uint8_t>& out) {
  uint8_t max = 0;
  for (uint64_t j = 0; j < count; ++j) max |= plane[j];
  const uint8_t bits = max == 0 ? 0 : max < 2 ? 1 : max < 4 ? 2 : max < 16 ? 4 : 8;
  out.push_back(bits);
  if (bits == 0) return;
  const size_t at = out.size();
  out.resize(at + (count * bits + 7) / 8, 0);
  uint8_t* o = out.data() + at;
  if (bits == 8) {
    std::memcpy(o, plane, count);
    return;
  }
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t bit = j * bits;
    o[bit / 8] |= static_cast<uint8_t>(plane[j] << (bit % 8));
  }
}

// Per-thread working memory of the sparse transform, kept from chunk to chunk: a chunk at a few
// percent changed has thousands of changes, and vectors grown by push_back per chunk reallocated
// a dozen times each. The arrays hold a segment's most changes (one per element), left
// uninitialized: a large allocation is mapped lazily, so the pages touched are the changes'
// (a 64 MiB chunk at 1% touches 1% of them). A thread gives back arrays past kKeepElements
// after each call (ReleaseLargeScratch), so large chunks do not pin memory in every thread.
struct SparseScratch {
  static constexpr uint64_t kKeepElements = 512u << 10;  // 8 MiB of arrays
  uint64_t elements = 0;
  std::unique_ptr<uint64_t[]> gaps;   // one per element
  std::unique_ptr<uint8_t[]> planes;  // up to 8 value planes of one byte per element
  std::unique_ptr<uint8_t[]> gap_plane;

  void Hold(uint64_t n) {
    if (n <= elements) return;
    gaps.reset(new uint64_t[n]);
    planes.reset(new uint8_t[n * 8]);
    gap_plane.reset(new uint8_t[n]);
    elements = n;
  }
};

SparseScratch& ThreadSparseScratch() {
  thread_local SparseScratch scratch;
  return scratch;
}

void ReleaseLargeScratch(SparseScratch& s) {
  if (s.elements > SparseScratch::kKeepElements) s = SparseScratch{};
}

// Returns the number of changed elements.
template <int W, bool kDiff>
uint64_t SparseForwardSeg(const uint8_t* t, const uint8_t* b, uint64_t n, bool varint_gaps,
                          std::vector<uint8_t>& out, SparseScratch& scratch,
                          std::vector<size_t>* ends, HashFeed* feed) {
  auto cut = [&] {
    if (ends) ends->push_back(out.size());
  };
  // One pass: each change's gap is kept and its value's bytes go straight into W planes of
  // stride n (the most changes a segment can have), so no pass transposes them afterwards.
  scratch.Hold(n);
  uint64_t* const gaps = scratch.gaps.get();
  uint8_t* const value_planes = scratch.planes.get();
  uint64_t count = 0;
  uint64_t next = 0;
  uint64_t max_gap = 0;
  // The value is taken while the scan has its cache line: reading it back later from a chunk
  // that no longer fits in cache costs a miss per changed element.
  ForEachChanged<W>(
      t, b, n,
      [&](uint64_t i) {
        const uint64_t tv = Load<W>(t + i * W);
        const uint64_t bv = Load<W>(b + i * W);
        const uint64_t v = kDiff ? ZigZag<W>(tv - bv) : (tv ^ bv);
        const uint64_t g = i - next;
        gaps[count] = g;
        max_gap = std::max(max_gap, g);
        next = i + 1;
        for (int k = 0; k < W; ++k)
          value_planes[k * n + count] = static_cast<uint8_t>(v >> (8 * k));
        ++count;
      },
      feed);
  PutVarint(count, out);
  const uint8_t gw = varint_gaps ? 0 : GapWidthFor(max_gap);
  out.push_back(gw);
  if (gw == 0) {
    for (uint64_t j = 0; j < count; ++j) PutVarint(gaps[j], out);
    cut();
  } else {
    uint8_t* const gap_plane = scratch.gap_plane.get();
    for (int k = 0; k < gw; ++k) {
      for (uint64_t j = 0; j < count; ++j) gap_plane[j] = static_cast<uint8_t>(gaps[j] >> (8 * k));
      PutPlane(gap_plane, count, out);
      cut();
    }
  }
  for (int k = 0; k < W; ++k) {
    PutPlane(value_planes + k * n, count, out);
    cut();
  }
  return count;
}

}  // namespace

uint8_t ElementWidth(DType dtype) {
  switch (dtype) {
    case DType::kU16:
    case DType::kI16:
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kU32:
    case DType::kI32:
    case DType::kF32:
      return 4;
    case DType::kU64:
    case DType::kI64:
    case DType::kF64:
      return 8;
    default:
      return 1;  // 8-bit and sub-byte dtypes, bool
  }
}

std::vector<Segment> SegmentsForRange(std::span<const ManifestTensor* const> tensors,
                                      ByteRange range) {
  std::vector<Segment> out;
  auto add = [&out](uint64_t size, uint8_t width) {
    if (size == 0) return;
    // Merging keeps the element phase only when the earlier segment ends on an element boundary.
    if (!out.empty() && out.back().width == width && out.back().size % width == 0) {
      out.back().size += size;
    } else {
      out.push_back({size, width});
    }
  };
  uint64_t cursor = range.offset;
  for (const ManifestTensor* t : tensors) {
    const uint64_t begin = std::max({t->offset, range.offset, cursor});
    const uint64_t end = std::min(t->offset + t->size, range.end());
    if (begin >= end) continue;
    add(begin - cursor, 1);
    const uint8_t width = ElementWidth(t->dtype);
    // A chunk that starts inside an element carries the rest of that element as plain bytes.
    const uint64_t phase = (begin - t->offset) % width;
    const uint64_t lead = std::min<uint64_t>(phase == 0 ? 0 : width - phase, end - begin);
    add(lead, 1);
    add(end - begin - lead, width);
    cursor = end;
  }
  add(range.end() - cursor, 1);
  return out;
}

Status ValidateSegments(std::span<const Segment> segments, uint64_t chunk_size) {
  if (segments.size() > kMaxSegments) {
    return Corrupt("segment count " + std::to_string(segments.size()) + " exceeds the limit");
  }
  uint64_t total = 0;
  for (const Segment& s : segments) {
    if (s.width != 1 && s.width != 2 && s.width != 4 && s.width != 8) {
      return Corrupt("segment element width " + std::to_string(s.width) + " is not 1, 2, 4 or 8");
    }
    if (s.size == 0) return Corrupt("empty segment");
    if (s.size > chunk_size - total) {
      return Corrupt("segments cover more than the chunk (" + std::to_string(chunk_size) +
                     " bytes)");
    }
    total += s.size;
  }
  if (total != chunk_size) {
    return Corrupt("segments cover " + std::to_string(total) + " of " + std::to_string(chunk_size) +
                   " bytes");
  }
  return Status::Ok();
}

void PlanesForward(std::span<const uint8_t> target, std::span<const uint8_t> base,
                   std::span<const Segment> segments, std::span<uint8_t> out) {
  const bool do_xor = !base.empty();
  uint64_t off = 0;
  for (const Segment& s : segments) {
    const uint64_t n = s.size / s.width;
    const uint8_t* t = target.data() + off;
    const uint8_t* b = do_xor ? base.data() + off : nullptr;
    uint8_t* o = out.data() + off;
    if (do_xor) {
      PlanesForwardDispatch<true>(s.width, t, b, n, o);
    } else {
      PlanesForwardDispatch<false>(s.width, t, b, n, o);
    }
    for (uint64_t k = n * s.width; k < s.size; ++k) o[k] = do_xor ? (t[k] ^ b[k]) : t[k];
    off += s.size;
  }
}

Status PlanesInverse(std::span<const uint8_t> stream, std::span<const uint8_t> base,
                     std::span<const Segment> segments, std::span<uint8_t> out) {
  const bool do_xor = !base.empty();
  uint64_t total = 0;
  for (const Segment& s : segments) total += s.size;
  if (stream.size() != total || out.size() != total || (do_xor && base.size() != total)) {
    return Corrupt("plane stream of " + std::to_string(stream.size()) + " bytes for a chunk of " +
                   std::to_string(total));
  }
  uint64_t off = 0;
  for (const Segment& s : segments) {
    const uint64_t n = s.size / s.width;
    const uint8_t* in = stream.data() + off;
    const uint8_t* b = do_xor ? base.data() + off : nullptr;
    uint8_t* o = out.data() + off;
    if (do_xor) {
      PlanesInverseDispatch<true>(s.width, in, b, n, o);
    } else {
      PlanesInverseDispatch<false>(s.width, in, b, n, o);
    }
    for (uint64_t k = n * s.width; k < s.size; ++k) o[k] = do_xor ? (in[k] ^ b[k]) : in[k];
    off += s.size;
  }
  return Status::Ok();
}

uint64_t CountChangedElements(std::span<const uint8_t> target, std::span<const uint8_t> base,
                              std::span<const Segment> segments) {
  uint64_t count = 0;
  uint64_t off = 0;
  auto inc = [&count](uint64_t) { ++count; };
  for (const Segment& s : segments) {
    const uint64_t n = s.size / s.width;
    const uint8_t* t = target.data() + off;
    const uint8_t* b = base.data() + off;
    switch (s.width) {
      case 1:
        ForEachChanged<1>(t, b, n, inc);
        break;
      case 2:
        ForEachChanged<2>(t, b, n, inc);
        break;
      case 4:
        ForEachChanged<4>(t, b, n, inc);
        break;
      default:
        ForEachChanged<8>(t, b, n, inc);
        break;
    }
    const uint64_t tail = s.size - n * s.width;
    if (tail != 0 && std::memcmp(t + n * s.width, b + n * s.width, tail) != 0) ++count;
    off += s.size;
  }
  return count;
}

uint64_t SparseForward(std::span<const uint8_t> target, std::span<const uint8_t> base,
                       std::span<const Segment> segments, SparseValues values, bool varint_gaps,
                       std::vector<uint8_t>& out, std::vector<size_t>* section_ends,
                       HashFeed* feed) {
  SparseScratch& scratch = ThreadSparseScratch();
  uint64_t changed = 0;
  uint64_t off = 0;
  const bool diff = values == SparseValues::kDiff;
  for (const Segment& s : segments) {
    const uint64_t n = s.size / s.width;
    const uint8_t* t = target.data() + off;
    const uint8_t* b = base.data() + off;
    switch (s.width * 2 + (diff ? 1 : 0)) {
      case 2:
        changed +=
            SparseForwardSeg<1, false>(t, b, n, varint_gaps, out, scratch, section_ends, feed);
        break;
      case 3:
        changed +=
            SparseForwardSeg<1, true>(t, b, n, varint_gaps, out, scratch, section_ends, feed);
        break;
      case 4:
        changed +=
            SparseForwardSeg<2, false>(t, b, n, varint_gaps, out, scratch, section_ends, feed);
        break;
      case 5:
        changed +=
            SparseForwardSeg<2, true>(t, b, n, varint_gaps, out, scratch, section_ends, feed);
        break;
      case 8:
        changed +=
            SparseForwardSeg<4, false>(t, b, n, varint_gaps, out, scratch, section_ends, feed);
        break;
      case 9:
        changed +=
            SparseForwardSeg<4, true>(t, b, n, varint_gaps, out, scratch, section_ends, feed);
        break;
      case 16:
        changed +=
            SparseForwardSeg<8, false>(t, b, n, varint_gaps, out, scratch, section_ends, feed);
        break;
      default:
        changed +=
            SparseForwardSeg<8, true>(t, b, n, varint_gaps, out, scratch, section_ends, feed);
        break;
    }
    for (uint64_t k = n * s.width; k < s.size; ++k) out.push_back(t[k] ^ b[k]);
    off += s.size;
  }
  ReleaseLargeScratch(scratch);
  return changed;
}

Status SparseInverse(std::span<const uint8_t> stream, std::span<const uint8_t> base,
                     std::span<const Segment> segments, SparseValues values,
                     std::span<uint8_t> out) {
  uint64_t total = 0;
  for (const Segment& s : segments) total += s.size;
  if (out.size() != total || base.size() != total) {
    return Internal("sparse inverse: buffers do not match the segments");
  }
  SparseApplier applier(stream, base, segments, values);
  WC_RETURN_IF_ERROR(applier.Fill(0, out));
  return applier.Finish();
}

SparseApplier::SparseApplier(std::span<const uint8_t> stream, std::span<const uint8_t> base,
                             std::span<const Segment> segments, SparseValues values)
    : data_(stream.data()),
      size_(stream.size()),
      base_(base),
      segments_(segments),
      diff_(values == SparseValues::kDiff) {}

bool SparseApplier::ReadPlaneHeader(Plane* plane, uint64_t count) {
  if (pos_ >= size_) return false;
  const uint8_t bits = data_[pos_++];
  if (bits != 0 && bits != 1 && bits != 2 && bits != 4 && bits != 8) return false;
  const uint64_t bytes = (count * bits + 7) / 8;
  if (bytes > size_ - pos_) return false;
  plane->data = data_ + pos_;
  plane->bits = bits;
  pos_ += bytes;
  return true;
}

Status SparseApplier::StartSegment() {
  const Segment& s = segments_[seg_];
  width_ = s.width;
  n_ = s.size / s.width;
  if (!ReadVarint(data_, size_, &pos_, &count_) || count_ > n_) {
    return Corrupt("sparse stream: bad changed-element count at byte " + std::to_string(pos_));
  }
  if (pos_ >= size_) return Corrupt("sparse stream: missing gap width");
  gap_width_ = data_[pos_++];
  if (gap_width_ != 0 && gap_width_ != 1 && gap_width_ != 2 && gap_width_ != 4 && gap_width_ != 8) {
    return Corrupt("sparse stream: bad gap width " + std::to_string(gap_width_));
  }
  // Every changed element costs at least one stream bit.
  if (count_ > 8 * (size_ - pos_)) return Corrupt("sparse stream: count beyond the stream");
  if (gap_width_ == 0) {
    gap_pos_ = pos_;
    uint64_t gap = 0;
    for (uint64_t j = 0; j < count_; ++j) {
      if (!ReadVarint(data_, size_, &pos_, &gap)) {
        return Corrupt("sparse stream: truncated gap list at byte " + std::to_string(pos_));
      }
    }
  } else {
    for (int k = 0; k < gap_width_; ++k) {
      if (!ReadPlaneHeader(&gap_planes_[k], count_)) {
        return Corrupt("sparse stream: bad gap plane at byte " + std::to_string(pos_));
      }
    }
  }
  for (int k = 0; k < width_; ++k) {
    if (!ReadPlaneHeader(&value_planes_[k], count_)) {
      return Corrupt("sparse stream: bad value plane at byte " + std::to_string(pos_));
    }
  }
  tail_len_ = s.size - n_ * s.width;
  if (tail_len_ > size_ - pos_) return Corrupt("sparse stream: truncated tail");
  tail_pos_ = pos_;
  pos_ += tail_len_;
  j_ = 0;
  next_ = 0;
  tail_done_ = false;
  in_segment_ = true;
  return Status::Ok();
}

namespace {

// Value j of a packed plane (see PutPlane); the plane's length was checked when it was parsed.
inline uint64_t PlaneValue(const uint8_t* data, uint8_t bits, uint64_t j) {
  switch (bits) {
    case 0:
      return 0;
    case 8:
      return data[j];
    default: {
      const uint64_t bit = j * bits;
      return (data[bit / 8] >> (bit % 8)) & ((1u << bits) - 1);
    }
  }
}

inline uint64_t LoadLow(const uint8_t* p, uint64_t len) {
  uint64_t v = 0;
  std::memcpy(&v, p, len);  // little-endian: the low `len` bytes
  return v;
}

}  // namespace

inline bool SparseApplier::NextIndex(uint64_t* index, size_t* gap_pos) const {
  uint64_t gap = 0;
  *gap_pos = gap_pos_;
  if (gap_width_ == 0) {
    ReadVarint(data_, size_, gap_pos, &gap);  // cannot fail: read once in StartSegment
  } else {
    for (int k = 0; k < gap_width_; ++k) {
      gap |= PlaneValue(gap_planes_[k].data, gap_planes_[k].bits, j_) << (8 * k);
    }
  }
  if (gap >= n_ - next_) return false;
  *index = next_ + gap;
  return true;
}

Status SparseApplier::BeyondSegment() const {
  return Corrupt("sparse stream: element index beyond the segment of " + std::to_string(n_));
}

Status SparseApplier::Advance() {
  while (true) {
    if (in_segment_ && j_ < count_) {
      uint64_t i = 0;
      if (!NextIndex(&i, &gap_pos_)) return BeyondSegment();
      next_ = i + 1;
      uint64_t v = 0;
      for (int k = 0; k < width_; ++k) {
        v |= PlaneValue(value_planes_[k].data, value_planes_[k].bits, j_) << (8 * k);
      }
      ++j_;
      off_ = seg_off_ + i * static_cast<uint64_t>(width_);
      len_ = static_cast<uint64_t>(width_);
      raw_ = v;
      raw_is_diff_ = diff_;
      pending_ = true;
      return Status::Ok();
    }
    if (in_segment_ && !tail_done_) {
      tail_done_ = true;
      if (tail_len_ != 0) {
        off_ = seg_off_ + n_ * static_cast<uint64_t>(width_);
        len_ = tail_len_;
        raw_ = LoadLow(data_ + tail_pos_, len_);
        raw_is_diff_ = false;  // tails are always XORs
        pending_ = true;
        return Status::Ok();
      }
    }
    if (in_segment_) {
      seg_off_ += segments_[seg_].size;
      ++seg_;
      in_segment_ = false;
    }
    if (seg_ == segments_.size()) {
      done_ = true;
      return Status::Ok();
    }
    WC_RETURN_IF_ERROR(StartSegment());
  }
}

Status SparseApplier::Fill(uint64_t offset, std::span<uint8_t> dst) {
  if (offset > base_.size() || dst.size() > base_.size() - offset) {
    return Internal("sparse applier: block outside the chunk");
  }
  if (dst.empty()) return Status::Ok();
  std::memcpy(dst.data(), base_.data() + offset, dst.size());
  const uint64_t end = offset + dst.size();
  while (true) {
    if (!pending_ && in_segment_ && j_ < count_) {
      // dst holds the base's bytes of the block: the changes inside it are patched there.
      const uint64_t before = j_;
      WC_RETURN_IF_ERROR(ApplyRun(dst.data(), offset, end));
      if (j_ != before) continue;
    }
    if (!pending_) {
      if (done_) break;
      WC_RETURN_IF_ERROR(Advance());
      if (!pending_) break;
      value_ = Combine(LoadLow(base_.data() + off_, len_));
    }
    if (off_ >= end) break;
    if (off_ >= offset && off_ + len_ <= end) {
      std::memcpy(dst.data() + (off_ - offset), &value_, len_);
      pending_ = false;
      continue;
    }
    // An element cut by the block edge: write the part inside; the rest goes to the next block.
    for (uint64_t x = std::max(off_, offset); x < std::min(off_ + len_, end); ++x) {
      dst[x - offset] = static_cast<uint8_t>(value_ >> (8 * (x - off_)));
    }
    if (off_ + len_ > end) break;
    pending_ = false;
  }
  return Status::Ok();
}

uint64_t SparseApplier::DiffOf(uint64_t raw, uint64_t len) {
  const uint64_t mask = len == 8 ? ~0ull : (1ull << (8 * len)) - 1;
  return ((raw >> 1) ^ ((raw & 1) ? mask : 0)) & mask;  // un-zigzag
}

uint64_t SparseApplier::Combine(uint64_t base) const {
  if (!raw_is_diff_) return base ^ raw_;
  const uint64_t mask = len_ == 8 ? ~0ull : (1ull << (8 * len_)) - 1;
  return (base + DiffOf(raw_, len_)) & mask;
}

namespace {

// Loads and stores of one element: fixed sizes compile to single moves (a variable-length
// memcpy is a libc call per changed element, which dominated a sparse apply).
inline uint64_t LoadElement(const uint8_t* p, uint64_t len) {
  switch (len) {
    case 1:
      return *p;
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case 8: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
    default:
      return LoadLow(p, len);
  }
}

inline void StoreElement(uint8_t* p, uint64_t len, uint64_t v) {
  switch (len) {
    case 1:
      *p = static_cast<uint8_t>(v);
      return;
    case 2: {
      const auto x = static_cast<uint16_t>(v);
      std::memcpy(p, &x, 2);
      return;
    }
    case 4: {
      const auto x = static_cast<uint32_t>(v);
      std::memcpy(p, &x, 4);
      return;
    }
    case 8:
      std::memcpy(p, &v, 8);
      return;
    default:
      std::memcpy(p, &v, len);
  }
}

}  // namespace

template <int W>
Status SparseApplier::ApplyRunOf(uint8_t* run, uint64_t run_begin, uint64_t limit) {
  using Element = std::conditional_t<
      W == 1, uint8_t,
      std::conditional_t<W == 2, uint16_t, std::conditional_t<W == 4, uint32_t, uint64_t>>>;
  constexpr uint64_t kMask = W == 8 ? ~0ull : (1ull << (8 * W)) - 1;
  const Plane* const values = value_planes_;
  while (j_ < count_) {
    // Decoded without consuming it, so a change outside the run stays for Advance.
    uint64_t i = 0;
    size_t gap_pos = 0;
    if (!NextIndex(&i, &gap_pos)) return BeyondSegment();
    const uint64_t off = seg_off_ + i * W;
    if (off < run_begin || off + W > limit) break;
    uint64_t v = 0;
    for (int k = 0; k < W; ++k) v |= PlaneValue(values[k].data, values[k].bits, j_) << (8 * k);
    uint8_t* p = run + (off - run_begin);
    Element e;
    std::memcpy(&e, p, W);
    const uint64_t base = e;
    const uint64_t diff = ((v >> 1) ^ ((v & 1) ? kMask : 0)) & kMask;  // DiffOf, inlined
    const uint64_t out = diff_ ? (base + diff) & kMask : base ^ v;
    e = static_cast<Element>(out);
    std::memcpy(p, &e, W);
    gap_pos_ = gap_pos;
    next_ = i + 1;
    ++j_;
  }
  return Status::Ok();
}

Status SparseApplier::ApplyRun(uint8_t* run, uint64_t run_begin, uint64_t limit) {
  switch (width_) {
    case 1:
      return ApplyRunOf<1>(run, run_begin, limit);
    case 2:
      return ApplyRunOf<2>(run, run_begin, limit);
    case 4:
      return ApplyRunOf<4>(run, run_begin, limit);
    default:
      return ApplyRunOf<8>(run, run_begin, limit);
  }
}

Status SparseApplier::ApplyInPlaceUntil(Placement& at, uint64_t end) {
  if (!base_.empty()) return Internal("sparse applier: ApplyInPlace wants an empty base");
  while (true) {
    if (!pending_ && in_segment_ && j_ < count_) {
      // The changes that fall in the run of held bytes where this segment's next one can be.
      uint64_t run_begin = 0;
      uint64_t run_end = 0;
      uint8_t* run = at.Run(seg_off_ + next_ * static_cast<uint64_t>(width_), &run_begin, &run_end);
      if (run != nullptr) {
        const uint64_t before = j_;
        WC_RETURN_IF_ERROR(ApplyRun(run, run_begin, std::min(run_end, end)));
        if (j_ != before) continue;
      }
    }
    if (!pending_) {
      if (done_) break;
      WC_RETURN_IF_ERROR(Advance());
      if (!pending_) break;
    }
    if (off_ >= end) break;  // stays pending for the next call
    uint8_t* p = at.At(off_, len_);
    if (p != nullptr) StoreElement(p, len_, Combine(LoadElement(p, len_)));
    pending_ = false;
  }
  return Status::Ok();
}

Status SparseApplier::ApplyInPlace(Placement& at) {
  WC_RETURN_IF_ERROR(ApplyInPlaceUntil(at, UINT64_MAX));
  return Finish();
}

Status SparseApplier::Finish() {
  while (!done_) {
    if (pending_) return Internal("sparse applier: the chunk was not filled to its end");
    WC_RETURN_IF_ERROR(Advance());
  }
  if (pending_) return Internal("sparse applier: the chunk was not filled to its end");
  if (pos_ != size_) {
    return Corrupt("sparse stream: " + std::to_string(size_ - pos_) + " trailing bytes");
  }
  return Status::Ok();
}

void HashFeed::UptoOffset(uint64_t end) {
  end = std::min<uint64_t>(end, chunk_.size());
  while (done_ < end) {
    const uint64_t n = std::min<uint64_t>(kPiece, chunk_.size() - done_);
    // As UpdateStreaming does: fetch the next piece while this one is hashed, or SHA-NI waits
    // on memory.
    const uint64_t next_end = std::min<uint64_t>(chunk_.size(), done_ + n + kPiece);
    for (uint64_t q = done_ + n; q < next_end; q += 64) __builtin_prefetch(chunk_.data() + q);
    hasher_.Update(chunk_.subspan(done_, n));
    if (fast_ != nullptr) fast_->Update(chunk_.subspan(done_, n));
    done_ += n;
  }
}

Digest HashFeed::Finish(Digest* fast) {
  UptoOffset(chunk_.size());
  if (fast != nullptr && fast_ != nullptr) *fast = fast_->Finish();
  return hasher_.Finish();
}

void PutVarint(uint64_t value, std::vector<uint8_t>& out) {
  while (value >= 0x80) {
    out.push_back(static_cast<uint8_t>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<uint8_t>(value));
}

Result<uint64_t> GetVarint(std::span<const uint8_t> in, size_t* pos) {
  uint64_t value = 0;
  if (!ReadVarint(in.data(), in.size(), pos, &value)) {
    return Corrupt("truncated or overlong varint at byte " + std::to_string(*pos));
  }
  return value;
}

}  // namespace weightcast::codec
