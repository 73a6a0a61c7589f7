#include "sim/rollout.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <queue>
#include <random>

#include "rollout/participant.h"
#include "rollout/tracker.h"

namespace weightcast::sim {
namespace {

using rollout::Decision;
using rollout::Participant;
using rollout::ParticipantAction;
using rollout::ParticipantActionKind;
using rollout::Phase;
using rollout::Report;
using rollout::RolloutTracker;
using rollout::Target;
using rollout::TrackerAction;

constexpr Version kOld(1);  // current everywhere before the run
constexpr Version kNew(2);  // the version published at publish_at

rollout::Time ToTime(double seconds) {
  return rollout::Time(static_cast<int64_t>(std::llround(seconds * 1e9)));
}
PeerId ToPeer(uint32_t receiver) { return PeerId(receiver + 1); }

enum class Ev : uint8_t {
  kHeartbeat,     // periodic heartbeat of node `node` (reschedules itself)
  kHeartbeatNow,  // pushed heartbeat (kReport)
  kWake,          // long poll: a wake reaches the coordinator
  kHoldExpire,    // long poll: a held heartbeat's wait is over (generation in `seq`)
  kArrive,        // a heartbeat reaches the coordinator (report in `report`)
  kReplySend,     // the coordinator answers `node` after its durable writes
  kReply,         // the reply (target in `target`) reaches the node
  kPersisted,     // a decision record is durable (seq in `seq`)
  kComplete,      // the node's fetch finished (data plane)
  kStoreDone,     // the node's store operation `op` for `version` finished
  kSweep,         // the coordinator's dead-member sweep and deadlines
};

enum class StoreOp : uint8_t { kCommit, kSwitch, kAbort };

struct Event {
  double t;
  uint64_t order;
  Ev kind;
  uint32_t node = 0;
  uint64_t seq = 0;
  StoreOp op = StoreOp::kCommit;
  Version version;
  Report report;
  Target target;
};

Event Make(double t, Ev kind, uint32_t node = 0) {
  Event e{};
  e.t = t;
  e.kind = kind;
  e.node = node;
  return e;
}

struct Later {
  bool operator()(const Event& a, const Event& b) const {
    return a.t > b.t || (a.t == b.t && a.order > b.order);
  }
};

struct Agent {
  std::optional<Participant> participant;
  bool fetching = false;        // a kFetch of kNew is outstanding
  bool member = false;          // the coordinator counts it (heard, not marked dead)
  double last_heard = -1;       // at the coordinator
  std::optional<Report> known;  // last report the coordinator passed to the tracker
  // Long poll, at the coordinator: a heartbeat of this node is held; which one (generation);
  // answer the next one at once (a wake came while none was held); the target last sent.
  bool held = false;
  uint64_t hold_gen = 0;
  bool wake_pending = false;
  std::optional<Target> sent;
  bool waiting_reply = false;     // at the node: a heartbeat is out (long poll)
  bool decided_prepared = false;  // prepared at the coordinator when the decision was taken
  double committed_at = -1;
};

class RolloutSim {
 public:
  RolloutSim(const RolloutConfig& config, std::span<const RolloutNode> nodes)
      : cfg_(config), nodes_(nodes), rng_(config.seed) {}
  Result<RolloutResult> Run();

 private:
  void Push(Event e) {
    e.order = order_++;
    queue_.push(std::move(e));
  }
  bool Alive(uint32_t i, double now) const {
    return now >= nodes_[i].joins_at && (nodes_[i].dies_at < 0 || now < nodes_[i].dies_at);
  }
  void SendHeartbeat(double now, uint32_t i);
  Status ApplyParticipant(double now, uint32_t i, std::span<const ParticipantAction> actions);
  // Persists the tracker's records (each takes persist_delay, one after another); returns when
  // the last is durable.
  double ApplyTracker(double now, std::span<const TrackerAction> actions);
  bool Settled(double now) const;

