// The agent's side of the two-phase rollout (docs/rollout.md), wired to the real pieces: a
// rollout::Participant decides, this class carries its actions out with the Store, the
// node::SwarmNode, the coordinator client and the EngineHook, and feeds the results back.
//
// The agent daemon calls it from its loop:
//   Progress()          -> the ChannelProgress of each heartbeat
//   OnTarget(target)    <- the ChannelTarget of each heartbeat reply
//   Poll()              between heartbeats: fetch completion, hook results, retries
//   report_now()        the participant wants the coordinator to hear something at once
//                       (PREPARED, COMMITTED, FAILED): heartbeat without waiting
//   on_work_done        (option) a hook or a commit finished while the daemon may be in a held
//                       heartbeat
//
// Fetch: the signed manifest comes from the coordinator and must verify with the cluster secret;
// node::SwarmNode::Fetch stages it (resuming a staging left by a restart). Commit:
// node::SwarmNode:: CommitTarget (Store::Commit, one atomic switch of `current`). Rollback:
// Store::Rollback to the kept version, nothing fetched. The engine hook and the commit each run
// on a thread of their own, so that heartbeats go on while an engine reloads or a version's
// files are made durable (on a disk, seconds per GB: longer than the coordinator's heartbeat
// timeout, which would declare a committing agent dead).
//
// An agent that follows a subset of tensors (--tensors) takes part like any other: PREPARED
// once every chunk of its tensors is verified, and its commit is a partial version in the store
// (Store::CommitPartial, through node::SwarmNode::CommitTarget), kept and switched back to like
// any.
//
// Not thread-safe: one thread (the daemon's loop) calls every method. The Store, node::SwarmNode
// and client passed in must outlive the calls that use them.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "agent/engine_hook.h"
#include "coord/client.h"
#include "coord/coord.pb.h"
#include "net/transport.h"
#include "node/swarm_node.h"
#include "rollout/participant.h"
#include "store/store.h"
#include "trust/trust_anchor.h"

namespace weightcast::agent {

struct RolloutDriverOptions {
  std::string channel;
  std::string secret;  // the cluster secret: manifests must verify with it
  // The cluster CA: manifests must be signed by a publisher it certifies for their channel.
  // Null: shared-secret development mode (manifests verify with the cluster secret).
  std::shared_ptr<const trust::TrustAnchor> trust_anchor;
  EngineHookOptions hook{};
  uint32_t hook_retries = 2;
  rollout::HookFailure hook_failure = rollout::HookFailure::kReport;
  net::Duration hook_retry_backoff = std::chrono::seconds(1);
  net::Duration retry_backoff = std::chrono::seconds(2);
  net::LogFn log = net::LogToStderr;
  // The rollout participant's time (its timers and retries). Null: the steady clock.
  const net::Clock* clock = nullptr;
  // Called on the hook's or the commit's thread when it finished (its result waits for Poll):
  // the daemon wakes a heartbeat the coordinator holds, so Poll runs at once. May be null.
  std::function<void()> on_work_done;
};

class RolloutDriver {
 public:
  // Reads what the store holds for the channel (current, kept and staging versions) and starts
  // the participant from it. Fails on a bad hook option or an unreadable store.
  static Result<std::unique_ptr<RolloutDriver>> Create(RolloutDriverOptions options, Store& store,
                                                       node::SwarmNode& node);
  ~RolloutDriver();  // waits for a running hook or commit
  RolloutDriver(const RolloutDriver&) = delete;
  RolloutDriver& operator=(const RolloutDriver&) = delete;

  coord::wire::ChannelProgress Progress() const;
  // `client` may be null (coordinator unreachable): work that needs it fails and is retried.
  void OnTarget(const coord::wire::ChannelTarget& target, coord::CoordinatorClient* client);
  void Poll(coord::CoordinatorClient* client);

