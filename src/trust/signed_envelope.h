// The envelope every certificate-signed statement travels in (a manifest, a rollback order):
//
//   4-byte magic | u8 format | u32 LE certificate size | certificate (DER)
//                | 64-byte Ed25519 signature | body
//
// The signer's certificate travels with the statement, so whoever receives it, directly or
// relayed, checks it against the CA alone. What the signature covers is the statement's own
// business (each says so); the magic keeps one kind from being read as another.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

namespace weightcast::trust {

struct EnvelopeParts {
  std::span<const uint8_t> certificate;
  std::span<const uint8_t> signature;
  std::span<const uint8_t> body;
};

// Bounds-checked split. kCorrupt naming `what` for a wrong magic or format, a certificate size
// of 0 or above kMaxCertificateBytes, or bytes too short for what they announce.
Result<EnvelopeParts> SplitEnvelope(std::span<const uint8_t> bytes, std::string_view magic,
                                    uint8_t format, std::string_view what);

std::vector<uint8_t> JoinEnvelope(std::string_view magic, uint8_t format,
                                  std::span<const uint8_t> certificate,
                                  std::span<const uint8_t> signature,
                                  std::span<const uint8_t> body);

}  // namespace weightcast::trust
