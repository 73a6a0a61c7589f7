// How a wire frame travels as one UCX active message (docs/transport_ucx.md, "Messages").
//
//   AM header: u64 destination | u64 sequence (both little endian) | the frame's 8-byte
//              header | for kChunk, its 24-byte chunk header
//   AM data:   the rest of the frame's body (a chunk's payload, a control frame's bytes)
//
// The header is small and always arrives with the message; the data may come by rendezvous,
// which UCX lets the receiver pull straight into the frame's own buffer. The destination is the
// receiver's id for the connection (0 while the receiver has not told it: then the endpoint the
// message came on says which connection it is). The sequence number
// restores the sender's order: UCX does not promise that an eager message and a rendezvous one
// are handed over in the order they were sent. Pure (no UCX types) so that the parser of these
// outside bytes can be fuzzed without UCX installed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include <weightcast/status.h>

#include "net/frame.h"

namespace weightcast::net {

inline constexpr size_t kUcxRouteSize = 16;  // destination + sequence
inline constexpr size_t kUcxMaxMessageHeadSize =
    kUcxRouteSize + kFrameHeaderSize + kChunkHeaderSize;

struct UcxMessageHead {
  uint64_t destination = 0;
  uint64_t sequence = 0;
  FrameHeader frame;
  // Body bytes carried in the AM header (the chunk header of a kChunk frame, else none). The
  // AM data holds the remaining frame.length - body_prefix.size() bytes.
  std::span<const uint8_t> body_prefix;
};

// The AM header for `frame` (an OutFrame whose head is already encoded), sent as message
// number `sequence` to connection `destination`. Returns the bytes used of `out`.
size_t EncodeUcxMessageHead(uint64_t destination, uint64_t sequence, const OutFrame& frame,
                            std::array<uint8_t, kUcxMaxMessageHeadSize>& out);

// Parses an AM header that came with `data_length` bytes of data. kCorrupt (naming the fault)
// when the header is short or long, the frame header is invalid or above `max_body_bytes`, a
// kChunk frame does not carry its chunk header in the AM header (or another type carries
// anything), or the frame length disagrees with what arrived. The chunk header itself is
// checked later with the whole body (ValidateFrameBody).
Result<UcxMessageHead> ParseUcxMessageHead(std::span<const uint8_t> header, uint64_t data_length,
                                           uint32_t max_body_bytes);

}  // namespace weightcast::net
