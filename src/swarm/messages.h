// The messages of the peer protocol (swarm::PeerProtocol, docs/agent.md) and of the
// version-transfer protocol between a fetching agent and a version server (docs/p2p.md): pure
// encoding and parsing, no I/O. Requests and replies other than chunk data are kControl frames
// holding one Message; chunk data travels in kChunk frames whose ChunkHeader names the version
// and chunk, and whose `encoding` byte says how to read the payload (PayloadKind).
//
// Message body (little endian): u8 type | u64 version | u32 chunk | u64 base_version | u8 code |
// u32 text length | text | u32 blob length | blob. Parse checks every length against the body.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <weightcast/status.h>

namespace weightcast::swarm {

enum class MessageType : uint8_t {
  kGetManifest = 1,  // version (0: the current one)
  kManifest = 2,     // version; blob: the signed manifest (signed_manifest.h)
  kGetChunk = 3,     // version, chunk, base_version (0: send the chunk whole)
  kError = 4,        // version, chunk (kNoChunk for a manifest request), code, text
  kEcho = 5,         // answered with kEcho: wakes a reader of the client's own connection
  // Swarm messages between peers (peer_protocol.h). `code` of kHave is HaveFlags; of kRequest,
  // kCancel and kReject a PayloadKind.
  kSwarmHave = 6,  // version, chunk: chunk count, code: kHaveFetchingPayloads | kHaveSkipHeld
                   // | kHaveSource,
                   // blob: whole-chunk bitset then payload bitset, (count + 7) / 8 bytes each
  kHave = 7,       // version, chunk, code: HaveFlags of what the sender now holds
  kRequest = 8,    // version, chunk, code: the PayloadKind wanted
  kCancel = 9,     // version, chunk, code: the PayloadKind no longer wanted
  kReject = 10,    // version, chunk, code: the PayloadKind that will not be sent now
};
inline constexpr uint8_t kMaxMessageType = 10;

// kHave flags.
inline constexpr uint8_t kHaveWhole = 1;
inline constexpr uint8_t kHavePayload = 2;
// kSwarmHave code: the sender fetches delta payloads (so payloads must stay replicated).
inline constexpr uint8_t kHaveFetchingPayloads = 1;
// kSwarmHave code: the sender needs no kHave for chunks it already holds (every node but a
// source, whose EveryChunkReplicated counts them; a node that does not set it gets them all).
inline constexpr uint8_t kHaveSkipHeld = 2;
// kSwarmHave code: the sender seeds this version (a publisher, or a rank seeding its part): it
// holds repeats back, so a receiver asks it only for chunks none of its receiver peers holds
// (swarm::PeerRole::kSource).
inline constexpr uint8_t kHaveSource = 4;

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

// A have-set bitset: bit i of byte i / 8 (least significant first) is chunk i.
std::vector<uint8_t> PackBits(const std::vector<bool>& bits);
// Unpacks `count` bits; kCorrupt unless `bytes` is exactly (count + 7) / 8 long with no bit set
// past `count`.
Result<std::vector<bool>> UnpackBits(std::span<const uint8_t> bytes, uint32_t count);

// The Status an error message carries (codes outside the known range become kInternal).
Status ErrorStatus(const Message& message);

}  // namespace weightcast::swarm
