#include "trust/trust_anchor.h"

#include <sys/stat.h>

#include <map>
#include <mutex>

#include <openssl/err.h>

#include "trust/openssl_handles.h"
#include "util/file.h"

namespace weightcast::trust {

namespace {

using SharedStore = std::shared_ptr<X509_STORE>;

// The file's identity and version as stat sees them: a rename over it changes the inode.
struct FileStamp {
  ino_t inode = 0;
  int64_t mtime_ns = 0;
  off_t size = -1;
  bool operator==(const FileStamp&) const = default;
};

FileStamp StampOf(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {st.st_ino, static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
          st.st_size};
}

// A store that trusts `ca` and, when `crl_pem` is not empty, checks revocation against it.
Result<SharedStore> MakeStore(X509* ca, const std::string& ca_name, std::string_view crl_pem) {
  SharedStore store(X509_STORE_new(), X509_STORE_free);
  if (!store || X509_STORE_add_cert(store.get(), ca) != 1) {
    return Internal(OpensslError("trust anchor: X509_STORE"));
  }
  if (!crl_pem.empty()) {
    WC_ASSIGN_OR_RETURN(X509CrlPtr crl, ParseCrlPem(crl_pem, "the CRL"));
    if (X509_CRL_verify(crl.get(), X509_get0_pubkey(ca)) != 1) {
      ERR_clear_error();
      return InvalidArgument("the CRL is not signed by the CA '" + ca_name + "'");
    }
    if (X509_STORE_add_crl(store.get(), crl.get()) != 1) {
      return Internal(OpensslError("trust anchor: adding the CRL"));
    }
    X509_STORE_set_flags(store.get(), X509_V_FLAG_CRL_CHECK);
  }
  return store;
}

}  // namespace

struct TrustAnchor::State {
  X509Ptr ca;
  std::filesystem::path crl_path;  // empty: no file to watch
  mutable std::mutex mu;
  mutable SharedStore store;
  mutable FileStamp crl_stamp;
  mutable std::chrono::steady_clock::time_point next_check{};
  mutable std::string crl_error;

  // Certificates that passed, by their DER bytes: the same bytes checked against the same store
  // (the CRL unchanged) before they expire pass again, so a coordinator's or publisher's
  // certificate, checked with every decision and manifest, is verified once. Bounded: cleared
  // when full.
  struct Passed {
    std::shared_ptr<X509> cert;
    CertificateInfo info;
    SharedStore store;
  };
  static constexpr size_t kMaxPassed = 4096;  // a fleet's agents, about 1 KiB each
  mutable std::map<std::string, Passed, std::less<>> passed;

  // The store to verify with, re-reading the CRL file first when it changed.
  SharedStore Current(const std::string& ca_name) const {
    std::lock_guard lock(mu);
    const auto now = std::chrono::steady_clock::now();
    if (!crl_path.empty() && now >= next_check) {
      next_check = now + TrustAnchor::kCrlRecheck;
      const FileStamp stamp = StampOf(crl_path);
      if (!(stamp == crl_stamp)) {
        crl_stamp = stamp;
        Result<std::string> pem = ReadFileToString(crl_path, 64 << 20);
        Result<SharedStore> fresh =
            pem.ok() ? MakeStore(ca.get(), ca_name, *pem) : Result<SharedStore>(pem.status());
        if (fresh.ok()) {
          store = std::move(fresh).value();
          crl_error.clear();
        } else {
          crl_error = crl_path.string() + ": " + fresh.status().message();
        }
      }
    }
    return store;
  }
};

TrustAnchor::TrustAnchor(std::unique_ptr<State> state, std::string ca_name)
    : state_(std::move(state)), ca_name_(std::move(ca_name)) {}

TrustAnchor::~TrustAnchor() = default;

Result<std::shared_ptr<const TrustAnchor>> TrustAnchor::Load(const std::filesystem::path& ca_pem,
                                                             const std::filesystem::path& crl_pem) {
  Result<std::string> ca = ReadFileToString(ca_pem, 1 << 20);
  if (!ca.ok())
    return InvalidArgument("the CA certificate " + ca_pem.string() + ": " + ca.status().message());
  std::string crl;
  if (!crl_pem.empty()) {
    Result<std::string> read = ReadFileToString(crl_pem, 64 << 20);
    if (!read.ok())
      return InvalidArgument("the CRL " + crl_pem.string() + ": " + read.status().message());
    crl = std::move(read).value();
  }
  const FileStamp stamp = crl_pem.empty() ? FileStamp{} : StampOf(crl_pem);
  Result<std::shared_ptr<const TrustAnchor>> anchor = FromPem(*ca, crl);
  if (!anchor.ok()) {
    return anchor.status().WithContext(ca_pem.string() +
                                       (crl_pem.empty() ? "" : " and " + crl_pem.string()));
  }
  State& state = *(*anchor)->state_;
  state.crl_path = crl_pem;
  state.crl_stamp = stamp;
  state.next_check = std::chrono::steady_clock::now() + kCrlRecheck;
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
  WC_ASSIGN_OR_RETURN(state->store, MakeStore(state->ca.get(), ca_info.name, crl_pem));
  return std::shared_ptr<const TrustAnchor>(new TrustAnchor(std::move(state), ca_info.name));
}

std::string TrustAnchor::crl_error() const {
  std::lock_guard lock(state_->mu);
  return state_->crl_error;
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

Result<std::pair<std::shared_ptr<X509>, CertificateInfo>> TrustAnchor::CheckOnce(
    std::span<const uint8_t> certificate_der) const {
  const SharedStore store = state_->Current(ca_name_);
  const std::string_view key(reinterpret_cast<const char*>(certificate_der.data()),
                             certificate_der.size());
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  {
    std::lock_guard lock(state_->mu);
    auto it = state_->passed.find(key);
    if (it != state_->passed.end() && it->second.store == store &&
        now < it->second.info.not_after) {
      return std::make_pair(it->second.cert, it->second.info);
    }
  }
  WC_ASSIGN_OR_RETURN(X509Ptr parsed, ParseCertificateDer(certificate_der));
  std::shared_ptr<X509> cert(parsed.release(), X509_free);
  WC_ASSIGN_OR_RETURN(CertificateInfo info, Verified(store.get(), cert.get()));
  std::lock_guard lock(state_->mu);
  if (state_->passed.size() >= State::kMaxPassed) state_->passed.clear();
  state_->passed[std::string(key)] = State::Passed{cert, info, store};
  return std::make_pair(std::move(cert), std::move(info));
}

Result<CertificateInfo> TrustAnchor::Check(std::span<const uint8_t> certificate_der) const {
  WC_ASSIGN_OR_RETURN(auto checked, CheckOnce(certificate_der));
  return std::move(checked.second);
}

Result<CertificateInfo> TrustAnchor::CheckSigned(std::span<const uint8_t> certificate_der,
                                                 std::span<const uint8_t> message,
                                                 std::span<const uint8_t> signature) const {
  WC_ASSIGN_OR_RETURN(auto checked, CheckOnce(certificate_der));
  const std::shared_ptr<X509>& cert = checked.first;
  const CertificateInfo& info = checked.second;
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
