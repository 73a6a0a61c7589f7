// An operator's signed order to roll a channel back (docs/security.md). In certificate mode the
// coordinator takes a rollback only with one: from a certificate of the cluster CA with the
// operator role, for exactly the channel and version asked, issued within kRollbackOrderWindow of
// its clock, and never twice (its nonce).
//
//   "WCRB" | u8 1 | u32 LE certificate size | certificate (DER) | Ed25519 signature | body
//   body (signed as is, text):
//     weightcast rollback v1
//     channel <name>
//     version <n>            0: the committed version before the current one
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
  uint64_t version = 0;
  int64_t issued_unix_ms = 0;
  std::string nonce;  // 32 hex digits
};

// An order for `channel` and `version`, issued now with a random nonce.
Result<RollbackOrder> NewRollbackOrder(std::string_view channel, uint64_t version);

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

}  // namespace weightcast::trust
