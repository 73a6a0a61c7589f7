#include "trust/trust_anchor.h"

#include <openssl/err.h>

#include "trust/openssl_handles.h"
#include "util/file.h"

namespace weightcast::trust {

struct TrustAnchor::State {
  X509Ptr ca;
  X509StorePtr store;
};

TrustAnchor::TrustAnchor(std::unique_ptr<State> state, std::string ca_name)
    : state_(std::move(state)), ca_name_(std::move(ca_name)) {}

TrustAnchor::~TrustAnchor() = default;

Result<std::shared_ptr<const TrustAnchor>> TrustAnchor::Load(const std::filesystem::path& ca_pem,
                                                             const std::filesystem::path& crl_pem) {
  Result<std::string> ca = ReadFileToString(ca_pem, 1 << 20);
  if (!ca.ok()) return InvalidArgument("the CA certificate " + ca_pem.string() + ": " + ca.status().message());
  std::string crl;
  if (!crl_pem.empty()) {
    Result<std::string> read = ReadFileToString(crl_pem, 64 << 20);
    if (!read.ok()) return InvalidArgument("the CRL " + crl_pem.string() + ": " + read.status().message());
    crl = std::move(read).value();
  }
  Result<std::shared_ptr<const TrustAnchor>> anchor = FromPem(*ca, crl);
  if (!anchor.ok()) {
    return anchor.status().WithContext(ca_pem.string() +
                                       (crl_pem.empty() ? "" : " and " + crl_pem.string()));
  }
  return anchor;
}

Result<std::shared_ptr<const TrustAnchor>> TrustAnchor::FromPem(std::string_view ca_pem,
                                                                std::string_view crl_pem) {
  auto state = std::make_unique<State>();
  WC_ASSIGN_OR_RETURN(state->ca, ParseCertificatePem(ca_pem, "the CA certificate"));
  WC_ASSIGN_OR_RETURN(CertificateInfo ca_info, DescribeCertificate(state->ca.get()));
  if (X509_check_ca(state->ca.get()) == 0) {
    return InvalidArgument("the CA certificate '" + ca_info.name + "' is not a CA certificate");
  }
  state->store.reset(X509_STORE_new());
  if (!state->store || X509_STORE_add_cert(state->store.get(), state->ca.get()) != 1) {
    return Internal(OpensslError("trust anchor: X509_STORE"));
  }
  if (!crl_pem.empty()) {
    WC_ASSIGN_OR_RETURN(X509CrlPtr crl, ParseCrlPem(crl_pem, "the CRL"));
    if (X509_CRL_verify(crl.get(), X509_get0_pubkey(state->ca.get())) != 1) {
      ERR_clear_error();
      return InvalidArgument("the CRL is not signed by the CA '" + ca_info.name + "'");
    }
    if (X509_STORE_add_crl(state->store.get(), crl.get()) != 1) {
      return Internal(OpensslError("trust anchor: adding the CRL"));
    }
    X509_STORE_set_flags(state->store.get(), X509_V_FLAG_CRL_CHECK);
  }
  return std::shared_ptr<const TrustAnchor>(new TrustAnchor(std::move(state), ca_info.name));
}

namespace {

// The chain, validity and revocation of `cert`; then what it says. Nothing in the certificate
// is read for its meaning before the CA's signature over it has been checked.
Result<CertificateInfo> Verified(X509_STORE* store, X509* cert) {
  X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!ctx || X509_STORE_CTX_init(ctx.get(), store, cert, nullptr) != 1) {
    return Internal(OpensslError("trust anchor: X509_STORE_CTX"));
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    const int error = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return Unauthenticated("certificate '" + CertificateName(cert) + "' (serial " +
                           CertificateSerial(cert) + "): " + X509_verify_cert_error_string(error));
  }
  Result<CertificateInfo> info = DescribeCertificate(cert);
  // Issued by our CA with a role this build does not know: refused, not half understood.
  if (!info.ok()) return Unauthenticated(info.status().message());
  return info;
}

}  // namespace

Result<CertificateInfo> TrustAnchor::Check(std::span<const uint8_t> certificate_der) const {
  WC_ASSIGN_OR_RETURN(X509Ptr cert, ParseCertificateDer(certificate_der));
  return Verified(state_->store.get(), cert.get());
}

Result<CertificateInfo> TrustAnchor::CheckSigned(std::span<const uint8_t> certificate_der,
                                                 std::span<const uint8_t> message,
                                                 std::span<const uint8_t> signature) const {
  WC_ASSIGN_OR_RETURN(X509Ptr cert, ParseCertificateDer(certificate_der));
  WC_ASSIGN_OR_RETURN(CertificateInfo info, Verified(state_->store.get(), cert.get()));
  EVP_PKEY* key = X509_get0_pubkey(cert.get());
  if (key == nullptr || EVP_PKEY_get_id(key) != EVP_PKEY_ED25519) {
    return Unauthenticated("certificate '" + info.name + "': its key is not Ed25519");
  }
  EvpMdCtxPtr ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key) != 1) {
    return Internal(OpensslError("trust anchor: EVP_DigestVerifyInit"));
  }
  if (EVP_DigestVerify(ctx.get(), signature.data(), signature.size(), message.data(),
                       message.size()) != 1) {
    ERR_clear_error();
    return Unauthenticated("the signature does not verify with the key of certificate '" +
                           info.name + "' (serial " + info.serial + ")");
  }
  return info;
}

}  // namespace weightcast::trust
