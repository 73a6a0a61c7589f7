// The coordinator's side of the two-phase rollout of one channel (docs/rollout.md): a sans-I/O
// state machine that decides, per the channel's commit policy, whether the pending version is
// committed or aborted, and records rollbacks. The owner (the coordinator) feeds it events and
// carries out the actions it returns; it never touches sockets, clocks, threads or files.
//
// Durability contract: every decision comes out as a kPersist* action carrying a sequence
// number. The owner MUST write it durably (together with the channel's new current version)
// and then call OnPersisted(seq); only then does the decision appear in target(), which is
// what the owner answers heartbeats with. A decision therefore reaches no node before it is on
// disk, and a restarted coordinator (Recover) answers exactly what it answered before. If the
// write fails the owner simply does not acknowledge: OnTimer emits every unacknowledged record
// again (records are idempotent: writing one twice is harmless).
//
// Members are the live agents following the channel (not publishers, not tools). The owner
// reports them with OnMemberJoined (on register, and again when a dead one comes back) and
// OnMemberDead / OnMemberLeft. Progress from a node not yet joined makes it a member.
//
// Not thread-safe: one owner calls it from one thread, or under one mutex. Every event method
// returns a span over the actions it produced, valid until the next call on this object.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "rollout/types.h"

namespace weightcast::rollout {

struct TrackerOptions {
  CommitPolicy policy{};
  // A pending version not committed this long after its publication is aborted.
  Duration prepare_deadline = std::chrono::minutes(10);
  // After Recover, no decision is taken for this long, so that the members can register and
  // report again (a restarted coordinator starts with no members; `all` over no members must
  // not commit). Use the heartbeat timeout.
  Duration recovery_grace = std::chrono::seconds(3);
};

enum class TrackerActionKind : uint8_t {
  // Write durably: `version`'s decision is `decision` (kCommit or kAbort) for `reason`, and the
  // channel's current version is now `current`. Then call OnPersisted(seq).
  kPersistDecision,
  // Write durably: the channel's current version is now `current` (a rollback; `version` ==
  // `current`, `reason` says who asked). Then call OnPersisted(seq).
  kPersistRollback,
};
std::string_view TrackerActionKindName(TrackerActionKind kind);

struct TrackerAction {
  TrackerActionKind kind;
  uint64_t seq = 0;
  Version version;
  Decision decision = Decision::kNone;
  Version current;
  std::string reason;
  friend bool operator==(const TrackerAction&, const TrackerAction&) = default;
};

// What the owner persisted for a channel, handed to Recover after a restart.
struct VersionRecord {
  Version version;
  Decision decision = Decision::kNone;
  std::string reason;
};
struct ChannelSnapshot {
  std::vector<VersionRecord> versions;  // every published version (any order)
  Version current;                      // the last persisted current version (0: none)
};

// Where the pending version stands (for `weightcast status`, logs and metrics).
struct PendingStatus {
  Version version;
  uint32_t live = 0;      // live members
  uint32_t prepared = 0;  // live members that prepared it
  uint32_t failed = 0;    // live members that failed it
  uint32_t needed = 0;    // prepared members the policy needs to commit
  Time deadline{0};
};

class RolloutTracker {
 public:
  // A tracker for a channel with no history. kInvalidArgument for a quorum fraction outside
  // (0, 1] or a non-positive deadline.
  static Result<RolloutTracker> Create(TrackerOptions options);
  // A tracker that continues from what the owner persisted. A published version with no
  // decision that is the newest becomes pending again, with a fresh deadline from `now`; older
  // undecided ones (a crash between publication and their superseding abort) are aborted.
  // Every persisted decision is durable at once (target() shows it).
  static Result<RolloutTracker> Recover(TrackerOptions options, Time now,
                                        const ChannelSnapshot& snapshot);

  // `version` was published (and persisted by the owner). It must be above every published
  // version (kInvalidArgument otherwise; nothing changes). A pending older version is aborted as
  // superseded. Under `each` the new version is committed at once.
  Result<std::span<const TrackerAction>> OnPublished(Time now, Version version);

  std::span<const TrackerAction> OnMemberJoined(Time now, PeerId node);
  // A member that stopped heartbeating: no longer needed for a decision. Its progress is
  // forgotten; it reports again when it comes back.
  std::span<const TrackerAction> OnMemberDead(Time now, PeerId node);
  std::span<const TrackerAction> OnMemberLeft(Time now, PeerId node);

