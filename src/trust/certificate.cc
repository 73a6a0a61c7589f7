#include "trust/certificate.h"

#include <charconv>
#include <ctime>
#include <vector>

#include <openssl/bn.h>

#include "trust/openssl_handles.h"

namespace weightcast::trust {
namespace {}  // namespace

std::string CertificateSerial(X509* cert) {
  BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr);
  if (bn == nullptr) return "";
  char* hex = BN_bn2hex(bn);
  std::string out = hex != nullptr ? hex : "";
  OPENSSL_free(hex);
  BN_free(bn);
  return out;
}

std::string CertificateName(X509* cert) {
  const X509_NAME* subject = X509_get_subject_name(cert);
  const int at = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (at < 0) return "";
  const ASN1_STRING* value = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at));
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(value)),
                     static_cast<size_t>(ASN1_STRING_length(value)));
}

namespace {

std::vector<std::string> UriNames(X509* cert) {
  std::vector<std::string> uris;
  GeneralNamesPtr names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  if (!names) return uris;
  for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type != GEN_URI) continue;
    const ASN1_IA5STRING* uri = name->d.uniformResourceIdentifier;
    uris.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                      static_cast<size_t>(ASN1_STRING_length(uri)));
  }
  return uris;
}

}  // namespace

Result<X509Ptr> ParseCertificateDer(std::span<const uint8_t> der) {
  if (der.empty() || der.size() > kMaxCertificateBytes) {
    return Corrupt("certificate: " + std::to_string(der.size()) + " bytes, expected 1 to " +
                   std::to_string(kMaxCertificateBytes));
  }
  const unsigned char* cursor = der.data();
  X509Ptr cert(d2i_X509(nullptr, &cursor, static_cast<long>(der.size())));
  if (!cert) return Corrupt(OpensslError("certificate: not DER"));
  if (cursor != der.data() + der.size()) return Corrupt("certificate: bytes after its end");
  return cert;
}

std::vector<uint8_t> CertificateDer(X509* cert) {
  const int size = i2d_X509(cert, nullptr);
  if (size <= 0) return {};
  std::vector<uint8_t> der(static_cast<size_t>(size));
  unsigned char* cursor = der.data();
  i2d_X509(cert, &cursor);
  return der;
}

Result<CertificateInfo> DescribeCertificate(X509* cert) {
  CertificateInfo info;
  info.name = CertificateName(cert);
  info.serial = CertificateSerial(cert);
  std::tm tm{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) != 1) {
    return Corrupt("certificate '" + info.name + "': unreadable notAfter");
  }
  info.not_after = static_cast<int64_t>(timegm(&tm));
  std::vector<std::string> uris = UriNames(cert);
  for (auto it = uris.begin(); it != uris.end();) {
    if (!std::string_view(*it).starts_with(kNodeUriPrefix)) {
      ++it;
      continue;
    }
    const std::string_view digits = std::string_view(*it).substr(kNodeUriPrefix.size());
    uint64_t id = 0;
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
    if (error != std::errc() || end != digits.data() + digits.size() || id == 0 ||
        info.node_id.has_value()) {
      return Corrupt("certificate '" + info.name + "': bad node URI '" + *it + "'");
    }
    info.node_id = id;
    it = uris.erase(it);
  }
  Result<Roles> roles = ParseRoleUris(uris);
  if (!roles.ok()) return Corrupt("certificate '" + info.name + "': " + roles.status().message());
  info.roles = std::move(roles).value();
  return info;
}

Result<CertificateInfo> ReadCertificatePem(std::string_view pem) {
  WC_ASSIGN_OR_RETURN(X509Ptr cert, ParseCertificatePem(pem, "the file"));
  return DescribeCertificate(cert.get());
}

Result<CertificateInfo> ReadCertificate(std::span<const uint8_t> der) {
  WC_ASSIGN_OR_RETURN(X509Ptr cert, ParseCertificateDer(der));
  return DescribeCertificate(cert.get());
}

}  // namespace weightcast::trust
