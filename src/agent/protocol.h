// The version-transfer protocol between a fetching agent and a version server (docs/p2p.md).
// Requests and replies other than chunk data are kControl frames holding one Message; chunk data
// travels in kChunk frames whose ChunkHeader names the version and chunk, and whose `encoding`
// byte says how to read the payload (PayloadKind).
//
// Message body (little endian): u8 type | u64 version | u32 chunk | u64 base_version | u8 code |
// u32 text length | text | u32 blob length | blob. Parse checks every length against the body.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <weightcast/status.h>

namespace weightcast::agent {

enum class MessageType : uint8_t {
  kGetManifest = 1,  // version (0: the current one)
  kManifest = 2,     // version; blob: the signed manifest (signed_manifest.h)
  kGetChunk = 3,     // version, chunk, base_version (0: send the chunk whole)
  kError = 4,        // version, chunk (kNoChunk for a manifest request), code, text
  kEcho = 5,         // answered with kEcho: wakes a reader of the client's own connection
};

inline constexpr uint32_t kNoChunk = 0xffffffffu;
// Bounds a message so a peer cannot make us allocate without limit (manifests are far smaller).
inline constexpr size_t kMaxMessageBytes = 64u << 20;

// ChunkHeader::encoding of a chunk frame.
enum class PayloadKind : uint8_t {
  kRaw = 0,    // the chunk's bytes as stored
  kCodec = 1,  // a codec payload (codec/chunk_codec.h): xor against the named base, or full
};

struct Message {
  MessageType type = MessageType::kEcho;
  uint64_t version = 0;
  uint32_t chunk = kNoChunk;
  uint64_t base_version = 0;
  uint8_t code = 0;  // weightcast::Code of an error
  std::string text{};
  std::vector<uint8_t> blob{};
};

std::vector<uint8_t> EncodeMessage(const Message& message);
Result<Message> ParseMessage(std::span<const uint8_t> body);

// The Status an error message carries (codes outside the known range become kInternal).
Status ErrorStatus(const Message& message);

}  // namespace weightcast::agent