  RolloutConfig cfg_;
  std::span<const RolloutNode> nodes_;
  std::mt19937_64 rng_;
  std::vector<Agent> agents_;
  std::optional<RolloutTracker> tracker_;
  std::priority_queue<Event, std::vector<Event>, Later> queue_;
  uint64_t order_ = 0;
  double disk_free_at_ = 0;  // the coordinator's log writes one record at a time
  RolloutResult result_;
};

void RolloutSim::SendHeartbeat(double now, uint32_t i) {
  ++result_.heartbeats;
  agents_[i].waiting_reply = true;
  Event e{};
  e.t = now + cfg_.latency;
  e.kind = Ev::kArrive;
  e.node = i;
  e.report = agents_[i].participant->report();
  Push(std::move(e));
}

Status RolloutSim::ApplyParticipant(double now, uint32_t i,
                                    std::span<const ParticipantAction> actions) {
  Agent& a = agents_[i];
  // Copied: answering one action (OnStaged at once) invalidates the span.
  const std::vector<ParticipantAction> todo(actions.begin(), actions.end());
  for (const ParticipantAction& act : todo) {
    switch (act.kind) {
      case ParticipantActionKind::kFetch: {
        if (act.version != kNew) {
          return Internal("sim rollout: node " + std::to_string(i + 1) + " asked to fetch " +
                          std::to_string(act.version.value()));
        }
        a.fetching = true;
        const double done = nodes_[i].complete_at;
        if (done >= 0 && done <= now) {
          a.fetching = false;
          WC_RETURN_IF_ERROR(
              ApplyParticipant(now, i, a.participant->OnStaged(ToTime(now), kNew, {})));
        }
        break;
      }
      case ParticipantActionKind::kAbortStaging:
      case ParticipantActionKind::kCommit:
      case ParticipantActionKind::kSwitch: {
        if (act.kind == ParticipantActionKind::kAbortStaging) a.fetching = false;
        Event e{};
        e.t = now + cfg_.commit_delay;
        e.kind = Ev::kStoreDone;
        e.node = i;
        e.version = act.version;
        e.op = act.kind == ParticipantActionKind::kCommit   ? StoreOp::kCommit
               : act.kind == ParticipantActionKind::kSwitch ? StoreOp::kSwitch
                                                            : StoreOp::kAbort;
        Push(std::move(e));
        break;
      }
      case ParticipantActionKind::kRunHook:
        // No engine hook is configured (ParticipantOptions::hook is false); answered anyway.
        WC_RETURN_IF_ERROR(
            ApplyParticipant(now, i, a.participant->OnHookDone(ToTime(now), act.version, {})));
        break;
      case ParticipantActionKind::kRequestRollback:
        break;  // only after a failed hook under HookFailure::kRollback, never configured here
      case ParticipantActionKind::kReport:
        if (cfg_.long_poll) {
          // The heartbeat out may be held: wake it; the reply makes the node heartbeat again,
          // with this progress.
          if (a.waiting_reply) {
            Push(Make(now + cfg_.latency, Ev::kWake, i));
          } else {
            Push(Make(now, Ev::kHeartbeatNow, i));
          }
        } else if (cfg_.push) {
          Push(Make(now, Ev::kHeartbeatNow, i));
        }
        break;
    }
  }
  return Status::Ok();
}

double RolloutSim::ApplyTracker(double now, std::span<const TrackerAction> actions) {
  double done = now;
  for (const TrackerAction& act : actions) {
    if (act.version == kNew && act.kind == rollout::TrackerActionKind::kPersistDecision &&
        result_.decided_at < 0) {
      // Who counted for this decision (what the coordinator last heard from each member).
      uint32_t members = 0, prepared = 0;
      for (Agent& a : agents_) {
        if (!a.member) continue;
        ++members;
        a.decided_prepared =
            a.known && a.known->version == kNew &&
            (a.known->phase == Phase::kPrepared || a.known->phase == Phase::kCommitted);
        prepared += a.decided_prepared ? 1 : 0;
      }
      result_.members_at_decision = members;
      result_.prepared_at_decision = prepared;
    }
    disk_free_at_ = std::max(disk_free_at_, now) + cfg_.persist_delay;
    done = disk_free_at_;
    Event e{};
    e.t = disk_free_at_;
    e.kind = Ev::kPersisted;
    e.seq = act.seq;
    e.version = act.version;
    Push(std::move(e));
  }
  return done;
}

bool RolloutSim::Settled(double now) const {
  if (tracker_->decision(kNew) == Decision::kNone) return false;
  for (size_t i = 0; i < agents_.size(); ++i) {
    const RolloutNode& n = nodes_[i];
    if (n.dies_at >= 0 && n.dies_at <= now) continue;  // gone for good
    if (std::isinf(n.joins_at)) continue;              // never comes
    if (n.joins_at > now) return false;
    const Agent& a = agents_[i];
    if (tracker_->decision(kNew) == Decision::kCommit) {
      if (a.committed_at < 0) return false;
    } else if (!a.participant->settled() || a.fetching) {
      return false;
    }
  }
  return true;
}

Result<RolloutResult> RolloutSim::Run() {
  const RolloutConfig& c = cfg_;
  if (!(c.heartbeat_interval > 0) || !(c.heartbeat_timeout > 0) || !(c.prepare_deadline > 0)) {
    return InvalidArgument("sim rollout: heartbeat interval, timeout and deadline must be > 0");
  }
  if (c.latency < 0 || c.persist_delay < 0 || c.commit_delay < 0) {
    return InvalidArgument("sim rollout: latency and delays must be >= 0");
  }
  rollout::TrackerOptions to;
  to.policy = c.policy;
  to.prepare_deadline = ToTime(c.prepare_deadline);
  to.recovery_grace = ToTime(c.heartbeat_timeout);
  // The channel's history: version 1 committed and current, long before the run.
  rollout::ChannelSnapshot history;
  history.versions.push_back(rollout::VersionRecord{kOld, Decision::kCommit, "initial"});
  history.current = kOld;
  const double before = c.publish_at - 10 * (c.heartbeat_timeout + 1);
  WC_ASSIGN_OR_RETURN(RolloutTracker tracker, RolloutTracker::Recover(to, ToTime(before), history));
  tracker_.emplace(std::move(tracker));

  const size_t n = nodes_.size();
  agents_.resize(n);
  result_.node_committed_at.assign(n, -1);
  rollout::LocalState local;
  local.current = kOld;
  local.kept = {kOld};
  std::uniform_real_distribution<double> phase(0, c.heartbeat_interval);
  for (size_t i = 0; i < n; ++i) {
    Agent& a = agents_[i];
    WC_ASSIGN_OR_RETURN(Participant p, Participant::Create(rollout::ParticipantOptions{}, local));
    a.participant.emplace(std::move(p));
    const uint32_t node = static_cast<uint32_t>(i);
    const double jitter = phase(rng_);
    if (nodes_[i].joins_at <= c.publish_at) {
      // Registered and heartbeating before the publication: a member, last heard just now.
      a.member = true;
      a.last_heard = c.publish_at;
      tracker_->OnMemberJoined(ToTime(c.publish_at), ToPeer(node));
      Push(Make(c.publish_at + jitter, Ev::kHeartbeat, node));
    } else if (!std::isinf(nodes_[i].joins_at)) {
      Push(Make(nodes_[i].joins_at, Ev::kHeartbeat, node));
    }
    if (nodes_[i].complete_at >= 0) Push(Make(nodes_[i].complete_at, Ev::kComplete, node));
    if (nodes_[i].complete_at >= 0) {
      result_.last_prepared_at = std::max(result_.last_prepared_at, nodes_[i].complete_at);
    }
  }
  WC_ASSIGN_OR_RETURN(auto published, tracker_->OnPublished(ToTime(c.publish_at), kNew));
  ApplyTracker(c.publish_at, published);
  const double sweep = std::min(c.heartbeat_interval / 4, 0.1);
  Push(Make(c.publish_at + sweep, Ev::kSweep));

  double last_event = c.publish_at;
  for (const RolloutNode& node : nodes_) {
    last_event = std::max({last_event, node.complete_at, node.dies_at});
    if (!std::isinf(node.joins_at)) last_event = std::max(last_event, node.joins_at);
  }
  const double limit =
      std::max(last_event, c.publish_at + c.prepare_deadline) + 10 * (c.heartbeat_timeout + 1);
  double now = c.publish_at;
  bool settled = false;
  while (!queue_.empty() && !settled) {
    Event e = queue_.top();
    queue_.pop();
    now = e.t;
    if (now > limit) break;
    const uint32_t i = e.node;
    switch (e.kind) {
      case Ev::kHeartbeat:
        if (nodes_[i].dies_at >= 0 && now >= nodes_[i].dies_at) break;  // dead: silence
        if (c.long_poll && agents_[i].waiting_reply) break;             // one outstanding at a time
        SendHeartbeat(now, i);
        // Long poll: the next heartbeat goes out when the reply comes back.
        if (!c.long_poll) Push(Make(now + c.heartbeat_interval, Ev::kHeartbeat, i));
        break;
      case Ev::kHeartbeatNow:
        if (Alive(i, now) && !(c.long_poll && agents_[i].waiting_reply)) SendHeartbeat(now, i);
        break;
      case Ev::kArrive: {
        Agent& a = agents_[i];
        a.last_heard = now;
        double reply_at = now;
        if (!a.member) {
          a.member = true;
          a.known.reset();
          reply_at = std::max(reply_at,
                              ApplyTracker(now, tracker_->OnMemberJoined(ToTime(now), ToPeer(i))));
        }
        // Like the coordinator, the tracker hears a member's progress when it changed.
        if (!a.known || a.known->version != e.report.version || a.known->phase != e.report.phase) {
          a.known = e.report;
          reply_at = std::max(
              reply_at,
              ApplyTracker(now, tracker_->OnProgress(ToTime(now), ToPeer(i), e.report.version,
                                                     e.report.phase, e.report.error)));
        }
        if (c.long_poll && !a.wake_pending && reply_at == now && a.sent &&
            *a.sent == tracker_->target()) {
          // Nothing new for it: hold the heartbeat until the target changes or the wait ends.
          a.held = true;
          Event x = Make(now + c.heartbeat_interval, Ev::kHoldExpire, i);
          x.seq = ++a.hold_gen;
          Push(std::move(x));
          break;
        }
        a.wake_pending = false;
        Push(Make(reply_at, Ev::kReplySend, i));
        break;
      }
      case Ev::kWake: {
        Agent& a = agents_[i];
        a.last_heard = now;
        if (a.held) {
          a.held = false;
          Push(Make(now, Ev::kReplySend, i));
        } else {
          a.wake_pending = true;
        }
        break;
      }
      case Ev::kHoldExpire: {
        Agent& a = agents_[i];
        if (a.held && a.hold_gen == e.seq) {
          a.held = false;
          Push(Make(now, Ev::kReplySend, i));
        }
        break;
      }
      case Ev::kReplySend: {
        Event r{};
        r.t = now + c.latency;
        r.kind = Ev::kReply;
        r.node = i;
        r.target = tracker_->target();
        agents_[i].sent = r.target;
        Push(std::move(r));
        break;
      }
      case Ev::kReply:
        if (!Alive(i, now)) break;
        agents_[i].waiting_reply = false;
        WC_RETURN_IF_ERROR(
            ApplyParticipant(now, i, agents_[i].participant->OnTarget(ToTime(now), e.target)));
        if (c.long_poll && !agents_[i].waiting_reply) SendHeartbeat(now, i);
        break;
      case Ev::kPersisted:
        tracker_->OnPersisted(e.seq);
        if (c.long_poll) {
          // The target changed: every held heartbeat is answered now.
          for (size_t j = 0; j < n; ++j) {
            if (agents_[j].held) {
              agents_[j].held = false;
              Push(Make(now, Ev::kReplySend, uint32_t(j)));
            }
          }
        }
        if (e.version == kNew && result_.decided_at < 0 &&
            tracker_->decision(kNew) != Decision::kNone) {
          result_.decided_at = now;
          result_.decision = tracker_->decision(kNew);
          result_.reason = tracker_->reason(kNew);
        }
        break;
      case Ev::kComplete:
        if (!Alive(i, now) || !agents_[i].fetching) break;
        agents_[i].fetching = false;
        WC_RETURN_IF_ERROR(
            ApplyParticipant(now, i, agents_[i].participant->OnStaged(ToTime(now), kNew, {})));
        break;
      case Ev::kStoreDone: {
        if (!Alive(i, now)) break;
        Participant& p = *agents_[i].participant;
        std::span<const ParticipantAction> next;
        switch (e.op) {
          case StoreOp::kCommit:
            next = p.OnCommitted(ToTime(now), e.version, {});
            break;
          case StoreOp::kSwitch:
            next = p.OnSwitched(ToTime(now), e.version, {});
            break;
          case StoreOp::kAbort:
            next = p.OnAborted(ToTime(now), e.version, {});
            break;
        }
        if (p.current() == kNew && agents_[i].committed_at < 0) {
          agents_[i].committed_at = now;
          result_.node_committed_at[i] = now;
        }
        WC_RETURN_IF_ERROR(ApplyParticipant(now, i, next));
        break;
      }
      case Ev::kSweep: {
        for (size_t j = 0; j < n; ++j) {
          Agent& a = agents_[j];
          if (a.member && now - a.last_heard > c.heartbeat_timeout) {
            a.member = false;
            ++result_.marked_dead;
            ApplyTracker(now, tracker_->OnMemberDead(ToTime(now), ToPeer(uint32_t(j))));
          }
        }
        if (tracker_->next_deadline() <= ToTime(now)) {
          ApplyTracker(now, tracker_->OnTimer(ToTime(now)));
        }
        for (size_t j = 0; j < n; ++j) {
          Participant& p = *agents_[j].participant;
          if (Alive(uint32_t(j), now) && p.next_deadline() <= ToTime(now)) {
            WC_RETURN_IF_ERROR(ApplyParticipant(now, uint32_t(j), p.OnTimer(ToTime(now))));
          }
        }
        settled = Settled(now);
        Push(Make(now + sweep, Ev::kSweep));
        break;
      }
    }
  }
  result_.end_time = now;
  for (size_t i = 0; i < n; ++i) {
    const RolloutNode& node = nodes_[i];
    const Agent& a = agents_[i];
    if (a.committed_at >= 0) ++result_.committed;
    const bool live = node.dies_at < 0 && !std::isinf(node.joins_at);
    if (!live) continue;
    auto later = [&](double& slot) {
      if (slot == -2) return;  // someone never committed
      slot = a.committed_at < 0 ? -2 : std::max(slot, a.committed_at);
    };
    later(result_.all_committed_at);
    if (node.role == NodeRole::kHealthy) later(result_.healthy_committed_at);
    if (a.decided_prepared) later(result_.decided_nodes_committed_at);
  }
  for (double* v : {&result_.all_committed_at, &result_.healthy_committed_at,
                    &result_.decided_nodes_committed_at}) {
    if (*v == -2) *v = -1;
  }
  if (result_.decision == Decision::kNone) {
    result_.decision = tracker_->decision(kNew);
    result_.reason = tracker_->reason(kNew);
  }
  return std::move(result_);
}

}  // namespace

std::vector<RolloutNode> RolloutNodes(const FleetResult& result) {
  std::vector<RolloutNode> out;
  for (size_t i = 1; i < result.nodes.size(); ++i) {
    const NodeResult& r = result.nodes[i];
    RolloutNode n;
    n.complete_at = r.completed_at;
    n.dies_at = r.died_at;
    // The coordinator takes a quarantined node out of its decisions at once; the model counts it
    // out as a node that stopped there (at its heartbeat timeout, up to 3 s later).
    if (r.quarantined_at >= 0 && (n.dies_at < 0 || r.quarantined_at < n.dies_at)) {
      n.dies_at = r.quarantined_at;
    }
    // A late joiner the run ended before: never there.
    n.joins_at = r.joined_at < 0 ? std::numeric_limits<double>::infinity() : r.joined_at;
    n.role = r.role;
    out.push_back(n);
  }
  return out;
}

Result<RolloutResult> SimulateRollout(const RolloutConfig& config,
                                      std::span<const RolloutNode> nodes) {
  return RolloutSim(config, nodes).Run();
}

}  // namespace weightcast::sim
