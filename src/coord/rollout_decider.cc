#include "coord/rollout_decider.h"

#include <algorithm>
#include <chrono>
#include <unordered_set>

namespace weightcast::coord {
namespace {

rollout::Time ToTime(net::TimePoint t) { return rollout::Time(t.time_since_epoch()); }

rollout::ChannelSnapshot Snapshot(const ChannelState& channel) {
  rollout::ChannelSnapshot s;
  for (const wire::VersionEntry& e : channel.versions) {
    s.versions.push_back(
        {Version(e.version()), static_cast<rollout::Decision>(e.decision()), e.abort_reason()});
  }
  s.current = Version(channel.current_version);
  return s;
}

DecisionChange ToChange(const rollout::TrackerAction& a) {
  return {.version = a.version.value(),
          .decision = static_cast<wire::Decision>(a.decision),
          .abort_reason = a.decision == rollout::Decision::kAbort ? a.reason : std::string()};
}

}  // namespace

// The enums are converted with static_cast: their numbers must stay equal.
static_assert(static_cast<int>(rollout::Decision::kCommit) == wire::DECISION_COMMIT);
static_assert(static_cast<int>(rollout::Decision::kAbort) == wire::DECISION_ABORT);
static_assert(static_cast<int>(rollout::Phase::kPrepared) == wire::PHASE_PREPARED);
static_assert(static_cast<int>(rollout::Phase::kCommitted) == wire::PHASE_COMMITTED);
static_assert(static_cast<int>(rollout::Phase::kFailed) == wire::PHASE_FAILED);

Result<std::shared_ptr<RolloutDecider>> RolloutDecider::Create(RolloutDeciderOptions options) {
  rollout::TrackerOptions check{.policy = options.policy,
                                .prepare_deadline = options.prepare_deadline,
                                .recovery_grace = options.recovery_grace};
  WC_RETURN_IF_ERROR(rollout::RolloutTracker::Create(check).status());
  auto decider = std::shared_ptr<RolloutDecider>(new RolloutDecider(options));
  if (options.clock != nullptr) decider->start_ = options.clock->Now();
  return decider;
}

net::TimePoint RolloutDecider::Now() {
  return options_.clock != nullptr ? options_.clock->Now() : *last_now_;
}

RolloutDecider::Channel& RolloutDecider::Get(const ChannelState& channel, net::TimePoint now) {
  auto it = channels_.find(channel.name);
  if (it != channels_.end()) return it->second;
  if (!start_) start_ = now;
  rollout::TrackerOptions o{.policy = options_.policy,
                            .prepare_deadline = options_.prepare_deadline,
                            .recovery_grace = std::max<net::Duration>(
                                net::Duration::zero(), *start_ + options_.recovery_grace - now)};
  auto tracker = rollout::RolloutTracker::Recover(o, ToTime(now), Snapshot(channel));
  if (!tracker.ok()) {
    // The log's own checks make this unreachable; start empty and let Reconcile adopt the log
    // as an external change, which takes the same state without Recover's consistency rules.
    tracker = rollout::RolloutTracker::Create(o);
  }
  return channels_.emplace(channel.name, Channel{std::move(tracker).value(), {}}).first->second;
}

void RolloutDecider::Reconcile(Channel& ch, const ChannelState& channel, net::TimePoint now,
                               std::vector<rollout::TrackerAction>& out) {
  rollout::RolloutTracker& t = ch.tracker;
  bool external = false;
  // Acknowledge, in order, what the log shows.
  std::vector<rollout::TrackerAction> unacked(t.unacked().begin(), t.unacked().end());
  for (const rollout::TrackerAction& a : unacked) {
    const wire::VersionEntry* e = channel.Find(a.version.value());
    const auto logged =
        e == nullptr ? rollout::Decision::kNone : static_cast<rollout::Decision>(e->decision());
    if (logged == a.decision) {
      t.OnPersisted(a.seq);
      continue;
    }
    // Decided otherwise in the log (its rollback aborted it): the record is stale.
    external = logged != rollout::Decision::kNone;
    break;
  }
  if (!external && t.unpersisted() == 0) {
    const rollout::Target target = t.target();
    external = target.version.value() != channel.newest() ||
               target.current.value() != channel.current_version;
    for (const wire::VersionEntry& e : channel.versions) {
      if (external) break;
      external = t.decision(Version(e.version())) != static_cast<rollout::Decision>(e.decision());
    }
  }
  if (external) {
    auto actions = t.OnExternalChange(ToTime(now), Snapshot(channel));
    out.insert(out.end(), actions.begin(), actions.end());
  }
}

DecisionChange RolloutDecider::OnPublish(const ChannelState& channel,
                                         const wire::VersionEntry& entry) {
  DecisionChange change{
      .version = entry.version(), .decision = wire::DECISION_NONE, .abort_reason = {}};
  if ((options_.clock == nullptr && !last_now_) || channel.name.empty()) {
    // A channel's first version (the coordinator passes an empty state), or no time known yet
    // (no clock given, no Decide call so far): decide what needs neither and let the next
    // Decide take the version from the log.
    if (options_.policy.kind == rollout::PolicyKind::kEach) {
      change.decision = wire::DECISION_COMMIT;
    }
    return change;
  }
  const net::TimePoint now = Now();
  Channel& ch = Get(channel, now);
  std::vector<rollout::TrackerAction> ignored;  // handed out by the next Decide (unacked)
  Reconcile(ch, channel, now, ignored);
  auto actions = ch.tracker.OnPublished(ToTime(now), Version(entry.version()));
  if (!actions.ok()) return change;  // not above the newest: the log refuses it anyway
  for (const rollout::TrackerAction& a : *actions) {
    if (a.version.value() == entry.version()) change = ToChange(a);
  }
  return change;
}

std::vector<DecisionChange> RolloutDecider::Decide(const ChannelState& channel,
                                                   std::span<const NodeProgress> nodes,
                                                   net::TimePoint now) {
  last_now_ = now;
  Channel& ch = Get(channel, now);
  rollout::RolloutTracker& t = ch.tracker;
  const rollout::Time at = ToTime(now);
  std::vector<rollout::TrackerAction> out;
  Reconcile(ch, channel, now, out);

  std::set<PeerId> followers;
  for (const NodeProgress& n : nodes) {
    if (!n.source) followers.insert(n.node);
  }
  auto add = [&](std::span<const rollout::TrackerAction> actions) {
    out.insert(out.end(), actions.begin(), actions.end());
  };
  for (PeerId gone : ch.members) {
    if (!followers.contains(gone)) add(t.OnMemberDead(at, gone));
  }
  for (PeerId id : followers) {
    if (!ch.members.contains(id)) add(t.OnMemberJoined(at, id));
  }
  ch.members = std::move(followers);
  for (const NodeProgress& n : nodes) {
    if (n.progress == nullptr) continue;
    const wire::ChannelProgress& p = *n.progress;
    if (n.source) {
      // A source reports FAILED for a version it can no longer serve (an origin that changed).
      if (p.phase() == wire::PHASE_FAILED) {
        add(t.OnSourceFailed(at, Version(p.version()), p.error()));
      }
      continue;
    }
    if (p.phase() > wire::PHASE_FAILED) continue;  // SEEDING is a publisher's
    add(t.OnProgress(at, n.node, Version(p.version()), static_cast<rollout::Phase>(p.phase()),
                     p.error()));
  }
  add(t.OnTimer(at));  // deadlines; hands out again what the log does not show yet

  std::vector<DecisionChange> changes;
  std::unordered_set<uint64_t> seen;
  for (const rollout::TrackerAction& a : out) {
    if (a.kind != rollout::TrackerActionKind::kPersistDecision) continue;
    if (!seen.insert(a.seq).second) continue;
    changes.push_back(ToChange(a));
  }
  return changes;
}

std::optional<rollout::PendingStatus> RolloutDecider::pending(const std::string& channel) const {
  auto it = channels_.find(channel);
  if (it == channels_.end()) return std::nullopt;
  return it->second.tracker.pending();
}

}  // namespace weightcast::coord
