#include "trust/signing_identity.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "trust/openssl_handles.h"
#include "util/file.h"

namespace weightcast::trust {

struct SigningIdentity::Key {
  EvpPkeyPtr pkey;
};

SigningIdentity::SigningIdentity(std::unique_ptr<Key> key, std::vector<uint8_t> der,
                                 CertificateInfo info)
    : key_(std::move(key)), certificate_der_(std::move(der)), info_(std::move(info)) {}

SigningIdentity::~SigningIdentity() = default;

Result<std::shared_ptr<const SigningIdentity>> SigningIdentity::Load(
    const std::filesystem::path& cert, const std::filesystem::path& key) {
  struct stat st {};
  if (::stat(key.c_str(), &st) != 0) {
    return InvalidArgument("the key file " + key.string() + ": " + std::strerror(errno));
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return InvalidArgument("the key file " + key.string() +
                           " is readable by others than its owner; chmod 600 it");
  }
  Result<std::string> cert_pem = ReadFileToString(cert, 1 << 20);
  if (!cert_pem.ok()) {
    return InvalidArgument("the certificate " + cert.string() + ": " + cert_pem.status().message());
  }
  Result<std::string> key_pem = ReadFileToString(key, 1 << 20);
  if (!key_pem.ok()) {
    return InvalidArgument("the key file " + key.string() + ": " + key_pem.status().message());
  }
  Result<std::shared_ptr<const SigningIdentity>> identity = FromPem(*cert_pem, *key_pem);
  if (!identity.ok()) {
    return identity.status().WithContext(cert.string() + " and " + key.string());
  }
  return identity;
}

Result<std::shared_ptr<const SigningIdentity>> SigningIdentity::FromPem(std::string_view cert_pem,
                                                                        std::string_view key_pem) {
  WC_ASSIGN_OR_RETURN(X509Ptr cert, ParseCertificatePem(cert_pem, "the certificate"));
  auto key = std::make_unique<Key>();
  WC_ASSIGN_OR_RETURN(key->pkey, ParsePrivateKeyPem(key_pem, "the key file"));
  if (EVP_PKEY_get_id(key->pkey.get()) != EVP_PKEY_ED25519) {
    return InvalidArgument("the key is not Ed25519 (make keys with `weightcast ca issue`)");
  }
  if (X509_check_private_key(cert.get(), key->pkey.get()) != 1) {
    return InvalidArgument(OpensslError("the key is not the certificate's"));
  }
  WC_ASSIGN_OR_RETURN(CertificateInfo info, DescribeCertificate(cert.get()));
  return std::shared_ptr<const SigningIdentity>(
      new SigningIdentity(std::move(key), CertificateDer(cert.get()), std::move(info)));
}

Result<std::vector<uint8_t>> SigningIdentity::Sign(std::span<const uint8_t> message) const {
  EvpMdCtxPtr ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_->pkey.get()) != 1) {
    return Internal(OpensslError("sign: EVP_DigestSignInit"));
  }
  std::vector<uint8_t> signature(kSignatureBytes);
  size_t size = signature.size();
  if (EVP_DigestSign(ctx.get(), signature.data(), &size, message.data(), message.size()) != 1 ||
      size != kSignatureBytes) {
    return Internal(OpensslError("sign: EVP_DigestSign"));
  }
  return signature;
}

}  // namespace weightcast::trust
