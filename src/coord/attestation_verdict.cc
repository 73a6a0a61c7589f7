#include "coord/attestation_verdict.h"

#include "util/text.h"

namespace weightcast::coord {

std::string JudgeAttestation(const ChannelState* channel,
                             const std::optional<wire::Attestation>& before, uint64_t now_unix_ms,
                             wire::Attestation& a) {
  if (before.has_value() && before->version() == a.version() && before->digest() == a.digest()) {
    a.set_verdict(before->verdict());
    a.set_unix_ms(before->unix_ms());
    return "";
  }
  a.set_unix_ms(now_unix_ms);
  const wire::VersionEntry* entry = channel == nullptr ? nullptr : channel->Find(a.version());
  if (a.digest().size() != 16) {
    a.set_verdict(wire::ATTESTATION_MISMATCH);
    return "with a malformed digest (" + std::to_string(a.digest().size()) + " bytes, not 16)";
  }
  if (entry == nullptr) {
    a.set_verdict(wire::ATTESTATION_UNKNOWN_VERSION);
    return "(a version this coordinator never published)";
  }
  if (entry->attestation_digest() == a.digest()) {
    a.set_verdict(wire::ATTESTATION_MATCH);
    return "";
  }
  a.set_verdict(wire::ATTESTATION_MISMATCH);
  return "with a digest that is not the version's: its live tensors differ from the committed "
         "bytes (attested " +
         ToHex(AsBytes(a.digest())) + ", the version's " +
         ToHex(AsBytes(entry->attestation_digest())) + ")";
}

}  // namespace weightcast::coord
