// Owning handles for the OpenSSL objects the trust layer uses, and the error text OpenSSL left
// behind. Private to src/trust/: nothing above this layer sees an OpenSSL type.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <weightcast/status.h>

namespace weightcast::trust {

template <auto Free>
struct OpensslFree {
  template <typename T>
  void operator()(T* p) const {
    Free(p);
  }
};

using X509Ptr = std::unique_ptr<X509, OpensslFree<X509_free>>;
using X509CrlPtr = std::unique_ptr<X509_CRL, OpensslFree<X509_CRL_free>>;
using X509StorePtr = std::unique_ptr<X509_STORE, OpensslFree<X509_STORE_free>>;
using X509StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, OpensslFree<X509_STORE_CTX_free>>;
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, OpensslFree<EVP_PKEY_free>>;
using EvpMdCtxPtr = std::unique_ptr<EVP_MD_CTX, OpensslFree<EVP_MD_CTX_free>>;
using BioPtr = std::unique_ptr<BIO, OpensslFree<BIO_free_all>>;
using GeneralNamesPtr = std::unique_ptr<GENERAL_NAMES, OpensslFree<GENERAL_NAMES_free>>;

// "what: <OpenSSL's reasons>" with the thread's error queue drained, so a later call does not
// report this failure as its own.
std::string OpensslError(std::string_view what);

// A certificate, CRL or key parsed from PEM text; kInvalidArgument naming `what` when the text
// holds none.
Result<X509Ptr> ParseCertificatePem(std::string_view pem, std::string_view what);
Result<X509CrlPtr> ParseCrlPem(std::string_view pem, std::string_view what);
Result<EvpPkeyPtr> ParsePrivateKeyPem(std::string_view pem, std::string_view what);
std::string CertificatePem(X509* cert);
std::vector<uint8_t> CertificateDer(X509* cert);
// One DER certificate, every byte of `der` used; kCorrupt otherwise.
Result<X509Ptr> ParseCertificateDer(std::span<const uint8_t> der);
// What `cert` names (certificate.h); kCorrupt when its roles do not parse.
struct CertificateInfo;
Result<CertificateInfo> DescribeCertificate(X509* cert);
std::string CertificateName(X509* cert);    // the subject's common name
std::string CertificateSerial(X509* cert);  // hex
std::string CrlPem(X509_CRL* crl);
std::string PrivateKeyPem(EVP_PKEY* key);

}  // namespace weightcast::trust