  // A member's heartbeat about the channel: it is in `phase` for `version` (error: why, for
  // kFailed). Reports about versions other than the pending one only update the member's
  // record.
  std::span<const TrackerAction> OnProgress(Time now, PeerId node, Version version, Phase phase,
                                            std::string_view error = {});

  // The channel's source reports that it cannot serve `version` any longer (a model seeded from
  // an HTTP origin whose content changed, docs/origin.md): a pending `version` is aborted with
  // `error` as the reason, as no node could complete it from what the source serves. Reports
  // about other versions change nothing.
  std::span<const TrackerAction> OnSourceFailed(Time now, Version version, std::string_view error);

  // Deadlines; re-emits unacknowledged records.
  std::span<const TrackerAction> OnTimer(Time now);

  // `weightcast rollback CHANNEL [VERSION]`: the fleet's current version becomes `to` (0: the
  // highest committed version below the current one). `to` must be a committed version other
  // than the current one: kFailedPrecondition / kNotFound / kInvalidArgument with a message
  // otherwise, and nothing changes. A pending version is aborted ("rollback to N"). The chosen
  // version is in the kPersistRollback action (and `rolled_to()`).
  Result<std::span<const TrackerAction>> OnRollback(Time now, Version to,
                                                    std::string_view requested_by = {});

  // The record `seq` (and every record before it) is durable.
  void OnPersisted(uint64_t seq);

  // The owner changed the durable state by a rule of its own (e.g. a rollback it recorded in
  // its log directly): `durable` becomes what the tracker knows, decided and durable alike.
  // Unacknowledged records are dropped (the durable state supersedes them); a pending version
  // that `durable` decides is no longer pending. The pending version keeps its deadline. New
  // decisions may follow (returned).
  std::span<const TrackerAction> OnExternalChange(Time now, const ChannelSnapshot& durable);

  // What to answer heartbeats with (durable decisions only).
  Target target() const;
  // The durable decision about `version` (kNone for an unknown or undecided one).
  Decision decision(Version version) const;
  // The reason recorded with a durable decision (empty when none).
  std::string reason(Version version) const;
  // The pending version and its counts, or nullopt when nothing is pending.
  std::optional<PendingStatus> pending() const;
  // The version chosen by the last successful OnRollback.
  Version rolled_to() const { return rolled_to_; }
  const CommitPolicy& policy() const { return options_.policy; }
  // Records not yet acknowledged by OnPersisted, ascending by seq.
  size_t unpersisted() const { return unacked_.size(); }
  std::span<const TrackerAction> unacked() const { return {unacked_.data(), unacked_.size()}; }
  // The earliest time OnTimer has something to do (a deadline or the end of the recovery
  // grace), or Time::max().
  Time next_deadline() const;

 private:
  struct Member {
    Version version;
    Phase phase = Phase::kIdle;
    std::string error;
  };
  struct Entry {
    Decision decision = Decision::kNone;  // decided (maybe not yet durable)
    std::string reason;
    Decision durable = Decision::kNone;  // what target() shows
    std::string durable_reason;
  };

  explicit RolloutTracker(TrackerOptions options) : options_(options) {}
  std::span<const TrackerAction> Flush() { return {actions_.data(), actions_.size()}; }
  void Decide(Version version, Decision decision, std::string reason);
  void RecordRollback(Version to, std::string reason);
  void Emit(TrackerAction action);
  // Commits or aborts the pending version if the policy says so.
  void Evaluate(Time now);
  uint32_t Needed(uint32_t live) const;
  bool PreparedFor(const Member& m, Version v) const;

  TrackerOptions options_;
  std::map<Version, Entry> versions_;
  std::unordered_map<PeerId, Member> members_;
  Version newest_;
  Version pending_;  // 0: none
  Time deadline_{0};
  Time grace_until_{0};
  bool in_grace_ = false;
  Version current_;          // decided
  Version durable_current_;  // what target() shows
  Version rolled_to_;
  uint64_t next_seq_ = 1;
  std::vector<TrackerAction> unacked_;  // ascending seq
  std::vector<TrackerAction> actions_;
};

}  // namespace weightcast::rollout
