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

#include "hash/digest.h"
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

// Hashes a chunk front to back while a transform reads it, a piece at a time just before the
// transform reaches it, so the target crosses the memory bus once instead of twice.
class HashFeed {
 public:
  // With `fast` (an XXH3-128 hasher), every piece is fed to it too, while it is in cache.
  HashFeed(Hasher& hasher, std::span<const uint8_t> chunk, Hasher* fast = nullptr)
      : hasher_(hasher), fast_(fast), chunk_(chunk) {}
  // Hashes whole pieces until every byte before `p` (a pointer into the chunk) is hashed.
  void Upto(const uint8_t* p) { UptoOffset(static_cast<uint64_t>(p - chunk_.data())); }
  void UptoOffset(uint64_t end);
  // Hashes the rest and returns the digest (and the fast hasher's in `*fast`, when both given).
  Digest Finish(Digest* fast = nullptr);

  static constexpr uint64_t kPiece = 4 << 10;

 private:
  Hasher& hasher_;
  Hasher* fast_ = nullptr;
  std::span<const uint8_t> chunk_;
  uint64_t done_ = 0;
};

// Sparse: per segment, a varint count of changed elements, a gap-width byte (0: varint gaps,
// else 1/2/4/8-byte gaps as byte planes), the gaps between changed elements, their values as
// byte planes, then the XOR of the tail. Appends to `out`. When `section_ends` is given, appends
// the stream offset where each part (gap list, plane) ends, so a coder can model them apart.
// Returns the number of changed elements (partial tails excluded). With `feed`, the target is
// hashed as it is scanned (the caller finishes the feed).
uint64_t SparseForward(std::span<const uint8_t> target, std::span<const uint8_t> base,
                       std::span<const Segment> segments, SparseValues values, bool varint_gaps,
                       std::vector<uint8_t>& out, std::vector<size_t>* section_ends = nullptr,
                       HashFeed* feed = nullptr);

// Inverse: out = base with the recorded changes applied. Fails with kCorrupt on any
// inconsistency (overlong varint, bad gap width, index past the segment, trailing or missing
// bytes).
Status SparseInverse(std::span<const uint8_t> stream, std::span<const uint8_t> base,
                     std::span<const Segment> segments, SparseValues values,
                     std::span<uint8_t> out);

// Applies a sparse stream to a base block by block, so a decoder can patch a piece of the chunk
// and hash it while it is still in cache, without a copy of the whole base or unpacked planes:
// the only memory it needs is the stream. Reads gaps and values straight from the packed planes.
// The stream is untrusted: every length is checked when its segment is reached and every gap when
// it is used; errors are kCorrupt. Not thread-safe; the spans must outlive it.
class SparseApplier {
 public:
  SparseApplier(std::span<const uint8_t> stream, std::span<const uint8_t> base,
                std::span<const Segment> segments, SparseValues values);

  // Writes bytes [offset, offset + dst.size()) of the patched chunk into dst. Calls must cover
  // the chunk front to back without gaps (offset = the previous call's end). On error dst holds
  // garbage.
  Status Fill(uint64_t offset, std::span<uint8_t> dst);
  // After the last Fill: fails unless every segment was read and no stream bytes are left over.
  Status Finish();

  // Where the bytes of a chunk held elsewhere lie (for ApplyInPlace): At(offset, len) returns
  // the `len` contiguous, writable bytes at chunk offset `offset`, or nullptr for bytes the
  // caller does not hold (that change is skipped). Called in increasing offset order.
  class Placement {
   public:
    virtual uint8_t* At(uint64_t offset, uint64_t len) = 0;
    // The writable bytes held contiguously from chunk offset `offset` (the start of a run of
    // them, at or before it): its first byte, with the run's chunk offsets in [*begin, *end).
    // nullptr when the caller does not hold `offset`, or cannot say: every change then goes
    // through At. Called in increasing offset order, interleaved with At.
    virtual uint8_t* Run(uint64_t offset, uint64_t* begin, uint64_t* end) {
      (void)offset;
      (void)begin;
      (void)end;
      return nullptr;
    }

   protected:
    ~Placement() = default;
  };
  // Applies the changes to the chunk where it lies, the bytes there being the base's: only the
  // changed elements are read and rewritten (a 1%-changed chunk touches 1% of its elements), so
  // a live copy of the weights is patched without a pass over it. Construct the applier with an
  // empty base. Checks the whole stream (as Finish does); on kCorrupt some elements may have
  // been rewritten already, so the caller must treat the chunk as damaged.
  Status ApplyInPlace(Placement& at);

