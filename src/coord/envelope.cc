#include "coord/envelope.h"

#include <string>

namespace weightcast::coord {

Result<std::vector<uint8_t>> EncodeEnvelope(const wire::Envelope& envelope) {
  const size_t size = envelope.ByteSizeLong();
  if (size > kMaxEnvelopeBytes) {
    return OutOfRange("coordinator message of " + std::to_string(size) + " bytes is above the " +
                      std::to_string(kMaxEnvelopeBytes) + "-byte bound");
  }
  std::vector<uint8_t> bytes(size);
  if (!envelope.SerializeToArray(bytes.data(), static_cast<int>(size))) {
    return Internal("coordinator message did not serialize");
  }
  return bytes;
}

Result<wire::Envelope> ParseEnvelope(std::span<const uint8_t> bytes) {
  if (bytes.size() > kMaxEnvelopeBytes) {
    return OutOfRange("coordinator message of " + std::to_string(bytes.size()) +
                      " bytes is above the " + std::to_string(kMaxEnvelopeBytes) + "-byte bound");
  }
  wire::Envelope envelope;
  if (!envelope.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Corrupt("coordinator message does not parse");
  }
  return envelope;
}

wire::Error ErrorFromStatus(const Status& status) {
  wire::Error error;
  error.set_code(static_cast<uint32_t>(status.code()));
  error.set_message(status.message());
  error.set_reason(static_cast<uint32_t>(status.reason()));
  return error;
}

Status StatusFromError(const wire::Error& error) {
  const uint32_t code = error.code();
  if (code == static_cast<uint32_t>(Code::kOk) || code > static_cast<uint32_t>(Code::kInternal)) {
    return Internal("coordinator error with unknown code " + std::to_string(code) + ": " +
                    error.message());
  }
  // A reason this build does not know (a newer coordinator's) reads as none: the code and the
  // message still say what failed.
  const Reason reason =
      error.reason() <= kMaxReason ? static_cast<Reason>(error.reason()) : Reason::kNone;
  return Status(static_cast<Code>(code), error.message()).WithReason(reason);
}

}  // namespace weightcast::coord
