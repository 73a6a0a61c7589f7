// Encoding of the coordinator protocol's Envelopes (coord.proto) into kControl frame bodies, and
// the mapping between Status and the wire's Error message. Shared by the client and the
// coordinator so both sides apply the same bound and the same code mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <weightcast/status.h>

#include "coord/coord.pb.h"

namespace weightcast::coord {

// Largest serialized Envelope either side sends or accepts. Manifests are the largest messages
// (tens of KiB for a 7B model, a few MiB for a huge one with many tensors); anything near this
// bound is a bug or an attack, not a manifest.
inline constexpr size_t kMaxEnvelopeBytes = 32u << 20;

// kOutOfRange above kMaxEnvelopeBytes.
Result<std::vector<uint8_t>> EncodeEnvelope(const wire::Envelope& envelope);
// kCorrupt when the bytes do not parse, kOutOfRange when they exceed kMaxEnvelopeBytes.
Result<wire::Envelope> ParseEnvelope(std::span<const uint8_t> bytes);

// The Error message for a non-OK status (its code and message).
wire::Error ErrorFromStatus(const Status& status);
// The Status an Error carries. A code outside weightcast::Code (or kOk, which no error may carry)
// becomes kInternal naming the number, so a confused peer never yields an OK status.
Status StatusFromError(const wire::Error& error);

}  // namespace weightcast::coord
