// Reversible transforms that turn a chunk (or the XOR of two chunks) into a byte stream that an
// entropy coder compresses well. They know the element widths inside the chunk (segments), so
// the bytes of equal significance sit together: for bf16 XORs the high (sign/exponent) bytes are
// almost all zero and compress to nearly nothing. The stream layouts are in docs/delta_format.md.
//
// All functions are pure and thread-safe. Inverse functions treat the stream as untrusted: every
// count, gap and length is checked, and they never read or write outside the given spans.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <weightcast/status.h>

#include "manifest/manifest.h"

namespace weightcast::codec {

// A run of bytes inside a chunk holding elements `width` bytes wide (1, 2, 4 or 8). Segments
// describe a chunk front to back; a segment's size need not be a multiple of its width (a chunk
// can cut a tensor): the trailing partial element is carried as raw tail bytes.
struct Segment {
  uint64_t size = 0;
  uint8_t width = 1;
  friend bool operator==(const Segment&, const Segment&) = default;
};

inline constexpr size_t kMaxSegments = 1u << 20;

// Element width used by the transforms for a dtype: its byte size, or 1 for sub-byte dtypes.
uint8_t ElementWidth(DType dtype);

// Segments covering [range.offset, range.end()) of a snapshot from the tensors that overlap it
// (Manifest::TensorsIn). Bytes outside every tensor (file headers) get width 1; neighbours with
// the same width merge. The result covers the range exactly.
std::vector<Segment> SegmentsForRange(std::span<const ManifestTensor* const> tensors,
                                      ByteRange range);

// Checks that segments cover exactly `chunk_size` bytes with valid widths, no empty segment and
// at most kMaxSegments of them.
Status ValidateSegments(std::span<const Segment> segments, uint64_t chunk_size);

// Byte planes: for each segment, plane 0 holds byte 0 of every element, plane 1 byte 1, ...; then
// the tail. Forward writes planes(target XOR base) (or planes(target) when base is empty) into
// `out`, which must be exactly target.size() bytes.
void PlanesForward(std::span<const uint8_t> target, std::span<const uint8_t> base,
                   std::span<const Segment> segments, std::span<uint8_t> out);

// Inverse: out = unplanes(stream) XOR base (or just unplanes(stream) when base is empty).
// stream, out (and base when given) must all be the same size as the segments cover.
Status PlanesInverse(std::span<const uint8_t> stream, std::span<const uint8_t> base,
                     std::span<const Segment> segments, std::span<uint8_t> out);

// Counts elements (and partial tail elements) in which target and base differ.
uint64_t CountChangedElements(std::span<const uint8_t> target, std::span<const uint8_t> base,
                              std::span<const Segment> segments);

// How the sparse form stores a changed element's value.
enum class SparseValues : uint8_t {
  kXor = 0,   // target XOR base
  kDiff = 1,  // zigzag(target - base) as w-byte integers: a move of k ulps costs ~log2(2k) bits,
              // where its XOR depends on the carry chain in the base
};

// Sparse: per segment, a varint count of changed elements, a gap-width byte (0: varint gaps,
// else 1/2/4/8-byte gaps as byte planes), the gaps between changed elements, their values as
// byte planes, then the XOR of the tail. Appends to `out`. When `section_ends` is given, appends
// the stream offset where each part (gap list, plane) ends, so a coder can model them apart.
// Returns the number of changed elements (partial tails excluded).
uint64_t SparseForward(std::span<const uint8_t> target, std::span<const uint8_t> base,
                       std::span<const Segment> segments, SparseValues values, bool varint_gaps,
                       std::vector<uint8_t>& out, std::vector<size_t>* section_ends = nullptr);

// Inverse: out = base with the recorded changes applied. Fails with kCorrupt on any
// inconsistency (overlong varint, bad gap width, index past the segment, trailing or missing
// bytes).
Status SparseInverse(std::span<const uint8_t> stream, std::span<const uint8_t> base,
                     std::span<const Segment> segments, SparseValues values,
                     std::span<uint8_t> out);

// LEB128 varints, exposed for tests and the payload header.
void PutVarint(uint64_t value, std::vector<uint8_t>& out);
// Reads a varint at `*pos` (a cursor), advancing it. Fails on truncation or more than 10 bytes.
Result<uint64_t> GetVarint(std::span<const uint8_t> in, size_t* pos);

}  // namespace weightcast::codec
