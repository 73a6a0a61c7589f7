// Fuzzes the wire-frame decoder, the handshake's reading of frames and the goodbye check: any
// byte stream, split at a data-chosen point, must decode to validated frames or a clean error,
// never a crash, over-read or unbounded allocation.
#include <cstddef>
#include <cstdint>
#include <span>

#include "net/frame.h"
#include "net/handshake.h"

using weightcast::net::FrameDecoder;
using weightcast::net::FrameType;
using weightcast::net::Handshake;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::span<const uint8_t> input(data + 1, size - 1);
  const size_t split = input.empty() ? 0 : data[0] % (input.size() + 1);
  FrameDecoder decoder(1u << 20);
  weightcast::Status first = decoder.Feed(input.first(split));
  if (first.ok()) (void)decoder.Feed(input.subspan(split)).ok();
  static const weightcast::net::Identity self{.cluster_id = "fuzz",
                                              .node_id = weightcast::PeerId(1),
                                              .role = weightcast::net::Role::kAgent};
  Handshake handshake(self, "fuzzing secret 0123456789", data[0] & 1, std::array<uint8_t, 32>{1});
  for (const auto& frame : decoder.TakeFrames()) {
    if (frame.type == FrameType::kChunk) {
      auto header = frame.chunk_header();
      if (!header.ok() || header->payload_length != frame.chunk_payload().size()) __builtin_trap();
    }
    // What a connection reads after its handshake: a goodbye, or any other error report.
    (void)Handshake::IsGoodbye(frame);
    if (!handshake.OnFrame(frame).ok()) break;
  }
  return 0;
}
