#include "agent/rollout_driver.h"

#include <chrono>
#include <utility>
#include <vector>

#include "trust/decision_statement.h"
#include "trust/rollback_order.h"
#include "trust/signed_manifest.h"

namespace weightcast::agent {

namespace wire = coord::wire;
using rollout::ParticipantActionKind;

namespace {

std::string V(Version v) { return "v" + std::to_string(v.value()); }

// The node's swarm target is `v` (being fetched, complete or committed).
bool NodeHolds(const node::SwarmProgress& p, Version v) { return p.version == v; }

}  // namespace

Result<std::unique_ptr<RolloutDriver>> RolloutDriver::Create(RolloutDriverOptions options,
                                                             Store& store, node::SwarmNode& node) {
  WC_ASSIGN_OR_RETURN(EngineHook hook, EngineHook::Create(options.hook));
  rollout::LocalState state;
  auto current = store.Current(options.channel);
  if (current.ok()) {
    state.current = *current;
  } else if (current.status().code() != Code::kNotFound) {
    return current.status();
  }
  auto kept = store.List(options.channel);
  if (kept.ok()) {
    for (const VersionInfo& info : *kept) state.kept.push_back(info.version);
  } else if (kept.status().code() != Code::kNotFound) {
    return kept.status();
  }
  auto staging = store.ListStaging(options.channel);
  if (staging.ok()) {
    for (Version v : *staging) {
      auto staged = store.ResumeStaging(options.channel, v);
      // A staging the store cannot reopen is reported incomplete: fetching it again resumes or
      // replaces it.
      state.staging.push_back({v, staged.ok() && staged->complete()});
    }
  }
  rollout::ParticipantOptions po;
  po.hook = hook.enabled();
  po.hook_retries = options.hook_retries;
  po.hook_retry_backoff = options.hook_retry_backoff;
  po.hook_failure = options.hook_failure;
  po.retry_backoff = options.retry_backoff;
  WC_ASSIGN_OR_RETURN(rollout::Participant participant, rollout::Participant::Create(po, state));
  auto driver = std::unique_ptr<RolloutDriver>(
      new RolloutDriver(std::move(options), store, node, std::move(hook), std::move(participant)));
  driver->RefreshKept();
  return driver;
}

void RolloutDriver::RefreshKept() {
  kept_.clear();
  auto kept = store_.List(options_.channel);
  if (!kept.ok()) return;
  // A version held as payloads is no version to switch to: only the live tensors that applied
  // it held it whole (a rollback to it fetches it again).
  for (const VersionInfo& info : *kept) {
    if (!info.payloads) kept_.push_back(info.version);
  }
}

RolloutDriver::RolloutDriver(RolloutDriverOptions options, Store& store, node::SwarmNode& node,
                             EngineHook hook, rollout::Participant participant)
    : options_(std::move(options)),
      store_(store),
      node_(node),
      hook_(std::move(hook)),
      participant_(std::move(participant)) {}

RolloutDriver::~RolloutDriver() {
  if (hook_thread_.joinable()) hook_thread_.join();
  if (commit_thread_.joinable()) commit_thread_.join();
}

rollout::Time RolloutDriver::Now() const {
  const net::Clock& clock = options_.clock != nullptr ? *options_.clock : net::Clock::Real();
  return std::chrono::duration_cast<rollout::Time>(clock.Now().time_since_epoch());
}

wire::ChannelProgress RolloutDriver::Progress() const {
  const rollout::Report r = participant_.report();
  wire::ChannelProgress c;
  c.set_channel(options_.channel);
  c.set_version(r.version.value());
  c.set_phase(static_cast<wire::Phase>(r.phase));
  c.set_current_version(r.current.value());
  c.set_error(r.error);
  for (Version v : kept_) c.add_kept_versions(v.value());
  const node::SwarmProgress p = node_.progress();
  c.set_peers(p.peers);
  c.set_peers_ucx(p.peers_ucx);
  if (p.version == r.version) {
    c.set_chunks_done(p.chunks_done);
    c.set_chunks_total(p.chunks_total);
    c.set_bytes_done(p.bytes_done);
    c.set_bytes_total(p.bytes_total);
    c.set_bytes_received(p.bytes_received);
    c.set_bytes_sent(p.bytes_sent);
    c.set_delta(p.delta);
    c.set_waiting(p.Starved());
  }
  return c;
}

void RolloutDriver::OnTarget(const wire::ChannelTarget& target, coord::CoordinatorClient* client) {
  if (committing_.value() != 0) {
    pending_target_ = target;  // for when the commit's result is in (Poll)
    return;
  }
  rollout::Target t;
  t.version = Version(target.version());
  t.decision = static_cast<rollout::Decision>(target.decision());
  t.current = Version(target.current_version());
  t.abort_reason = target.abort_reason();
  RefuseUnsignedDecision(target, t);
  RefuseUnorderedRollback(target, t);
  last_target_ = t;
  Execute(participant_.OnTarget(Now(), t), client);
  // A node restarted with its current version committed has nothing to fetch, and a node that
  // switched back to a kept version (a rollback) still has the newer one as its swarm target;
  // peers that catch up need the current version served: make it the swarm target (complete at
  // once). Only once settled: a version being prepared keeps the target.
  const Version current = participant_.current();
  const Version swarm_target = node_.progress().version;  // 0: none (a restarted node)
  if (fetching_.value() == 0 && client != nullptr && current.value() != 0 &&
      swarm_target != current && (swarm_target.value() == 0 || !participant_.wants(swarm_target)) &&
      participant_.settled()) {
    Status st = StartFetch(current, client);
    if (st.ok()) {
      Log("serving " + V(current) + " to peers");
    } else {
      Log("cannot serve " + V(current) + ": " + st.ToString());
    }
  }
}

void RolloutDriver::Poll(coord::CoordinatorClient* client) {
  if (committing_.value() != 0) {
    std::optional<std::pair<Version, Status>> committed;
    {
      std::lock_guard lock(result_mu_);
      committed.swap(commit_result_);
    }
    if (!committed) return;  // still committing: nothing else is fed to the participant
    commit_thread_.join();
    committing_ = Version();
    Execute(Committed(committed->first, committed->second), client);
    if (committing_.value() != 0) return;
    if (pending_target_) {
      const wire::ChannelTarget target = std::move(*pending_target_);
      pending_target_.reset();
      OnTarget(target, client);
      if (committing_.value() != 0) return;
    }
  }
  if (fetching_.value() != 0) {
    const node::SwarmProgress p = node_.progress();
    if (NodeHolds(p, fetching_) && (p.complete || !p.error.empty())) {
      const Version v = fetching_;
      fetching_ = Version();
      Status result = p.error.empty() ? Status::Ok() : Unavailable(p.error);
      if (result.ok()) Log("prepared " + V(v) + ": every wanted chunk verified");
      Execute(participant_.OnStaged(Now(), v, result), client);
    } else if (!NodeHolds(p, fetching_)) {
      const Version v = fetching_;
      fetching_ = Version();
      Execute(participant_.OnStaged(Now(), v, Aborted("the swarm node dropped the target")),
              client);
    }
  }
  std::optional<std::pair<Version, Status>> done;
  {
    std::lock_guard lock(result_mu_);
    done.swap(hook_result_);
  }
  if (done) {
    if (hook_thread_.joinable()) hook_thread_.join();
    if (done->second.ok()) {
      Log("engine hook for " + V(done->first) + " succeeded");
    } else {
      Log("engine hook for " + V(done->first) + " failed: " + done->second.ToString());
    }
    Execute(participant_.OnHookDone(Now(), done->first, done->second), client);
  }
  Execute(participant_.OnTimer(Now()), client);
}

Status RolloutDriver::StartFetch(Version v, coord::CoordinatorClient* client) {
  if (client == nullptr) return Unavailable("no coordinator connection to ask for the manifest");
  WC_ASSIGN_OR_RETURN(std::vector<uint8_t> signed_bytes, client->GetManifest(options_.channel, v));
  WC_ASSIGN_OR_RETURN(
      Manifest manifest,
      VerifySignedManifest(signed_bytes, {options_.secret, options_.trust_anchor.get()}));
  if (manifest.channel != options_.channel || manifest.version != v) {
    return Corrupt("the coordinator sent the manifest of " + manifest.channel + " " +
                   V(manifest.version) + " for " + V(v));
  }
  fetched_root_.emplace(v, manifest.root);
  return node_.Fetch(manifest, std::move(signed_bytes));
}

void RolloutDriver::StartCommit(Version v, coord::CoordinatorClient* client) {
  if (!NodeHolds(node_.progress(), v)) {
    // Prepared before a restart: the staging is on disk, the node does not have it as its
    // target yet. Fetching resumes the staging with every chunk already verified.
    Status st = StartFetch(v, client);
    if (!st.ok()) {
      const std::span<const rollout::ParticipantAction> more = Committed(v, st);
      queued_.insert(queued_.end(), more.begin(), more.end());  // RunActions goes on with them
      return;
    }
  }
  committing_ = v;
  commit_thread_ = std::thread([this, v] {
    Status st = node_.CommitTarget();
    {
      std::lock_guard lock(result_mu_);
      commit_result_.emplace(v, std::move(st));
    }
    if (options_.on_work_done) options_.on_work_done();
  });
}

void RolloutDriver::RefuseUnorderedRollback(const wire::ChannelTarget& target, rollout::Target& t) {
  const Version held = participant_.current();
  if (options_.trust_anchor == nullptr || t.current.value() == 0 || held.value() == 0 ||
      t.current >= held) {
    return;
  }
  const std::string& order = target.rollback_order();
  Result<trust::CertificateInfo> by = trust::RollbackAuthorized(
      {reinterpret_cast<const uint8_t*>(order.data()), order.size()}, *options_.trust_anchor,
      options_.channel, t.current.value(), held.value());
  if (by.ok()) {
    if (announced_rollback_ != t.current) {
      Log("rolling back to " + V(t.current) + " by order of operator '" + by->name + "'");
      announced_rollback_ = t.current;
    }
    return;
  }
  if (refused_rollback_ != t.current) {
    Log("refused " + by.status().message());
    refused_rollback_ = t.current;
  }
  t.current = held;  // stays; versions published later still come as they are committed
}

void RolloutDriver::RefuseUnsignedDecision(const wire::ChannelTarget& target, rollout::Target& t) {
  if (options_.trust_anchor == nullptr || t.decision == rollout::Decision::kNone) return;
  const std::string& bytes = target.signed_decision();
  if (!bytes.empty() && bytes == taken_decision_) return;  // verified when it was taken
  const bool commit = t.decision == rollout::Decision::kCommit;
  const Digest* staged = fetched_root_.has_value() && fetched_root_->first == t.version
                             ? &fetched_root_->second
                             : nullptr;
  Result<trust::CheckedDecision> taken = trust::DecisionAuthorized(
      {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, *options_.trust_anchor,
      options_.channel, t.version.value(), commit, staged, taken_decision_sequence_);
  const std::string what = std::string(commit ? "commit" : "abort") + " of " + V(t.version);
  if (taken.ok()) {
    Log("taking the " + what + " signed by coordinator '" + taken->signer.name + "'");
    taken_decision_ = bytes;
    taken_decision_sequence_ = taken->decision.sequence;
    return;
  }
  if (std::string refused = what + bytes; refused != refused_decision_) {
    Log("refused the " + what + ": " + taken.status().message());
    refused_decision_ = std::move(refused);
  }
  t.decision = rollout::Decision::kNone;  // the staging waits for a decision it can check
  t.abort_reason.clear();
}

std::span<const rollout::ParticipantAction> RolloutDriver::Committed(Version v, const Status& st) {
  Log((st.ok() ? "committed " : "commit of ") + V(v) +
      (st.ok() ? "" : " failed: " + st.ToString()));
  RefreshKept();
  return participant_.OnCommitted(Now(), v, st);
}

Status RolloutDriver::AbortStaging(Version v) {
  if (fetching_ == v) fetching_ = Version();
  // Why, for a reader streaming v: the coordinator's reason, or what replaced v.
  std::string reason = "dropped";
  if (last_target_.has_value()) {
    const rollout::Target& t = *last_target_;
    if (t.version == v && t.decision == rollout::Decision::kAbort) {
      reason = t.abort_reason.empty() ? "aborted by the coordinator" : t.abort_reason;
    } else if (t.version > v) {
      reason = "superseded by v" + std::to_string(t.version.value());
    } else if (t.current.value() != 0 && t.current < v) {
      reason = "the fleet rolled back to v" + std::to_string(t.current.value());
    }
  }
  if (NodeHolds(node_.progress(), v)) return node_.AbortTarget(reason);
  return store_.Abort(options_.channel, v, reason);
}

void RolloutDriver::Execute(std::span<const rollout::ParticipantAction> span,
                            coord::CoordinatorClient* client) {
  queued_.insert(queued_.end(), span.begin(), span.end());
  RunActions(client);
}

void RolloutDriver::RunActions(coord::CoordinatorClient* client) {
  // Results feed the participant, which returns more actions: work through them in order. A
  // commit runs on its own thread; the actions behind it wait for its result (Poll).
  while (!queued_.empty() && committing_.value() == 0) {
    const rollout::ParticipantAction a = queued_.front();
    queued_.erase(queued_.begin());
    std::span<const rollout::ParticipantAction> more;
    switch (a.kind) {
      case ParticipantActionKind::kFetch: {
        Status st = StartFetch(a.version, client);
        if (st.ok()) {
          fetching_ = a.version;
          Log("fetching " + V(a.version));
        } else {
          Log("cannot fetch " + V(a.version) + ": " + st.ToString());
          more = participant_.OnStaged(Now(), a.version, st);
        }
        break;
      }
      case ParticipantActionKind::kAbortStaging: {
        Status st = AbortStaging(a.version);
        Log("dropped the staging of " + V(a.version) + (st.ok() ? "" : ": " + st.ToString()));
        more = participant_.OnAborted(Now(), a.version, st);
        break;
      }
      case ParticipantActionKind::kCommit:
        StartCommit(a.version, client);  // its result comes back through Poll
        break;
      case ParticipantActionKind::kSwitch: {
        Status st = store_.Rollback(options_.channel, a.version).status();
        Log((st.ok() ? "switched current to " : "switch to ") + V(a.version) +
            (st.ok() ? " (kept version, nothing fetched)" : " failed: " + st.ToString()));
        RefreshKept();
        more = participant_.OnSwitched(Now(), a.version, st);
        break;
      }
      case ParticipantActionKind::kRunHook: {
        if (hook_thread_.joinable()) hook_thread_.join();  // the previous run reported already
        const Version v = a.version;
        const std::filesystem::path dir = store_.VersionPath(options_.channel, v);
        Log("running the engine hook for " + V(v) + " (attempt " + std::to_string(a.attempt) + ")");
        hook_thread_ = std::thread([this, v, dir] {
          Status st = hook_.Run(options_.channel, v, dir);
          {
            std::lock_guard lock(result_mu_);
            hook_result_.emplace(v, std::move(st));
          }
          if (options_.on_work_done) options_.on_work_done();
        });
        break;
      }
      case ParticipantActionKind::kRequestRollback: {
        if (client == nullptr) {
          Log("cannot ask for a rollback to " + V(a.to) + ": no coordinator connection");
          break;
        }
        auto r = client->Rollback(options_.channel, a.to);
        Log(r.ok() ? "asked the coordinator to roll back to " + V(*r) + " (engine hook failed)"
                   : "rollback request refused: " + r.status().ToString());
        break;
      }
      case ParticipantActionKind::kReport:
        report_now_ = true;
        break;
    }
    queued_.insert(queued_.end(), more.begin(), more.end());
  }
}

}  // namespace weightcast::agent
