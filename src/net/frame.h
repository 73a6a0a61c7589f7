// Wire frames (docs/wire_format.md): an 8-byte header, then `length` bytes of body.
//
//   u32 length (little endian, bytes after the header) | u8 type | u8 flags (0) | u16 reserved (0)
//
// Control bodies are protobuf (net/wire.proto) or caller-chosen bytes; chunk bodies are a fixed
// 24-byte ChunkHeader followed by the raw payload, so a chunk is never re-encoded. Everything
// here is pure (no I/O) so that the decoder can be fuzzed and shared by every transport.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "net/buffer_pool.h"

namespace weightcast::net {

inline constexpr size_t kFrameHeaderSize = 8;
inline constexpr size_t kChunkHeaderSize = 24;
static_assert(kChunkHeaderSize == kPooledHeadBytes, "pooled bodies page-align chunk payloads");
// Hard ceiling on any body; a connection's own limit (Options::max_frame_bytes) may be lower.
inline constexpr uint32_t kAbsoluteMaxFrameBytes = 256u << 20;
inline constexpr uint32_t kDefaultMaxFrameBytes = (64u << 20) + kChunkHeaderSize;

enum class FrameType : uint8_t {
  kHello = 1,    // wire.proto Hello: first frame each side sends
  kAuth = 2,     // wire.proto Auth: HMAC proof, second frame each side sends
  kError = 3,    // wire.proto ErrorReport: why the sender is about to close
  kPing = 4,     // empty: keepalive, sent when a direction has been idle
  kControl = 5,  // opaque bytes for upper layers (their own protobuf messages)
  kChunk = 6,    // ChunkHeader + raw payload
};
std::string_view FrameTypeName(FrameType type);
bool IsKnownFrameType(uint8_t type);

struct FrameHeader {
  uint32_t length = 0;  // body bytes after the 8-byte header
  FrameType type = FrameType::kPing;
};

// Fixed header in front of a chunk payload. `payload_length` must equal the frame body length
// minus kChunkHeaderSize; a mismatch is a malformed frame.
struct ChunkHeader {
  uint64_t version = 0;      // Version of the snapshot within the channel
  uint32_t channel = 0;      // channel number assigned by the coordinator
  uint32_t chunk_index = 0;  // ChunkIndex within the snapshot
  uint32_t payload_length = 0;
  uint8_t encoding = 0;  // codec-defined (same/xor/full, compression); opaque to net
  friend bool operator==(const ChunkHeader&, const ChunkHeader&) = default;
};

void EncodeFrameHeader(const FrameHeader& header, std::span<uint8_t, kFrameHeaderSize> out);
// Rejects unknown types, non-zero flags/reserved bits, and bodies above `max_body_bytes`
// (never above kAbsoluteMaxFrameBytes) with kCorrupt naming the problem.
Result<FrameHeader> ParseFrameHeader(std::span<const uint8_t> bytes, uint32_t max_body_bytes);

void EncodeChunkHeader(const ChunkHeader& header, std::span<uint8_t, kChunkHeaderSize> out);
// Parses the chunk header at the start of a kChunk body and checks its payload length against
// the body.
Result<ChunkHeader> ParseChunkHeader(std::span<const uint8_t> body);

// A byte vector whose resize leaves new bytes uninitialised: a received body is overwritten by
// the socket read at once, so zero-filling megabytes first would be wasted work. Large bodies
// come from the process's BufferPool, so a stream of chunks lands in pages already mapped.
template <typename T>
struct UninitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <typename U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}  // NOLINT: allocator conversion
  T* allocate(size_t n) {
    if (n * sizeof(T) >= BufferPool::kMinPooledBytes) {
      return static_cast<T*>(BufferPool::Global().Allocate(n * sizeof(T)));
    }
    return std::allocator<T>::allocate(n);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n * sizeof(T) >= BufferPool::kMinPooledBytes) {
      BufferPool::Global().Free(p, n * sizeof(T));
      return;
    }
    std::allocator<T>::deallocate(p, n);
  }
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using Bytes = std::vector<uint8_t, UninitAllocator<uint8_t>>;

// A received frame. The body is owned by the frame (one copy, from the socket into `body`).
struct Frame {
  FrameType type = FrameType::kPing;
  Bytes body;

  // For kChunk frames after validation: the header and the payload (a view into `body`).
  Result<ChunkHeader> chunk_header() const { return ParseChunkHeader(body); }
  std::span<const uint8_t> chunk_payload() const {
    return body.size() < kChunkHeaderSize
               ? std::span<const uint8_t>()
               : std::span<const uint8_t>(body).subspan(kChunkHeaderSize);
  }
};

// Checks that a frame's body is well formed for its type (Hello/Auth/Error parse, Ping empty,
// Chunk header consistent). Transports call this on every received frame before handing it on.
Status ValidateFrameBody(FrameType type, std::span<const uint8_t> body);

// A frame to send: an encoded header (frame header, plus the chunk header for chunks), and a
// body that is either owned bytes or a view of caller memory kept alive by `keep_alive`. The
// transport writes `head` and `payload` with one gather write, so a chunk is not copied in user
// space.
struct OutFrame {
  std::array<uint8_t, kFrameHeaderSize + kChunkHeaderSize> head{};
  size_t head_size = 0;
  std::vector<uint8_t> owned;              // body bytes owned by the frame (control frames)
  std::span<const uint8_t> payload;        // view into `owned` or into caller memory
  std::shared_ptr<const void> keep_alive;  // holds the caller's memory until written
  // Dropped with the frame, once its bytes were written (or the connection dropped it): a sender
  // that wants to know when a frame has left puts a token here whose destructor reports it.
  // Transports never look inside; it is apart from keep_alive, which keys UCX registrations.
  std::shared_ptr<const void> on_written;

  size_t wire_size() const { return head_size + payload.size(); }
  FrameType type() const { return static_cast<FrameType>(head[4]); }

  static OutFrame Make(FrameType type, std::vector<uint8_t> body);
  static OutFrame Chunk(const ChunkHeader& header, std::span<const uint8_t> payload,
                        std::shared_ptr<const void> keep_alive);
};

// Refuses (kOutOfRange) a frame no receiver would accept: a body above kAbsoluteMaxFrameBytes,
// or an OutFrame whose header does not describe its payload. Transports call it in Send.
Status CheckSendable(const OutFrame& frame);

// Incremental decoder for a byte stream: feed any split of the stream, take whole validated
// frames out. Used by the fuzzer and by transports that receive in arbitrary pieces. After an
// error the decoder stays failed (the connection must be closed).
class FrameDecoder {
 public:
  explicit FrameDecoder(uint32_t max_body_bytes) : max_body_bytes_(max_body_bytes) {}

  Status Feed(std::span<const uint8_t> bytes);
  // Moves the decoded frames out (in order).
  std::deque<Frame> TakeFrames();
  size_t buffered_bytes() const { return buffer_.size(); }

 private:
  uint32_t max_body_bytes_;
  std::vector<uint8_t> buffer_;
  std::deque<Frame> frames_;
  Status failed_;
};

}  // namespace weightcast::net
