#include "rollout/tracker.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace weightcast::rollout {
namespace {

std::string V(Version v) { return "version " + std::to_string(v.value()); }

}  // namespace

std::string_view TrackerActionKindName(TrackerActionKind kind) {
  switch (kind) {
    case TrackerActionKind::kPersistDecision:
      return "PersistDecision";
    case TrackerActionKind::kPersistRollback:
      return "PersistRollback";
  }
  return "?";
}

Result<RolloutTracker> RolloutTracker::Create(TrackerOptions options) {
  if (options.policy.kind == PolicyKind::kQuorum &&
      !(options.policy.fraction > 0.0 && options.policy.fraction <= 1.0)) {
    return InvalidArgument("quorum fraction " + std::to_string(options.policy.fraction) +
                           " is outside (0, 1]");
  }
  if (options.prepare_deadline <= Duration::zero()) {
    return InvalidArgument("prepare deadline must be positive");
  }
  if (options.recovery_grace < Duration::zero()) {
    return InvalidArgument("recovery grace must not be negative");
  }
  return RolloutTracker(std::move(options));
}

Result<RolloutTracker> RolloutTracker::Recover(TrackerOptions options, Time now,
                                               const ChannelSnapshot& snapshot) {
  WC_ASSIGN_OR_RETURN(RolloutTracker t, Create(std::move(options)));
  for (const VersionRecord& r : snapshot.versions) {
    if (r.version.value() == 0) return InvalidArgument("recovered state names version 0");
    if (t.versions_.contains(r.version)) {
      return InvalidArgument("recovered state names " + V(r.version) + " twice");
    }
    Entry e;
    e.decision = e.durable = r.decision;
    e.reason = e.durable_reason = r.reason;
    t.versions_.emplace(r.version, std::move(e));
    t.newest_ = std::max(t.newest_, r.version);
  }
  if (snapshot.current.value() != 0) {
    auto it = t.versions_.find(snapshot.current);
    if (it == t.versions_.end() || it->second.decision != Decision::kCommit) {
      return InvalidArgument("recovered current " + V(snapshot.current) +
                             " is not a committed version");
    }
  }
  t.current_ = t.durable_current_ = snapshot.current;
  t.grace_until_ = now + t.options_.recovery_grace;
  t.in_grace_ = true;
  // Undecided versions below the newest were superseded before the crash wrote their abort.
  for (auto& [v, e] : t.versions_) {
    if (e.decision != Decision::kNone || v == t.newest_) continue;
    t.Decide(v, Decision::kAbort, "superseded by " + V(t.newest_) + " (recovered)");
  }
  if (t.newest_.value() != 0 && t.versions_[t.newest_].decision == Decision::kNone) {
    if (t.options_.policy.kind == PolicyKind::kEach) {
      t.Decide(t.newest_, Decision::kCommit, "policy each");
    } else {
      t.pending_ = t.newest_;
      t.deadline_ = now + t.options_.prepare_deadline;
    }
  }
  // The decisions above come out of the first OnTimer (it re-emits unacknowledged records).
  t.actions_.clear();
  return t;
}

void RolloutTracker::Emit(TrackerAction action) {
  action.seq = next_seq_++;
  unacked_.push_back(action);
  actions_.push_back(std::move(action));
}

void RolloutTracker::Decide(Version version, Decision decision, std::string reason) {
  Entry& e = versions_[version];
  e.decision = decision;
  e.reason = reason;
  if (decision == Decision::kCommit) current_ = version;
  if (version == pending_) pending_ = Version();
  Emit(TrackerAction{TrackerActionKind::kPersistDecision, 0, version, decision, current_,
                     std::move(reason)});
}

void RolloutTracker::RecordRollback(Version to, std::string reason) {
  current_ = to;
  rolled_to_ = to;
  Emit(TrackerAction{TrackerActionKind::kPersistRollback, 0, to, Decision::kCommit, to,
                     std::move(reason)});
}

