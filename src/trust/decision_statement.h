// A coordinator's signed commit or abort decision on a version (docs/security.md). In
// certificate mode the coordinator signs each decision it logs, the statement is logged with it
// (so the log store, etcd or a state directory, cannot change a decision without a coordinator's
// key) and travels to the agents in their heartbeat replies. An agent commits or drops a staged
// version only on a statement that verifies against its own CA, comes from a certificate with
// the coordinator role and names exactly that channel, version and decision; and never on one
// older (by `sequence`) than a decision it already took, so an old decision replayed later does
// not undo a newer one.
//
//   "WCDC" | u8 1 | u32 LE certificate size | certificate (DER) | Ed25519 signature | body
//   body (signed as is, text):
//     weightcast decision v1
//     channel <name>
//     version <n>
//     root <64 hex digits>    the version's root: the decision is about these bytes
//     decision commit|abort
//     sequence <n>            the log record that decided it: later decisions have larger ones
//     reason <text>           why an abort (one line; may be empty)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

#include "hash/digest.h"
#include "trust/certificate.h"
#include "trust/signing_identity.h"
#include "trust/trust_anchor.h"

namespace weightcast::trust {

inline constexpr size_t kMaxDecisionBody = 2048;

struct DecisionStatement {
  std::string channel;
  uint64_t version = 0;
  Digest root{};
  bool commit = false;  // false: abort
  uint64_t sequence = 0;
  std::string reason;  // signed as DecisionReason(reason)

  bool operator==(const DecisionStatement&) const = default;
};

Result<std::vector<uint8_t>> SignDecision(const DecisionStatement& decision,
                                          const SigningIdentity& coordinator_identity);

struct CheckedDecision {
  DecisionStatement decision;
  CertificateInfo signer;
};

// The signature, the certificate (TrustAnchor::Check) and its coordinator role:
// kUnauthenticated naming the reason; kCorrupt when the bytes are not a decision. Whether it is
// the decision the receiver expects is the receiver's to check.
Result<CheckedDecision> VerifyDecision(std::span<const uint8_t> bytes, const TrustAnchor& anchor);

// What an agent checks before it commits (`commit`) or drops version `version` of `channel`
// because its coordinator says so: `statement` verifies (VerifyDecision) and states exactly that
// decision, about `staged_root` when the agent staged the version (null: it has not), with a
// sequence at or above `taken_sequence`, the newest decision the agent took (an older statement
// is a replay). kUnauthenticated naming the reason; returns the statement and its signer.
Result<CheckedDecision> DecisionAuthorized(std::span<const uint8_t> statement,
                                           const TrustAnchor& anchor, std::string_view channel,
                                           uint64_t version, bool commit, const Digest* staged_root,
                                           uint64_t taken_sequence);

// The body's text alone (what VerifyDecision reads once the signature holds). kCorrupt naming
// the first thing that is not as above.
Result<DecisionStatement> ParseDecisionBody(std::span<const uint8_t> body);

// The reason as a statement carries it: one line (line breaks become spaces), its first
// kMaxDecisionReason bytes.
inline constexpr size_t kMaxDecisionReason = 512;
std::string DecisionReason(std::string_view reason);

// "commit of main v3" / "abort of main v3": for logs and refusals.
std::string DecisionName(const DecisionStatement& decision);

}  // namespace weightcast::trust
