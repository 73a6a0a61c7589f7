// Fuzzes swarm::PeerProtocol (swarm/peer_protocol.h), the state machine every byte a peer sends
// ends up in: the input is a script of events from two peers against a node fetching an 8-chunk
// version (control messages through the real parser, chunk arrivals with any header, check
// results of any epoch, disconnects, reconnects, ticks). Never a crash, an over-read, a
// use-after-free (asan) or undefined behaviour (ubsan); every message the node sends encodes and
// parses back to itself; it never knows more than the two peers.
//
// Script: records of u8 op | u8 peer (1 bit) | u16 length | length bytes.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "swarm/messages.h"
#include "swarm/peer_protocol.h"

using namespace weightcast;
using namespace weightcast::swarm;

namespace {

constexpr uint32_t kChunks = 8;

void CheckEffects(std::span<const Effect> effects) {
  for (const Effect& e : effects) {
    if (e.kind != EffectKind::kSend) continue;
    const std::vector<uint8_t> bytes = EncodeMessage(e.message);
    auto back = ParseMessage(bytes);
    if (!back.ok() || EncodeMessage(*back) != bytes) __builtin_trap();
  }
}

uint32_t Read32(std::span<const uint8_t> b, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4 && at + i < b.size(); ++i) v |= uint32_t{b[at + i]} << (8 * i);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  PeerProtocol node(PeerProtocolOptions{.node_id = PeerId(1), .source = false, .tuning = {}});
  TargetSpec spec;
  spec.version = Version(7);
  spec.chunk_count = kChunks;
  spec.whole.assign(kChunks, false);
  spec.whole[0] = true;
  spec.payload.assign(kChunks, false);
  spec.want.assign(kChunks, true);
  spec.fetch_payloads = size > 0 && (data[0] & 1) != 0;
  spec.total_bytes = uint64_t{kChunks} << 20;
  spec.chunk_bytes = 1 << 20;
  spec.payload_bytes.assign(kChunks, 4096);
  auto started = node.SetTarget(swarm::Time{0}, spec);
  if (!started.ok()) __builtin_trap();
  CheckEffects(*started);
  CheckEffects(node.OnPeerConnected(swarm::Time{0}, PeerId(2)));
  CheckEffects(node.OnPeerConnected(swarm::Time{0}, PeerId(3)));

  swarm::Time now{0};
  const std::span<const uint8_t> input(data, size);
  size_t at = 1;
  while (at + 4 <= input.size()) {
    const uint8_t op = input[at];
    const PeerId peer((input[at + 1] & 1) != 0 ? 3 : 2);
    const size_t length =
        std::min<size_t>(input[at + 2] | (size_t{input[at + 3]} << 8), input.size() - at - 4);
    const std::span<const uint8_t> body = input.subspan(at + 4, length);
    at += 4 + length;
    now += std::chrono::milliseconds(50);
    switch (op % 7) {
      case 0: {
        auto message = ParseMessage(body);
        CheckEffects(message.ok() ? node.OnMessage(now, peer, *message)
                                  : node.OnMalformed(now, peer, "malformed"));
        break;
      }
      case 1: {
        const Arrival a = node.OnChunkArrived(now, peer, Version(Read32(body, 0) % 9),
                                              ChunkIndex(Read32(body, 4) % (kChunks + 2)),
                                              body.size() > 8 ? body[8] : 0);
        if (a.check) {
          const auto outcome = static_cast<CheckOutcome>((body.size() > 9 ? body[9] : 0) % 4);
          CheckEffects(node.OnChunkChecked(
              now, a.epoch, peer, ChunkIndex(Read32(body, 4) % (kChunks + 2)), outcome, "fuzz"));
        }
        break;
      }
      case 2:  // a check result of any epoch, for any chunk (a late worker)
        CheckEffects(node.OnChunkChecked(now, Read32(body, 0) % 4, peer,
                                         ChunkIndex(Read32(body, 4) % kChunks),
                                         static_cast<CheckOutcome>(Read32(body, 8) % 4), "fuzz"));
        break;
      case 3:
        CheckEffects(node.OnUploadDone(now, Read32(body, 0) % 4, peer,
                                       ChunkIndex(Read32(body, 4) % (kChunks + 2))));
        break;
      case 4:
        CheckEffects(node.OnPeerDisconnected(now, peer));
        break;
      case 5:
        if (node.Admits(now, peer)) CheckEffects(node.OnPeerConnected(now, peer));
        break;
      case 6:
        now += std::chrono::seconds(Read32(body, 0) % 64);
        CheckEffects(node.OnTick(now));
        break;
    }
    if (node.peer_count() > 2) __builtin_trap();
    (void)node.EveryChunkReplicated();
    (void)node.WantsHave(peer, ChunkIndex(Read32(body, 0) % kChunks), kHaveWhole);
  }
  return 0;
}
