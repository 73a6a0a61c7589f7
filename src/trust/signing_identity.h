// A node's own certificate and private key, for what it signs (a publisher's manifests). The key
// is Ed25519 and stays in this process; its file must be readable by its owner only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

#include "trust/certificate.h"

namespace weightcast::trust {

inline constexpr size_t kSignatureBytes = 64;  // Ed25519

class SigningIdentity {
 public:
  // kInvalidArgument when a file is missing or not PEM, when the key file is readable by group or
  // others, when the key is not Ed25519, or when it is not the certificate's key.
  static Result<std::shared_ptr<const SigningIdentity>> Load(const std::filesystem::path& cert,
                                                             const std::filesystem::path& key);
  static Result<std::shared_ptr<const SigningIdentity>> FromPem(std::string_view cert_pem,
                                                                std::string_view key_pem);
  ~SigningIdentity();
  SigningIdentity(const SigningIdentity&) = delete;
  SigningIdentity& operator=(const SigningIdentity&) = delete;

  std::span<const uint8_t> certificate_der() const { return certificate_der_; }
  // What its certificate says (not checked against any CA here: the verifier does that).
  const CertificateInfo& info() const { return info_; }

  // The Ed25519 signature of `message` (kSignatureBytes). Thread-safe.
  Result<std::vector<uint8_t>> Sign(std::span<const uint8_t> message) const;

 private:
  struct Key;
  SigningIdentity(std::unique_ptr<Key> key, std::vector<uint8_t> der, CertificateInfo info);
  std::unique_ptr<Key> key_;
  std::vector<uint8_t> certificate_der_;
  CertificateInfo info_;
};

}  // namespace weightcast::trust
