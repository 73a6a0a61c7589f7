// What a certificate names: its subject, serial, validity and roles. Read from DER bytes that
// came from outside (a signed manifest, a handshake), so the parser is bounded and fuzzed; reading
// a certificate says nothing about whether to believe it (TrustAnchor::Check does that).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <weightcast/status.h>

#include "trust/roles.h"

namespace weightcast::trust {

// A node certificate's DER is a few hundred bytes; anything near this is not one.
inline constexpr size_t kMaxCertificateBytes = 16 << 10;

struct CertificateInfo {
  std::string name;    // the subject's common name
  std::string serial;  // hex, as `weightcast ca revoke` and openssl print it
  Roles roles;
  // The node id the certificate binds its holder to (urn:weightcast:node:ID), when it names one:
  // such a node may connect under that id only.
  std::optional<uint64_t> node_id;
  int64_t not_after = 0;  // seconds since the epoch
};

inline constexpr std::string_view kNodeUriPrefix = "urn:weightcast:node:";

// kCorrupt when the bytes are not one DER certificate (or longer than kMaxCertificateBytes), or
// when its roles do not parse (roles.h).
Result<CertificateInfo> ReadCertificate(std::span<const uint8_t> der);
// The same from PEM text (a certificate file); kInvalidArgument when it holds none.
Result<CertificateInfo> ReadCertificatePem(std::string_view pem);

}  // namespace weightcast::trust
