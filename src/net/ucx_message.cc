#include "net/ucx_message.h"

#include <cstring>
#include <string>

namespace weightcast::net {

size_t EncodeUcxMessageHead(uint64_t destination, uint64_t sequence, const OutFrame& frame,
                            std::array<uint8_t, kUcxMaxMessageHeadSize>& out) {
  for (size_t i = 0; i < 8; ++i) {
    out[i] = static_cast<uint8_t>(destination >> (8 * i));
    out[8 + i] = static_cast<uint8_t>(sequence >> (8 * i));
  }
  std::memcpy(out.data() + kUcxRouteSize, frame.head.data(), frame.head_size);
  return kUcxRouteSize + frame.head_size;
}

Result<UcxMessageHead> ParseUcxMessageHead(std::span<const uint8_t> header, uint64_t data_length,
                                           uint32_t max_body_bytes) {
  if (header.size() < kUcxRouteSize + kFrameHeaderSize || header.size() > kUcxMaxMessageHeadSize) {
    return Corrupt("ucx message header of " + std::to_string(header.size()) +
                   " bytes (expected 24 or 48)");
  }
  UcxMessageHead head;
  for (size_t i = 0; i < 8; ++i) {
    head.destination |= static_cast<uint64_t>(header[i]) << (8 * i);
    head.sequence |= static_cast<uint64_t>(header[8 + i]) << (8 * i);
  }
  WC_ASSIGN_OR_RETURN(head.frame, ParseFrameHeader(header.subspan(kUcxRouteSize), max_body_bytes));
  head.body_prefix = header.subspan(kUcxRouteSize + kFrameHeaderSize);
  const size_t want_prefix = head.frame.type == FrameType::kChunk ? kChunkHeaderSize : 0;
  if (head.body_prefix.size() != want_prefix) {
    return Corrupt("ucx " + std::string(FrameTypeName(head.frame.type)) + " message carries " +
                   std::to_string(head.body_prefix.size()) +
                   " body bytes in its header, expected " + std::to_string(want_prefix));
  }
  if (head.frame.length != head.body_prefix.size() + data_length) {
    return Corrupt("ucx message frame length " + std::to_string(head.frame.length) +
                   " disagrees with the " + std::to_string(head.body_prefix.size() + data_length) +
                   " body bytes that arrived");
  }
  return head;
}

}  // namespace weightcast::net
