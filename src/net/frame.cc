#include "net/frame.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "net/wire.pb.h"

namespace weightcast::net {
namespace {

void PutU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t GetU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

template <typename Message>
Status ParseProto(std::span<const uint8_t> body, std::string_view what) {
  Message message;
  if (body.size() > static_cast<size_t>(INT32_MAX) ||
      !message.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return Corrupt(std::string(what) + " frame body is not a valid protobuf message");
  }
  return Status::Ok();
}

}  // namespace

std::string_view FrameTypeName(FrameType type) {
  switch (type) {
    case FrameType::kHello:
      return "hello";
    case FrameType::kAuth:
      return "auth";
    case FrameType::kError:
      return "error";
    case FrameType::kPing:
      return "ping";
    case FrameType::kControl:
      return "control";
    case FrameType::kChunk:
      return "chunk";
  }
  return "unknown";
}

bool IsKnownFrameType(uint8_t type) {
  return type >= static_cast<uint8_t>(FrameType::kHello) &&
         type <= static_cast<uint8_t>(FrameType::kChunk);
}

void EncodeFrameHeader(const FrameHeader& header, std::span<uint8_t, kFrameHeaderSize> out) {
  PutU32(out.data(), header.length);
  out[4] = static_cast<uint8_t>(header.type);
  out[5] = 0;
  PutU16(out.data() + 6, 0);
}

Result<FrameHeader> ParseFrameHeader(std::span<const uint8_t> bytes, uint32_t max_body_bytes) {
  if (bytes.size() < kFrameHeaderSize) {
    return Corrupt("frame header is " + std::to_string(bytes.size()) + " bytes, need 8");
  }
  const uint8_t* p = bytes.data();
  FrameHeader header;
  header.length = GetU32(p);
  if (!IsKnownFrameType(p[4])) {
    return Corrupt("unknown frame type " + std::to_string(p[4]));
  }
  header.type = static_cast<FrameType>(p[4]);
  if (p[5] != 0 || GetU16(p + 6) != 0) {
    return Corrupt("frame flags/reserved bits are set (not defined in protocol version 1)");
  }
  const uint32_t limit = std::min(max_body_bytes, kAbsoluteMaxFrameBytes);
  if (header.length > limit) {
    return Corrupt("frame body of " + std::to_string(header.length) +
                   " bytes exceeds the limit of " + std::to_string(limit));
  }
  return header;
}

void EncodeChunkHeader(const ChunkHeader& header, std::span<uint8_t, kChunkHeaderSize> out) {
  uint8_t* p = out.data();
  PutU64(p, header.version);
  PutU32(p + 8, header.channel);
  PutU32(p + 12, header.chunk_index);
  PutU32(p + 16, header.payload_length);
  p[20] = header.encoding;
  p[21] = p[22] = p[23] = 0;
}

Result<ChunkHeader> ParseChunkHeader(std::span<const uint8_t> body) {
  if (body.size() < kChunkHeaderSize) {
    return Corrupt("chunk frame of " + std::to_string(body.size()) +
                   " bytes is shorter than its 24-byte chunk header");
  }
  const uint8_t* p = body.data();
  ChunkHeader header;
  header.version = GetU64(p);
  header.channel = GetU32(p + 8);
  header.chunk_index = GetU32(p + 12);
  header.payload_length = GetU32(p + 16);
  header.encoding = p[20];
  if (p[21] != 0 || p[22] != 0 || p[23] != 0) {
    return Corrupt("chunk header reserved bytes are set");
  }
  if (header.payload_length != body.size() - kChunkHeaderSize) {
    return Corrupt("chunk header says " + std::to_string(header.payload_length) +
                   " payload bytes but the frame carries " +
                   std::to_string(body.size() - kChunkHeaderSize));
  }
  return header;
}

Status ValidateFrameBody(FrameType type, std::span<const uint8_t> body) {
  switch (type) {
    case FrameType::kHello:
      return ParseProto<wire::Hello>(body, "hello");
    case FrameType::kAuth:
      return ParseProto<wire::Auth>(body, "auth");
    case FrameType::kError:
      return ParseProto<wire::ErrorReport>(body, "error");
    case FrameType::kPing:
      if (!body.empty()) return Corrupt("ping frame carries a body");
      return Status::Ok();
    case FrameType::kControl:
      return Status::Ok();
    case FrameType::kChunk: {
      Result<ChunkHeader> header = ParseChunkHeader(body);
      return header.ok() ? Status::Ok() : header.status();
    }
  }
  return Corrupt("unknown frame type");
}

OutFrame OutFrame::Make(FrameType type, std::vector<uint8_t> body) {
  OutFrame frame;
  EncodeFrameHeader({static_cast<uint32_t>(body.size()), type},
                    std::span<uint8_t, kFrameHeaderSize>(frame.head.data(), kFrameHeaderSize));
  frame.head_size = kFrameHeaderSize;
  frame.owned = std::move(body);
  frame.payload = frame.owned;
  return frame;
}

OutFrame OutFrame::Chunk(const ChunkHeader& header, std::span<const uint8_t> payload,
                         std::shared_ptr<const void> keep_alive) {
  OutFrame frame;
  ChunkHeader h = header;
  h.payload_length = static_cast<uint32_t>(payload.size());
  EncodeFrameHeader({static_cast<uint32_t>(kChunkHeaderSize + payload.size()), FrameType::kChunk},
                    std::span<uint8_t, kFrameHeaderSize>(frame.head.data(), kFrameHeaderSize));
  EncodeChunkHeader(h, std::span<uint8_t, kChunkHeaderSize>(frame.head.data() + kFrameHeaderSize,
                                                            kChunkHeaderSize));
  frame.head_size = kFrameHeaderSize + kChunkHeaderSize;
  frame.payload = payload;
  frame.keep_alive = std::move(keep_alive);
  return frame;
}

Status CheckSendable(const OutFrame& frame) {
  if (frame.head_size < kFrameHeaderSize || frame.head_size > frame.head.size()) {
    return Internal("outgoing frame has no encoded header");
  }
  const uint64_t body = frame.head_size - kFrameHeaderSize + frame.payload.size();
  if (body > kAbsoluteMaxFrameBytes) {
    return OutOfRange("frame body of " + std::to_string(body) +
                      " bytes exceeds the protocol limit of " +
                      std::to_string(kAbsoluteMaxFrameBytes));
  }
  const uint32_t length = static_cast<uint32_t>(frame.head[0]) | (frame.head[1] << 8) |
                          (frame.head[2] << 16) | (static_cast<uint32_t>(frame.head[3]) << 24);
  if (length != body) return Internal("outgoing frame header length disagrees with its body");
  return Status::Ok();
}

Status FrameDecoder::Feed(std::span<const uint8_t> bytes) {
  if (!failed_.ok()) return failed_;
  buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
  size_t pos = 0;
  while (buffer_.size() - pos >= kFrameHeaderSize) {
    Result<FrameHeader> header =
        ParseFrameHeader(std::span<const uint8_t>(buffer_).subspan(pos), max_body_bytes_);
    if (!header.ok()) {
      failed_ = header.status();
      break;
    }
    if (buffer_.size() - pos - kFrameHeaderSize < header->length) break;
    const uint8_t* body = buffer_.data() + pos + kFrameHeaderSize;
    Frame frame;
    frame.type = header->type;
    frame.body.assign(body, body + header->length);
    Status valid = ValidateFrameBody(frame.type, frame.body);
    if (!valid.ok()) {
      failed_ = valid;
      break;
    }
    frames_.push_back(std::move(frame));
    pos += kFrameHeaderSize + header->length;
  }
  buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<ptrdiff_t>(pos));
  return failed_;
}

std::deque<Frame> FrameDecoder::TakeFrames() { return std::exchange(frames_, {}); }

}  // namespace weightcast::net
