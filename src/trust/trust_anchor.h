// The cluster CA as a node trusts it: its certificate and its list of revoked certificates
// (docs/security.md). Every signature a node accepts (a manifest from a publisher, a decision
// from a coordinator, a rollback from an operator) is made with a key whose certificate this
// anchor vouches for.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <weightcast/status.h>

#include "trust/certificate.h"

typedef struct x509_st X509;  // OpenSSL's, kept out of this header

namespace weightcast::trust {

class TrustAnchor {
 public:
  // The CA certificate (PEM) and its CRL (PEM; empty when nothing was ever revoked). A CRL must
  // be signed by the CA. kInvalidArgument naming the file that is not what it should be.
  // Load watches the CRL file: a new one (`weightcast ca revoke`, copied over it) is read within
  // kCrlRecheck of its arrival, so a revoked certificate is refused within about a heartbeat,
  // without a restart. A new file that does not load (not PEM, not the CA's) leaves the list
  // in force unchanged; crl_error() says why.
  static Result<std::shared_ptr<const TrustAnchor>> Load(const std::filesystem::path& ca_pem,
                                                         const std::filesystem::path& crl_pem);
  static Result<std::shared_ptr<const TrustAnchor>> FromPem(std::string_view ca_pem,
                                                            std::string_view crl_pem);
  ~TrustAnchor();
  TrustAnchor(const TrustAnchor&) = delete;
  TrustAnchor& operator=(const TrustAnchor&) = delete;

  // Reads `certificate_der` and checks that the CA issued it, that it is valid now and that it
  // is not revoked. kUnauthenticated naming the reason (and the certificate) otherwise.
  // Thread-safe.
  Result<CertificateInfo> Check(std::span<const uint8_t> certificate_der) const;

  // Check(), then the Ed25519 `signature` of `message` with the certificate's key.
  // kUnauthenticated when it does not verify. Thread-safe.
  Result<CertificateInfo> CheckSigned(std::span<const uint8_t> certificate_der,
                                      std::span<const uint8_t> message,
                                      std::span<const uint8_t> signature) const;

  const std::string& ca_name() const { return ca_name_; }
  // Why the newest CRL file was not taken (empty when it was). Thread-safe.
  std::string crl_error() const;

  static constexpr std::chrono::milliseconds kCrlRecheck{1000};

 private:
  // Check() with its result kept: the same certificate bytes pass again without the chain's
  // signature check while the revocation list is the same and the certificate has not expired.
  Result<std::pair<std::shared_ptr<X509>, CertificateInfo>> CheckOnce(
      std::span<const uint8_t> certificate_der) const;
  struct State;
  explicit TrustAnchor(std::unique_ptr<State> state, std::string ca_name);
  std::unique_ptr<State> state_;
  std::string ca_name_;
};

}  // namespace weightcast::trust
