// A blocking client of etcd v3's JSON gateway (docs/coordinator_etcd.md): one HTTP/1.1 request
// per call (cpp-httplib), to the first endpoint that answers. A call that cannot reach any
// endpoint, or that etcd cannot serve now (no leader, no quorum, its own timeout), is
// kUnavailable; the client remembers since when calls fail, for `status`.
//
// While calls fail, writes fail fast (kUnavailable at once) for `retry_after`, so that a
// coordinator holding its lock does not wait out the timeout on every attempt; Probe()
// (the leader's lease keepalive) always tries, and its success ends the fast failing.
//
// Thread-safe: every call makes its own connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

#include "coord/etcd_json.h"

namespace weightcast::coord::etcd {

struct ClientOptions {
  // Each request's limit on one endpoint: connecting plus the answer.
  std::chrono::milliseconds timeout{2000};
  std::chrono::milliseconds retry_after{1000};
  // For https:// endpoints (etcd's own TLS with client certificates, docs/security.md): the CA
  // that issued etcd's certificate (required), and this client's certificate and key, which an
  // etcd started with --client-cert-auth requires.
  std::string ca_file{};
  std::string cert_file{};
  std::string key_file{};
};

class Client {
 public:
  // `endpoints`: "http://127.0.0.1:2379,http://127.0.0.1:22379" (the scheme may be left out:
  // http), or https:// ones (TLS: options.ca_file needed). kInvalidArgument for an empty list, a
  // malformed endpoint, or https without a CA.
  static Result<std::unique_ptr<Client>> Create(std::string_view endpoints,
                                                ClientOptions options = {});

  Result<RangeResult> Range(std::string_view key, std::string_view range_end = {},
                            int64_t limit = 0, bool serializable = false);
  Result<TxnResult> Commit(const Txn& txn);
  Result<LeaseGrantResult> LeaseGrant(int64_t ttl_seconds);
  // One keepalive of `lease`: its remaining TTL, 0 when etcd no longer knows it. Always tries,
  // even while failing fast (a probe of etcd's health).
  Result<int64_t> KeepAlive(int64_t lease);
  Status LeaseRevoke(int64_t lease);
  // Blocks until a change to [key, range_end) at or after `start_revision` arrives, or `wait`
  // passes (an empty list then). etcd reports a compacted start revision as an error.
  Result<std::vector<WatchEvent>> Watch(std::string_view key, std::string_view range_end,
                                        int64_t start_revision, std::chrono::milliseconds wait);

  // "" while the last call succeeded; otherwise since when calls fail and the last error.
  std::string Health() const;
  bool failing() const;
  const std::string& endpoints() const { return endpoints_text_; }

 private:
  struct Endpoint {
    std::string host;
    int port = 0;
    bool tls = false;
  };
  Client(std::vector<Endpoint> endpoints, std::string text, ClientOptions options);
  // POSTs `body` to `path` on each endpoint in turn from the last one that answered.
  Result<std::string> Post(std::string_view path, const std::string& body, bool probe);
  Status FailFast() const;
  void Succeeded();
  void Failed(const Status& status);

  const std::vector<Endpoint> endpoints_;
  const std::string endpoints_text_;
  const ClientOptions options_;
  mutable std::mutex mu_;
  size_t preferred_ = 0;
  bool failing_ = false;
  std::chrono::steady_clock::time_point failing_since_{};
  std::chrono::system_clock::time_point failing_since_wall_{};
  std::chrono::steady_clock::time_point last_failure_{};
  Status last_error_;
};

}  // namespace weightcast::coord::etcd