Result<std::span<const TrackerAction>> RolloutTracker::OnPublished(Time now, Version version) {
  if (version.value() == 0 || version <= newest_) {
    return InvalidArgument("published " + V(version) + " is not above the newest published " +
                           V(newest_));
  }
  actions_.clear();
  if (pending_.value() != 0) {
    Decide(pending_, Decision::kAbort, "superseded by " + V(version));
  }
  versions_[version] = Entry{};
  newest_ = version;
  if (options_.policy.kind == PolicyKind::kEach) {
    Decide(version, Decision::kCommit, "policy each");
  } else {
    pending_ = version;
    deadline_ = now + options_.prepare_deadline;
    Evaluate(now);
  }
  return Flush();
}

std::span<const TrackerAction> RolloutTracker::OnMemberJoined(Time now, PeerId node) {
  actions_.clear();
  // A (re)joining node reports afresh: what it said before a restart may no longer hold.
  members_[node] = Member{};
  Evaluate(now);
  return Flush();
}

std::span<const TrackerAction> RolloutTracker::OnMemberDead(Time now, PeerId node) {
  actions_.clear();
  members_.erase(node);
  Evaluate(now);
  return Flush();
}

std::span<const TrackerAction> RolloutTracker::OnMemberLeft(Time now, PeerId node) {
  return OnMemberDead(now, node);
}

std::span<const TrackerAction> RolloutTracker::OnProgress(Time now, PeerId node, Version version,
                                                          Phase phase, std::string_view error) {
  actions_.clear();
  members_[node] = Member{version, phase, std::string(error)};
  Evaluate(now);
  return Flush();
}

std::span<const TrackerAction> RolloutTracker::OnSourceFailed(Time now, Version version,
                                                              std::string_view error) {
  actions_.clear();
  if (version.value() != 0 && version == pending_) {
    Decide(pending_, Decision::kAbort,
           "the source cannot serve it: " +
               (error.empty() ? std::string("failed") : std::string(error)));
  }
  Evaluate(now);
  return Flush();
}

std::span<const TrackerAction> RolloutTracker::OnTimer(Time now) {
  actions_ = unacked_;
  Evaluate(now);
  return Flush();
}

Result<std::span<const TrackerAction>> RolloutTracker::OnRollback(Time /*now*/, Version to,
                                                                  std::string_view requested_by) {
  if (current_.value() == 0) {
    return FailedPrecondition("no version of the channel was ever committed");
  }
  if (to.value() == 0) {
    for (auto it = versions_.begin(); it != versions_.end() && it->first < current_; ++it) {
      if (it->second.decision == Decision::kCommit) to = it->first;
    }
    if (to.value() == 0) {
      return NotFound("no committed version below the current " + V(current_) + " to roll back to");
    }
  } else {
    auto it = versions_.find(to);
    if (it == versions_.end()) return NotFound(V(to) + " was never published");
    if (it->second.decision == Decision::kAbort) {
      return FailedPrecondition(V(to) + " was aborted (" + it->second.reason +
                                "); only a committed version can become current");
    }
    if (it->second.decision != Decision::kCommit) {
      return FailedPrecondition(V(to) + " is not committed yet");
    }
    if (to == current_) return FailedPrecondition(V(to) + " is already current");
  }
  actions_.clear();
  std::string reason = "rollback from " + V(current_) + " to " + V(to);
  if (!requested_by.empty()) reason += " requested by " + std::string(requested_by);
  if (pending_.value() != 0) Decide(pending_, Decision::kAbort, reason);
  RecordRollback(to, std::move(reason));
  return Flush();
}

void RolloutTracker::OnPersisted(uint64_t seq) {
  size_t n = 0;
  for (; n < unacked_.size() && unacked_[n].seq <= seq; ++n) {
    const TrackerAction& a = unacked_[n];
    if (a.kind == TrackerActionKind::kPersistDecision) {
      Entry& e = versions_[a.version];
      e.durable = a.decision;
      e.durable_reason = a.reason;
    }
    durable_current_ = a.current;
  }
  unacked_.erase(unacked_.begin(), unacked_.begin() + static_cast<ptrdiff_t>(n));
}

