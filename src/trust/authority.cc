#include "trust/authority.h"

#include <sys/stat.h>

#include <algorithm>
#include <ctime>
#include <utility>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/rand.h>

#include "trust/certificate.h"
#include "trust/openssl_handles.h"
#include "util/file.h"

namespace weightcast::trust {
namespace {

using BignumPtr = std::unique_ptr<BIGNUM, OpensslFree<BN_free>>;
using Asn1TimePtr = std::unique_ptr<ASN1_TIME, OpensslFree<ASN1_TIME_free>>;
using Asn1IntegerPtr = std::unique_ptr<ASN1_INTEGER, OpensslFree<ASN1_INTEGER_free>>;
using ExtensionPtr = std::unique_ptr<X509_EXTENSION, OpensslFree<X509_EXTENSION_free>>;

struct RevokedEntry {
  std::string serial;  // hex
  int64_t revoked_at = 0;
};

Result<EvpPkeyPtr> NewEd25519Key() {
  EvpPkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"));
  if (!key) return Internal(OpensslError("Ed25519 key generation"));
  return key;
}

// 127 random bits: unique without a serial file, positive as RFC 5280 wants.
Status SetRandomSerial(X509* cert) {
  uint8_t bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return Internal(OpensslError("RAND_bytes"));
  bytes[0] &= 0x7f;
  bytes[0] |= 0x01;  // never a short serial
  BignumPtr bn(BN_bin2bn(bytes, sizeof(bytes), nullptr));
  if (!bn || BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert)) == nullptr) {
    return Internal(OpensslError("certificate serial"));
  }
  return Status::Ok();
}

Status AddExtension(X509* issuer, X509* subject, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, subject, nullptr, nullptr, 0);
  ExtensionPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(subject, ext.get(), -1) != 1) {
    return Internal(OpensslError("certificate extension '" + value + "'"));
  }
  return Status::Ok();
}

// A certificate for `key` named `name`, valid from now + start for `valid` seconds, with its
// issuer's name taken from `issuer` (itself when null).
Result<X509Ptr> NewCertificate(std::string_view name, EVP_PKEY* key, X509* issuer, int64_t start,
                               int64_t valid) {
  X509Ptr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), X509_VERSION_3) != 1) {
    return Internal(OpensslError("X509_new"));
  }
  WC_RETURN_IF_ERROR(SetRandomSerial(cert.get()));
  if (X509_gmtime_adj(X509_getm_notBefore(cert.get()), static_cast<long>(start)) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(start + valid)) ==
          nullptr) {
    return Internal(OpensslError("certificate validity"));
  }
  X509_NAME* subject = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(name.data()),
                                 static_cast<int>(name.size()), -1, 0) != 1) {
    return InvalidArgument(OpensslError("certificate name '" + std::string(name) + "'"));
  }
  X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : subject);
  if (X509_set_pubkey(cert.get(), key) != 1) return Internal(OpensslError("X509_set_pubkey"));
  return cert;
}

Status SignCertificate(X509* cert, EVP_PKEY* ca_key) {
  if (X509_sign(cert, ca_key, nullptr) <= 0) return Internal(OpensslError("X509_sign"));
  return Status::Ok();
}

Asn1TimePtr TimeAt(int64_t unix_seconds) {
  return Asn1TimePtr(ASN1_TIME_set(nullptr, static_cast<time_t>(unix_seconds)));
}

}  // namespace

struct Authority::State {
  X509Ptr certificate;
  EvpPkeyPtr key;
  std::vector<RevokedEntry> revoked;
  std::vector<std::string> serials;  // revoked, for revoked_serials()
};

Authority::Authority(std::unique_ptr<State> state) : state_(std::move(state)) {}
Authority::Authority(Authority&&) noexcept = default;
Authority& Authority::operator=(Authority&&) noexcept = default;
Authority::~Authority() = default;

Result<Authority> Authority::Create(std::string_view name, int64_t valid_seconds) {
  if (name.empty()) return InvalidArgument("the CA needs a name");
  if (valid_seconds <= 0) return InvalidArgument("the CA's validity must be positive");
  auto state = std::make_unique<State>();
  WC_ASSIGN_OR_RETURN(state->key, NewEd25519Key());
  WC_ASSIGN_OR_RETURN(state->certificate,
                      NewCertificate(name, state->key.get(), nullptr, 0, valid_seconds));
  X509* cert = state->certificate.get();
  WC_RETURN_IF_ERROR(AddExtension(cert, cert, NID_basic_constraints, "critical,CA:TRUE"));
  WC_RETURN_IF_ERROR(AddExtension(cert, cert, NID_key_usage, "critical,keyCertSign,cRLSign"));
  WC_RETURN_IF_ERROR(AddExtension(cert, cert, NID_subject_key_identifier, "hash"));
  WC_RETURN_IF_ERROR(SignCertificate(cert, state->key.get()));
  return Authority(std::move(state));
}