  // One recorded change, with no base to apply it to: the `len` bytes at chunk offset `offset`
  // become (bytes XOR value), or with `add`, (bytes + value) mod 2^(8 len) as a little-endian
  // integer. For whoever applies the changes elsewhere, e.g. in device memory.
  struct Change {
    uint64_t offset = 0;
    uint64_t len = 0;
    uint64_t value = 0;
    bool add = false;
  };
  // Calls `f` for every change front to back, then checks the whole stream (as Finish). Construct
  // the applier with an empty base. On kCorrupt some changes were reported already.
  template <typename F>
  Status ForEachChange(F&& f) {
    while (true) {
      if (!pending_) {
        if (done_) break;
        WC_RETURN_IF_ERROR(Advance());
        if (!pending_) break;
      }
      f(Change{off_, len_, raw_is_diff_ ? DiffOf(raw_, len_) : raw_, raw_is_diff_});
      pending_ = false;
    }
    return Finish();
  }
  // The same for the changes before chunk offset `end` only (calls with increasing `end`, then
  // Finish), so a caller can hash each block right after it was patched, while it is in cache.
  Status ApplyInPlaceUntil(Placement& at, uint64_t end);

 private:
  struct Plane {
    const uint8_t* data = nullptr;
    uint8_t bits = 0;  // 0, 1, 2, 4 or 8 bits per value
  };
  Status StartSegment();
  Status Advance();  // makes the next change pending, or sets done_
  // The element index of the current segment's change j_ (next_ plus its gap), without
  // consuming it: `*gap_pos` is where a varint gap list goes on after it. False for an index
  // beyond the segment (BeyondSegment).
  bool NextIndex(uint64_t* index, size_t* gap_pos) const;
  Status BeyondSegment() const;
  uint64_t Combine(uint64_t base) const;
  // Applies the changes of the current segment that lie whole inside chunk offsets
  // [run_begin, limit), `run` holding the bytes from run_begin (base bytes where they are about
  // to change), in one tight loop per element width; stops at the first change outside it,
  // which stays for Advance. Requires a segment in progress and no pending change.
  Status ApplyRun(uint8_t* run, uint64_t run_begin, uint64_t limit);
  template <int W>
  Status ApplyRunOf(uint8_t* run, uint64_t run_begin, uint64_t limit);
  // The un-zigzagged difference a kDiff value `raw` of a `len`-byte element adds.
  static uint64_t DiffOf(uint64_t raw,
                         uint64_t len);  // the pending change's new value over `base`'s
  bool ReadPlaneHeader(Plane* plane, uint64_t count);

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;  // parse position: after the current segment's planes and tail
  std::span<const uint8_t> base_;
  std::span<const Segment> segments_;
  bool diff_;
  // Current segment.
  size_t seg_ = 0;
  bool in_segment_ = false;
  uint64_t seg_off_ = 0;  // chunk offset of the segment
  uint64_t n_ = 0;        // whole elements in it
  int width_ = 1;
  uint64_t count_ = 0;  // changed elements
  uint64_t j_ = 0;      // next change to read
  uint64_t next_ = 0;   // first element index the next gap counts from
  int gap_width_ = 0;   // 0: varint gaps at gap_pos_
  size_t gap_pos_ = 0;
  Plane gap_planes_[8];
  Plane value_planes_[8];
  size_t tail_pos_ = 0;
  uint64_t tail_len_ = 0;
  bool tail_done_ = false;
  bool done_ = false;
  // The change to write next: `len` bytes at chunk offset `off`; `raw` is the stream's value
  // (an XOR, or a zigzag difference when raw_is_diff), `value` the result over the base (Fill).
  bool pending_ = false;
  uint64_t off_ = 0;
  uint64_t len_ = 0;
  uint64_t raw_ = 0;
  bool raw_is_diff_ = false;
  uint64_t value_ = 0;
};

// LEB128 varints, exposed for tests and the payload header.
void PutVarint(uint64_t value, std::vector<uint8_t>& out);
// Reads a varint at `*pos` (a cursor), advancing it. Fails on truncation or more than 10 bytes.
Result<uint64_t> GetVarint(std::span<const uint8_t> in, size_t* pos);

}  // namespace weightcast::codec