  bool report_now() const { return report_now_; }
  void clear_report_now() { report_now_ = false; }
  // The version the participant has current (the store's).
  Version current() const { return participant_.current(); }
  // Whether a fetch or a hook is running (the daemon may wait on the swarm instead of sleeping).
  bool fetching() const { return fetching_.value() != 0; }

 private:
  RolloutDriver(RolloutDriverOptions options, Store& store, node::SwarmNode& node, EngineHook hook,
                rollout::Participant participant);
  void Log(const std::string& line) const { options_.log("agent: " + line); }
  rollout::Time Now() const;
  // Queues `actions` behind those still waiting and runs what it can (RunActions).
  void Execute(std::span<const rollout::ParticipantAction> actions,
               coord::CoordinatorClient* client);
  // Runs the queued actions in order, the participant's answers to each queued behind the rest;
  // stops while a commit runs (the rest waits for its result).
  void RunActions(coord::CoordinatorClient* client);
  // Starts the commit of `v` on commit_thread_; its result reaches the participant in Poll.
  void StartCommit(Version v, coord::CoordinatorClient* client);
  // What a commit's result does on the daemon's thread; returns the participant's answer.
  std::span<const rollout::ParticipantAction> Committed(Version v, const Status& st);
  // Makes `v` the swarm node's target (manifest from the coordinator, verified).
  Status StartFetch(Version v, coord::CoordinatorClient* client);
  Status AbortStaging(Version v);
  // Certificate mode: a target whose current version is below the one this node holds is a
  // rollback, taken only with an operator's order that authorizes it (trust::
  // RollbackAuthorized); otherwise `t` keeps the held version current, and the refusal is
  // logged once per target.
  void RefuseUnorderedRollback(const coord::wire::ChannelTarget& target, rollout::Target& t);
  // Certificate mode: a commit or abort in `target` is taken only with the coordinator's signed
  // statement of exactly it (trust/decision_statement.h): of this channel and version, about the
  // root this node staged, and not older than a decision taken before. Otherwise `t` reads
  // undecided (the staging waits), and the refusal is logged once per statement.
  void RefuseUnsignedDecision(const coord::wire::ChannelTarget& target, rollout::Target& t);
  // Re-reads the committed versions the store keeps (after a commit or a switch collects some).
  void RefreshKept();

  RolloutDriverOptions options_;
  Store& store_;
  node::SwarmNode& node_;
  EngineHook hook_;
  rollout::Participant participant_;
  Version fetching_;
  std::vector<Version> kept_;  // what the store keeps, reported to the coordinator
  bool report_now_ = false;

  // Actions not yet run: the rest of a batch while a commit runs, in order.
  std::vector<rollout::ParticipantAction> queued_;

  std::thread hook_thread_;
  std::mutex result_mu_;  // the results the hook's and the commit's threads leave for Poll
  std::optional<std::pair<Version, Status>> hook_result_;  // guarded by result_mu_

  // The commit running on commit_thread_ (0: none). Meanwhile the participant is not fed:
  // the newest target waits in pending_target_ (each heartbeat reply repeats it) and timers wait.
  Version committing_;
  std::thread commit_thread_;
  std::optional<std::pair<Version, Status>> commit_result_;  // guarded by result_mu_
  std::optional<coord::wire::ChannelTarget> pending_target_;
  std::optional<rollout::Target> last_target_;  // the newest target given to the participant
  Version refused_rollback_;                    // the rollback target last refused (logged once)
  Version announced_rollback_;  // the rollback target last taken by order (logged once)
  // Certificate mode: the newest decision statement taken (its sequence: older ones are
  // refused), the decision and statement last refused (logged once), and the root of the
  // manifest last fetched.
  std::string taken_decision_;
  uint64_t taken_decision_sequence_ = 0;
  std::string refused_decision_;
  std::optional<std::pair<Version, Digest>> fetched_root_;
};

}  // namespace weightcast::agent
