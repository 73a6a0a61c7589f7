// Fuzzes the peer protocol's message parser (swarm/messages.h), the bytes of every kControl
// frame a peer or a version server sends: any body must parse to a message that encodes back to
// the same bytes, or fail cleanly; a have-set read the way the swarm node reads a kSwarmHave
// (whole-chunk bits, then payload bits, each for the message's chunk count) must unpack to bits
// that pack back to the same bytes, or fail cleanly; never a crash, over-read or an allocation
// beyond the message's own size.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "swarm/messages.h"

using weightcast::swarm::EncodeMessage;
using weightcast::swarm::ErrorStatus;
using weightcast::swarm::Message;
using weightcast::swarm::PackBits;
using weightcast::swarm::ParseMessage;
using weightcast::swarm::UnpackBits;

namespace {

void CheckBits(std::span<const uint8_t> bytes, uint32_t count) {
  auto bits = UnpackBits(bytes, count);
  if (!bits.ok()) return;
  if (bits->size() != count) __builtin_trap();
  const std::vector<uint8_t> packed = PackBits(*bits);
  if (!std::equal(packed.begin(), packed.end(), bytes.begin(), bytes.end())) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> body(data, size);
  auto message = ParseMessage(body);
  if (!message.ok()) return 0;
  const std::vector<uint8_t> again = EncodeMessage(*message);
  if (!std::equal(again.begin(), again.end(), body.begin(), body.end())) __builtin_trap();
  (void)ErrorStatus(*message).ok();
  // A have-set (swarm/peer_protocol.cc): a count that does not match the blob must fail before
  // anything of its size is allocated.
  const std::span<const uint8_t> blob(message->blob);
  const size_t half = std::min(blob.size(), (size_t{message->chunk} + 7) / 8);
  CheckBits(blob.first(half), message->chunk);
  CheckBits(blob.subspan(half), message->chunk);
  return 0;
}
