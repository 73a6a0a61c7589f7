// An operator's signed order to roll a channel back (docs/security.md). In certificate mode the
// coordinator takes a rollback only with one: from a certificate of the cluster CA with the
// operator role, for exactly the channel and version asked, from the version the channel has
// current, issued within kRollbackOrderWindow of its clock, and never twice (its nonce). It then
// hands the order to the agents with the rollback, and an agent switches back only when the
// order authorizes it (RollbackAuthorized): so neither a coordinator nor anyone else rolls a node
// back without an operator, and an old order cannot move a node that has gone past its `from`.
//
//   "WCRB" | u8 2 | u32 LE certificate size | certificate (DER) | Ed25519 signature | body
//   body (signed as is, text):
//     weightcast rollback v2
//     channel <name>
//     from <n>               the version the channel had current when the operator ordered
//     version <n>            the version to go back to, below `from`
//     issued <unix ms>
//     nonce <32 hex digits>
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <weightcast/status.h>

#include "trust/certificate.h"
#include "trust/signing_identity.h"
#include "trust/trust_anchor.h"

namespace weightcast::trust {

inline constexpr std::chrono::minutes kRollbackOrderWindow{5};
inline constexpr size_t kMaxRollbackOrderBody = 1024;

struct RollbackOrder {
  std::string channel;
  uint64_t from = 0;
  uint64_t version = 0;
  int64_t issued_unix_ms = 0;
  std::string nonce;  // 32 hex digits
};

// An order to take `channel` from version `from` back to `version`, issued now with a random
// nonce. kInvalidArgument unless 0 < version < from.
Result<RollbackOrder> NewRollbackOrder(std::string_view channel, uint64_t from, uint64_t version);

Result<std::vector<uint8_t>> SignRollbackOrder(const RollbackOrder& order,
                                               const SigningIdentity& operator_identity);

struct CheckedRollbackOrder {
  RollbackOrder order;
  CertificateInfo signer;
};

// The signature, the certificate (TrustAnchor::Check) and its operator role: kUnauthenticated
// naming the reason; kCorrupt when the bytes are not an order. Freshness and replay are the
// receiver's to check (it holds the clock and the nonces seen).
Result<CheckedRollbackOrder> VerifyRollbackOrder(std::span<const uint8_t> bytes,
                                                 const TrustAnchor& anchor);

// What an agent holding `current` of `channel` checks before it switches back to `target`
// because its coordinator says so: `order` verifies (VerifyRollbackOrder) and orders exactly
// that, back to `target` from a version at or above `current`. No clock and no nonce: the order
// stays valid for the nodes it was meant for (a node that was down takes it when it comes back)
// and for no node that has moved past `from`. kUnauthenticated naming the reason; returns who
// ordered it.
Result<CertificateInfo> RollbackAuthorized(std::span<const uint8_t> order,
                                           const TrustAnchor& anchor, std::string_view channel,
                                           uint64_t target, uint64_t current);

}  // namespace weightcast::trust
