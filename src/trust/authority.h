// The cluster CA as `weightcast ca` keeps it: a directory with its certificate (ca.pem), its key
// (ca.key, mode 0600) and its revocation list (crl.pem). It issues node certificates that name
// their roles (roles.h) and revokes them. Keys are Ed25519 (docs/security.md says why).
// Not thread-safe; one `weightcast ca` process uses it at a time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

#include "trust/roles.h"

namespace weightcast::trust {

inline constexpr char kCaCertificateFile[] = "ca.pem";
inline constexpr char kCaKeyFile[] = "ca.key";
inline constexpr char kCaCrlFile[] = "crl.pem";

inline constexpr int64_t kDay = 86400;

struct IssueRequest {
  std::string name;  // the subject's common name: the host or the person
  Roles roles;
  std::optional<uint64_t> node_id{};  // binds the certificate to this node id (certificate.h)
  // Host names or IP addresses the certificate's holder serves TLS under, for a service that
  // clients check by host name (etcd). Such a certificate may have no weightcast role.
  std::vector<std::string> hosts{};
  int64_t valid_seconds = 365 * kDay;
  // When validity starts, relative to now (a negative start and a short validity make a
  // certificate that has already expired, for tests).
  int64_t start_offset_seconds = 0;
};

struct IssuedCertificate {
  std::string certificate_pem;
  std::string key_pem;
  std::string serial;  // hex
};

class Authority {
 public:
  // A new CA in memory: an Ed25519 key and a self-signed certificate named `name`.
  static Result<Authority> Create(std::string_view name, int64_t valid_seconds = 10 * 365 * kDay);
  // The CA kept in `dir` (ca.pem, ca.key, crl.pem). kInvalidArgument naming what is missing.
  static Result<Authority> Open(const std::filesystem::path& dir);

  Authority(Authority&&) noexcept;
  Authority& operator=(Authority&&) noexcept;
  ~Authority();

  // Writes ca.pem, ca.key (0600) and crl.pem into `dir` (made if missing). kAlreadyExists when
  // `dir` already holds a CA key: a CA is never replaced by accident.
  Status WriteNew(const std::filesystem::path& dir) const;
  // Replaces `dir`/crl.pem atomically with the current list.
  Status WriteCrl(const std::filesystem::path& dir) const;

  // A fresh key pair and its certificate, signed by this CA. kInvalidArgument for an empty name,
  // no roles, or a validity that is not positive.
  Result<IssuedCertificate> Issue(const IssueRequest& request) const;

  // Adds the certificate to the revocation list (call WriteCrl to publish it). kInvalidArgument
  // when this CA did not issue it; revoking twice is not an error. Returns its serial.
  Result<std::string> Revoke(std::string_view certificate_pem);

  std::string certificate_pem() const;
  // The revocation list, signed now, valid for a year (nodes refuse certificates once their CRL
  // has expired: re-run `weightcast ca crl` before then).
  Result<std::string> crl_pem() const;
  const std::vector<std::string>& revoked_serials() const;

 private:
  struct State;
  explicit Authority(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace weightcast::trust
