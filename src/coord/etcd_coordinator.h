// A coordinator process of the highly available control plane (docs/coordinator_etcd.md): it
// stands by until it wins the etcd election, then runs the very same Coordinator as the embedded
// one, over the version log in etcd (EtcdLogStore), for as long as its term lasts; then it stands
// by again.
//
//   standby:  StandbyServer on the listen address (every request: "the leader is at ADDR"),
//             campaigning whenever the leader key is free, watching it otherwise
//   leading:  Coordinator::Open (replays the log from etcd) and Serve on the same address,
//             renewing the lease every TTL/3; the term ends when etcd says the lease expired,
//             when a write is fenced (another coordinator leads), or on Stop (which resigns,
//             so that a standby takes over at once)
//
// While etcd has no quorum the leader keeps serving what is decided (agents keep their current
// version and heartbeat), every write fails (nothing commits), and `status` says why.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <weightcast/status.h>

#include "coord/coordinator.h"
#include "coord/etcd_client.h"
#include "net/transport.h"

namespace weightcast::coord {

struct EtcdCoordinatorOptions {
  std::string endpoints;  // "http://127.0.0.1:2379,..."
  std::string prefix;     // the cluster's keys, e.g. "/weightcast/default/"
  std::string listen;     // ip:port (port 0: any, then kept for every later term)
  std::string advertise;  // the address standbys send clients to; empty: the bound address
  std::chrono::seconds lease_ttl{3};
  std::chrono::milliseconds etcd_timeout{2000};
  // https:// endpoints: the CA of etcd's certificate, and the coordinator's own certificate and
  // key, presented to an etcd that requires client certificates.
  std::string etcd_ca_file;
  std::string etcd_cert_file;
  std::string etcd_key_file;
  net::Transport* transport = nullptr;
  // The options of each term's Coordinator (a fresh Decider each time: a new leader gives its
  // agents the recovery grace). open_store is set by the runner.
  std::function<Result<CoordinatorOptions>()> coordinator_options;
  std::function<void(const std::string& bound_address)> on_listening;
  net::LogFn log = net::LogToStderr;
};

class EtcdCoordinator {
 public:
  explicit EtcdCoordinator(EtcdCoordinatorOptions options);
  ~EtcdCoordinator();

  // Blocks until Stop(). Fails on a bad option, an address in use, or a state in etcd that does
  // not replay (kCorrupt); etcd being unreachable is waited out, not a failure.
  Status Run();
  // Any thread, idempotent: ends the current phase and Run returns (a leader resigns first).
  void Stop();

 private:
  bool Stopping();
  // Sleeps up to `d`, less when stopped.
  void Pause(std::chrono::milliseconds d);
  Result<std::unique_ptr<net::Listener>> Listen(const std::string& address);

  EtcdCoordinatorOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  Coordinator* serving_ = nullptr;  // the term's coordinator while it serves
  std::function<void()> stop_standby_;
};

}  // namespace weightcast::coord
