#include "trust/openssl_handles.h"

#include <openssl/err.h>
#include <openssl/pem.h>

namespace weightcast::trust {
namespace {

BioPtr ReadBio(std::string_view text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string DrainBio(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  return size > 0 ? std::string(data, static_cast<size_t>(size)) : std::string();
}

}  // namespace

std::string OpensslError(std::string_view what) {
  std::string out(what);
  const char* separator = ": ";
  while (unsigned long code = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof(buffer));
    out += separator;
    out += buffer;
    separator = "; ";
  }
  return out;
}

Result<X509Ptr> ParseCertificatePem(std::string_view pem, std::string_view what) {
  BioPtr bio = ReadBio(pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return InvalidArgument(OpensslError(std::string(what) + " holds no PEM certificate"));
  return cert;
}

Result<X509CrlPtr> ParseCrlPem(std::string_view pem, std::string_view what) {
  BioPtr bio = ReadBio(pem);
  X509CrlPtr crl(PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr));
  if (!crl) return InvalidArgument(OpensslError(std::string(what) + " holds no PEM CRL"));
  return crl;
}

Result<EvpPkeyPtr> ParsePrivateKeyPem(std::string_view pem, std::string_view what) {
  BioPtr bio = ReadBio(pem);
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) return InvalidArgument(OpensslError(std::string(what) + " holds no PEM private key"));
  return key;
}

std::string CertificatePem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  return DrainBio(bio.get());
}

std::string CrlPem(X509_CRL* crl) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509_CRL(bio.get(), crl);
  return DrainBio(bio.get());
}

std::string PrivateKeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  return DrainBio(bio.get());
}

}  // namespace weightcast::trust