Result<Authority> Authority::Open(const std::filesystem::path& dir) {
  const std::filesystem::path cert_path = dir / kCaCertificateFile;
  const std::filesystem::path key_path = dir / kCaKeyFile;
  const std::filesystem::path crl_path = dir / kCaCrlFile;
  Result<std::string> cert_pem = ReadFileToString(cert_path, 1 << 20);
  if (!cert_pem.ok()) {
    return InvalidArgument(dir.string() + " holds no CA (" + cert_pem.status().message() +
                           "); make one with `weightcast ca init`");
  }
  struct stat st {};
  if (::stat(key_path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return InvalidArgument("the CA key " + key_path.string() +
                           " is readable by others than its owner; chmod 600 it");
  }
  Result<std::string> key_pem = ReadFileToString(key_path, 1 << 20);
  if (!key_pem.ok()) {
    return InvalidArgument("the CA key " + key_path.string() + ": " + key_pem.status().message());
  }
  auto state = std::make_unique<State>();
  WC_ASSIGN_OR_RETURN(state->certificate, ParseCertificatePem(*cert_pem, cert_path.string()));
  WC_ASSIGN_OR_RETURN(state->key, ParsePrivateKeyPem(*key_pem, key_path.string()));
  if (X509_check_private_key(state->certificate.get(), state->key.get()) != 1) {
    return InvalidArgument(
        OpensslError(key_path.string() + " is not the key of " + cert_path.string()));
  }
  if (std::filesystem::exists(crl_path)) {
    WC_ASSIGN_OR_RETURN(std::string crl_pem, ReadFileToString(crl_path, 64 << 20));
    WC_ASSIGN_OR_RETURN(X509CrlPtr crl, ParseCrlPem(crl_pem, crl_path.string()));
    STACK_OF(X509_REVOKED)* entries = X509_CRL_get_REVOKED(crl.get());
    for (int i = 0; i < sk_X509_REVOKED_num(entries); ++i) {
      const X509_REVOKED* entry = sk_X509_REVOKED_value(entries, i);
      BignumPtr bn(ASN1_INTEGER_to_BN(X509_REVOKED_get0_serialNumber(entry), nullptr));
      char* hex = bn ? BN_bn2hex(bn.get()) : nullptr;
      if (hex == nullptr) return Corrupt(crl_path.string() + ": unreadable serial");
      std::tm tm{};
      int64_t at = 0;
      if (ASN1_TIME_to_tm(X509_REVOKED_get0_revocationDate(entry), &tm) == 1) at = timegm(&tm);
      state->revoked.push_back({hex, at});
      state->serials.emplace_back(hex);
      OPENSSL_free(hex);
    }
  }
  return Authority(std::move(state));
}

Status Authority::WriteNew(const std::filesystem::path& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("create " + dir.string() + ": " + ec.message());
  if (std::filesystem::exists(dir / kCaKeyFile)) {
    return AlreadyExists(dir.string() + " already holds a CA key (" + kCaKeyFile +
                         "); a CA is never replaced: choose another directory");
  }
  WC_RETURN_IF_ERROR(
      WritePrivateFile(dir / kCaKeyFile, PrivateKeyPem(state_->key.get()), /*overwrite=*/false));
  WC_RETURN_IF_ERROR(WriteFileAtomic(dir / kCaCertificateFile, certificate_pem()));
  return WriteCrl(dir);
}

Status Authority::WriteCrl(const std::filesystem::path& dir) const {
  WC_ASSIGN_OR_RETURN(std::string crl, crl_pem());
  return WriteFileAtomic(dir / kCaCrlFile, crl);
}

Result<IssuedCertificate> Authority::Issue(const IssueRequest& request) const {
  if (request.name.empty()) return InvalidArgument("a certificate needs a name");
  if (request.roles.empty() && request.hosts.empty()) {
    return InvalidArgument("a certificate needs at least one role (or a host, for a service)");
  }
  for (const std::string& host : request.hosts) {
    if (host.empty() || host.find_first_of(",:/ ") != std::string::npos ||
        host.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") !=
            std::string::npos) {
      return InvalidArgument("host '" + host + "': a DNS name or an IPv4 address");
    }
  }
  if (request.valid_seconds <= 0)
    return InvalidArgument("a certificate's validity must be positive");
  WC_ASSIGN_OR_RETURN(EvpPkeyPtr key, NewEd25519Key());
  X509* ca = state_->certificate.get();
  WC_ASSIGN_OR_RETURN(X509Ptr cert,
                      NewCertificate(request.name, key.get(), ca, request.start_offset_seconds,
                                     request.valid_seconds));
  if (request.node_id == std::optional<uint64_t>(0)) {
    return InvalidArgument("a certificate's node id must be 1 or more");
  }
  std::string alt_names;
  if (request.node_id.has_value()) {
    alt_names = "URI:" + std::string(kNodeUriPrefix) + std::to_string(*request.node_id);
  }
  for (const std::string& uri : RoleUris(request.roles)) {
    alt_names += (alt_names.empty() ? "URI:" : ",URI:") + uri;
  }
  for (const std::string& host : request.hosts) {
    const bool ip = host.find_first_not_of("0123456789.") == std::string::npos;
    alt_names += (alt_names.empty() ? "" : ",") + std::string(ip ? "IP:" : "DNS:") + host;
  }
  WC_RETURN_IF_ERROR(AddExtension(ca, cert.get(), NID_basic_constraints, "critical,CA:FALSE"));
  WC_RETURN_IF_ERROR(AddExtension(ca, cert.get(), NID_key_usage, "critical,digitalSignature"));
  WC_RETURN_IF_ERROR(AddExtension(ca, cert.get(), NID_ext_key_usage, "serverAuth,clientAuth"));
  WC_RETURN_IF_ERROR(AddExtension(ca, cert.get(), NID_subject_alt_name, alt_names));
  WC_RETURN_IF_ERROR(AddExtension(ca, cert.get(), NID_subject_key_identifier, "hash"));
  WC_RETURN_IF_ERROR(AddExtension(ca, cert.get(), NID_authority_key_identifier, "keyid:always"));
  WC_RETURN_IF_ERROR(SignCertificate(cert.get(), state_->key.get()));
  WC_ASSIGN_OR_RETURN(CertificateInfo info, DescribeCertificate(cert.get()));
  return IssuedCertificate{CertificatePem(cert.get()), PrivateKeyPem(key.get()), info.serial};
}

Result<std::string> Authority::Revoke(std::string_view certificate_pem) {
  WC_ASSIGN_OR_RETURN(X509Ptr cert, ParseCertificatePem(certificate_pem, "the certificate"));
  if (X509_verify(cert.get(), X509_get0_pubkey(state_->certificate.get())) != 1) {
    ERR_clear_error();
    return InvalidArgument("the certificate was not issued by this CA");
  }
  WC_ASSIGN_OR_RETURN(CertificateInfo info, DescribeCertificate(cert.get()));
  if (std::find(state_->serials.begin(), state_->serials.end(), info.serial) ==
      state_->serials.end()) {
    state_->revoked.push_back({info.serial, static_cast<int64_t>(std::time(nullptr))});
    state_->serials.push_back(info.serial);
  }
  return info.serial;
}

std::string Authority::certificate_pem() const { return CertificatePem(state_->certificate.get()); }

const std::vector<std::string>& Authority::revoked_serials() const { return state_->serials; }

Result<std::string> Authority::crl_pem() const {
  X509CrlPtr crl(X509_CRL_new());
  const int64_t now = std::time(nullptr);
  Asn1TimePtr last = TimeAt(now);
  Asn1TimePtr next = TimeAt(now + 365 * kDay);
  if (!crl || !last || !next || X509_CRL_set_version(crl.get(), 1) != 1 ||
      X509_CRL_set_issuer_name(crl.get(), X509_get_subject_name(state_->certificate.get())) != 1 ||
      X509_CRL_set1_lastUpdate(crl.get(), last.get()) != 1 ||
      X509_CRL_set1_nextUpdate(crl.get(), next.get()) != 1) {
    return Internal(OpensslError("CRL"));
  }
  for (const RevokedEntry& entry : state_->revoked) {
    BIGNUM* raw = nullptr;
    if (BN_hex2bn(&raw, entry.serial.c_str()) == 0) return Internal("CRL: serial " + entry.serial);
    BignumPtr bn(raw);
    Asn1IntegerPtr serial(BN_to_ASN1_INTEGER(bn.get(), nullptr));
    Asn1TimePtr at = TimeAt(entry.revoked_at);
    X509_REVOKED* revoked = X509_REVOKED_new();
    if (revoked == nullptr || !serial || !at ||
        X509_REVOKED_set_serialNumber(revoked, serial.get()) != 1 ||
        X509_REVOKED_set_revocationDate(revoked, at.get()) != 1 ||
        X509_CRL_add0_revoked(crl.get(), revoked) != 1) {
      X509_REVOKED_free(revoked);
      return Internal(OpensslError("CRL entry"));
    }
  }
  X509_CRL_sort(crl.get());
  if (X509_CRL_sign(crl.get(), state_->key.get(), nullptr) <= 0) {
    return Internal(OpensslError("X509_CRL_sign"));
  }
  return CrlPem(crl.get());
}

}  // namespace weightcast::trust