std::span<const TrackerAction> RolloutTracker::OnExternalChange(Time now,
                                                                const ChannelSnapshot& durable) {
  actions_.clear();
  unacked_.clear();
  for (const VersionRecord& r : durable.versions) {
    Entry& e = versions_[r.version];
    e.decision = e.durable = r.decision;
    e.reason = e.durable_reason = r.reason;
    if (r.version > newest_) {
      newest_ = r.version;
      if (r.decision == Decision::kNone) {
        pending_ = r.version;
        deadline_ = now + options_.prepare_deadline;
      }
    }
  }
  current_ = durable_current_ = durable.current;
  if (pending_.value() != 0 && versions_[pending_].decision != Decision::kNone) {
    pending_ = Version();
  }
  Evaluate(now);
  return Flush();
}

bool RolloutTracker::PreparedFor(const Member& m, Version v) const {
  return m.version == v && (m.phase == Phase::kPrepared || m.phase == Phase::kCommitted);
}

uint32_t RolloutTracker::Needed(uint32_t live) const {
  uint32_t needed = live;
  if (options_.policy.kind == PolicyKind::kQuorum) {
    // The epsilon keeps 0.8 x 5 at 4 despite binary fractions.
    needed = static_cast<uint32_t>(std::ceil(options_.policy.fraction * live - 1e-9));
  }
  // Nobody prepared is never enough: a version no follower verified cannot be committed.
  return std::max<uint32_t>(needed, 1);
}

std::optional<PendingStatus> RolloutTracker::pending() const {
  if (pending_.value() == 0) return std::nullopt;
  PendingStatus s;
  s.version = pending_;
  s.deadline = deadline_;
  for (const auto& [id, m] : members_) {
    ++s.live;
    if (PreparedFor(m, pending_)) ++s.prepared;
    if (m.version == pending_ && m.phase == Phase::kFailed) ++s.failed;
  }
  s.needed = Needed(s.live);
  return s;
}

void RolloutTracker::Evaluate(Time now) {
  if (pending_.value() == 0) return;
  if (in_grace_) {
    if (now < grace_until_) return;
    in_grace_ = false;
  }
  PendingStatus s = *pending();
  if (s.prepared >= s.needed) {
    std::string reason = std::to_string(s.prepared) + " of " + std::to_string(s.live) +
                         " live followers prepared (policy " + FormatCommitPolicy(options_.policy) +
                         ")";
    Decide(pending_, Decision::kCommit, std::move(reason));
    return;
  }
  if (s.failed > 0 && s.live - s.failed < s.needed) {
    // Name the lowest failed node, so the reason does not depend on hash order.
    PeerId worst;
    std::string error;
    bool found = false;
    for (const auto& [id, m] : members_) {
      if (m.version == pending_ && m.phase == Phase::kFailed && (!found || id < worst)) {
        worst = id;
        error = m.error;
        found = true;
      }
    }
    Decide(pending_, Decision::kAbort,
           std::to_string(s.failed) + " of " + std::to_string(s.live) + " live followers failed, " +
               std::to_string(s.needed) + " must prepare; node " + std::to_string(worst.value()) +
               ": " + (error.empty() ? "failed" : error));
    return;
  }
  if (now >= deadline_) {
    Decide(pending_, Decision::kAbort,
           "prepare deadline passed: " + std::to_string(s.prepared) + " of " +
               std::to_string(s.live) + " live followers prepared, " + std::to_string(s.needed) +
               " needed");
  }
}

Target RolloutTracker::target() const {
  Target t;
  t.version = newest_;
  t.current = durable_current_;
  if (auto it = versions_.find(newest_); it != versions_.end()) {
    t.decision = it->second.durable;
    if (t.decision == Decision::kAbort) t.abort_reason = it->second.durable_reason;
  }
  return t;
}

Decision RolloutTracker::decision(Version version) const {
  auto it = versions_.find(version);
  return it == versions_.end() ? Decision::kNone : it->second.durable;
}

std::string RolloutTracker::reason(Version version) const {
  auto it = versions_.find(version);
  return it == versions_.end() ? std::string() : it->second.durable_reason;
}

Time RolloutTracker::next_deadline() const {
  if (pending_.value() == 0) return Time::max();
  return in_grace_ ? grace_until_ : deadline_;
}

}  // namespace weightcast::rollout
