// The agent daemon (`weightcast agent`, docs/agent.md): follows one channel of the coordinator,
// fetches each new version from its peers through a node::SwarmNode, serves what it holds, and
// commits a version when the coordinator decides so.
//
// Loop: register with the coordinator (again after every reconnect: a restarted coordinator
// forgets its members), heartbeat this node's ChannelProgress (FETCHING, PREPARED, COMMITTED),
// and act on the reply: the peer list goes to the node::SwarmNode; the channel's target goes to the
// RolloutDriver (agent/rollout_driver.h, the two-phase rollout's participant), which fetches a
// newer version (its signed manifest must verify with the cluster secret), reports it PREPARED,
// commits it when the coordinator decided COMMIT (Store::Commit: one atomic switch of
// `current`), drops its staging on ABORT, switches to a kept version on a rollback and runs the
// engine hook. The coordinator being unreachable stops nothing
// but the heartbeats: the swarm keeps fetching and serving, and the agent's coordinator session
// (coord/client_session.h, shared with the publisher) reconnects with exponential backoff. A
// failure that waiting will not fix (the coordinator refused our handshake: wrong secret or
// cluster) is logged at ERROR at once and retried slowly (a secret may be fixed on the
// coordinator's side); an unreachable coordinator is logged at ERROR once it has been away
// coord::kUnreachableErrorAfter, then reminded of every minute. While either lasts, /metrics has
// weightcast_agent_error{cause="..."} 1 (causes: coord::ConnectErrorCause).
//
// Threading: Run blocks the calling thread; Stop may be called from any thread (a signal
// handler thread included) and makes Run return.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "agent/engine_hook.h"
#include "net/transport.h"
#include "net/transport_select.h"
#include "node/swarm_node.h"
#include "rollout/participant.h"
#include "trust/trust_anchor.h"

namespace weightcast::agent {

struct AgentOptions {
  std::string coordinator;  // ip:port
  std::string store_dir;
  std::string channel;
  std::string listen = "127.0.0.1:0";  // where peers reach this node
  // Which transport carries peer connections (net/transport_select.h): auto = UCX with peers
  // that offer it and TCP otherwise. TCP by default (docs/transport_ucx.md, "Default").
  net::TransportKind transport = net::TransportKind::kTcp;
  net::TlsOptions tls;  // certificate mode: every connection mutual TLS (docs/security.md)
  std::string rack;
  std::vector<std::string> tensor_patterns;  // empty: every tensor
  std::string metrics;                       // ip:port for /metrics; empty: none
  uint64_t upload_limit = 0;                 // bytes/s; 0: unlimited
  uint64_t download_limit = 0;
  Version exit_after;  // Run returns OK once a version >= this is committed (0: never)
  std::string secret;
  // The cluster CA: manifests must be signed by a publisher it certifies for their channel.
  // Null: shared-secret development mode (manifests verify with the cluster secret).
  std::shared_ptr<const trust::TrustAnchor> trust_anchor;
  std::string cluster = "default";
  PeerId node_id;  // 0: random
  net::Duration reconnect_max = std::chrono::seconds(2);
  bool corrupt_uploads_for_testing = false;
  // What a chunk rebuilt from a delta payload is checked against
  // (node::SwarmNodeOptions::verify_result, docs/verification.md): the signed manifest's XXH3-128
  // when it has fast hashes, or SHA-256.
  codec::VerifyResult verify_result = codec::VerifyResult::kFast;
  // Engine hand-off after every change of current (docs/rollout.md): a command and/or a URL,
  // retried hook_retries times; a final failure is reported, and with kRollback the agent asks
  // the coordinator to roll the fleet back.
  EngineHookOptions hook{};
  uint32_t hook_retries = 2;
  rollout::HookFailure hook_failure = rollout::HookFailure::kReport;
  // Reads HTTP(S) origins (docs/origin.md): the agent offers the coordinator to fetch a share of
  // origin versions' chunks there, and does when granted one. Null: never.
  std::shared_ptr<origin::HttpClient> origin_http;
  // What the agent decides by time: its swarm node's protocol, its rollout's timers, when a
  // starved fetch is reported (tests pass a net::FakeClock). Null: the steady clock. Must
  // outlive the agent.
  const net::Clock* clock = nullptr;
  net::LogFn log = net::LogToStderr;
  // Errors that need a person (a refused handshake, a coordinator unreachable for long): logged
  // at ERROR. Empty: `log` with an "ERROR " prefix.
  net::LogFn log_error;
};

class Agent {
 public:
  // Checks the options (kInvalidArgument naming the bad one); opens nothing yet.
  static Result<std::unique_ptr<Agent>> Create(AgentOptions options);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Opens the store, starts serving peers and follows the coordinator until Stop() or, with
  // exit_after, until that version is committed. Fails when the store cannot be opened or the
  // listen address cannot be bound; coordinator outages are retried, not errors.
  Status Run();
  void Stop();

  // What this node's sampler attests of its live tensors for `version` (docs/live.md,
  // "Attestation"): sent with the next heartbeat, at once when one is held, and with every one
  // after until the next report. Safe from any thread.
  void ReportAttestation(Version version, std::span<const uint8_t> digest);
  // This node's sampler holds `version` (with `root`) whole in its live tensors: a delta onto it
  // is fetched as payloads only (node::SwarmNode::SetLiveBase). Safe from any thread.
  void SetLiveBase(Version version, const Digest& root);
  // Fetch `version`'s chunks in `order` first (node::SwarmNode::PreferChunks). Safe from any
  // thread; kept for a node that is not running yet.
  void PreferChunks(Version version, std::vector<ChunkIndex> order);

  // This node's id (after Create) and peer address (once Run listens).
  PeerId id() const;
  std::string address() const;
  node::SwarmProgress progress() const;
  // Why the last attempt to connect to and register with the coordinator failed (OK before the
  // first attempt and while connected; coord::IsPermanentConnectError tells a refusal from an
  // outage), and whether the agent ever registered. Safe from any thread.
  Status coordinator_error() const;
  bool registered() const;

  struct Impl;

 private:
  explicit Agent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightcast::agent
