// The agent's side of the two-phase rollout of one channel (docs/rollout.md): a sans-I/O state
// machine fed the ChannelTarget of every heartbeat reply and the results of the work it asked
// for, returning the next work to do. The owner (the agent daemon) carries the actions out with
// its store, swarm node and engine hook, then reports each result with the matching On* call.
//
// Invariants it keeps:
// - A version becomes current (kCommit, kSwitch) only when the coordinator's durable target
//   says it is the fleet's current version, and kCommit only after the owner reported the
//   version staged and verified end to end (OnStaged OK, or complete staging at start).
// - A version is switched to without fetching when the store keeps it (rollback).
// - Restarted between PREPARED and the decision, it reports PREPARED again and follows the
//   decision of the first target it receives; it does nothing before that first target.
// - A node that missed a commit (dead, partitioned, restarted) fetches and commits it when it
//   sees the target again.
// - At most one fetch, one store change (commit, switch or abort) and one hook run are
//   outstanding at a time; a new kFetch replaces the previous one only after a kAbortStaging of
//   it.
//
// Not thread-safe: one owner calls it from one thread, or under one mutex. Every event method
// returns a span over the actions it produced, valid until the next call on this object.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "rollout/types.h"

namespace weightcast::rollout {

// What the store holds for the channel when the participant starts.
struct LocalState {
  Version current;            // 0: none
  std::vector<Version> kept;  // committed versions in the store (current included)
  struct Staging {
    Version version;
    bool complete = false;  // every wanted chunk verified (StagedVersion::complete())
  };
  std::vector<Staging> staging;
};

enum class HookFailure : uint8_t {
  kReport,    // report the failure; the new version stays current
  kRollback,  // report it and ask the coordinator to roll the fleet back (kRequestRollback)
};
// "report" or "rollback"; kInvalidArgument otherwise.
Result<HookFailure> ParseHookFailure(std::string_view text);

struct ParticipantOptions {
  bool hook = false;          // an engine hook is configured: run it after every change of current
  uint32_t hook_retries = 2;  // further attempts after a failed first run
  Duration hook_retry_backoff = std::chrono::seconds(1);
  HookFailure hook_failure = HookFailure::kReport;
  // After a failed fetch, commit or switch, the same work is asked for again this much later
  // (while the target still wants it).
  Duration retry_backoff = std::chrono::seconds(2);
};

enum class ParticipantActionKind : uint8_t {
  kFetch,         // fetch, stage and verify `version`, then OnStaged (resume a staging if any)
  kAbortStaging,  // stop fetching `version` and drop its staging, then OnAborted
  kCommit,        // make the staged, verified `version` current (Store::Commit), then OnCommitted
  kSwitch,        // make the kept `version` current (Store::Rollback(version)), then OnSwitched
  kRunHook,       // run the engine hook for current `version` (`attempt` from 1), then OnHookDone
  // The hook failed for `version` under HookFailure::kRollback: ask the coordinator to roll
  // the fleet back to `to` (the version that was current before).
  kRequestRollback,
  kReport,  // progress changed in a way the coordinator waits for: heartbeat now
};
std::string_view ParticipantActionKindName(ParticipantActionKind kind);

struct ParticipantAction {
  ParticipantActionKind kind;
  Version version;
  Version to;            // kRequestRollback
  uint32_t attempt = 0;  // kRunHook
  friend bool operator==(const ParticipantAction&, const ParticipantAction&) = default;
};

// What the node puts in its heartbeat for the channel (coord::wire::ChannelProgress).
struct Report {
  Version version;  // the version this is about
  Phase phase = Phase::kIdle;
  Version current;    // the node's current version (0: none)
  std::string error;  // kFailed: why; kCommitted: a failed hook
  friend bool operator==(const Report&, const Report&) = default;
};

class Participant {
 public:
  // kInvalidArgument when `state` is inconsistent (current not among kept, a version both
  // kept and staging).
  static Result<Participant> Create(ParticipantOptions options, LocalState state);

  // The channel's target from a heartbeat reply.
  std::span<const ParticipantAction> OnTarget(Time now, const Target& target);
  // Results of the actions, in any order relative to targets. A result for work not asked for
  // (or superseded) only updates what the participant knows of the store.
  std::span<const ParticipantAction> OnStaged(Time now, Version version, const Status& status);
  std::span<const ParticipantAction> OnCommitted(Time now, Version version, const Status& status);
  std::span<const ParticipantAction> OnSwitched(Time now, Version version, const Status& status);
  std::span<const ParticipantAction> OnAborted(Time now, Version version, const Status& status);
  std::span<const ParticipantAction> OnHookDone(Time now, Version version, const Status& status);
  // Retries whose backoff has passed.
  std::span<const ParticipantAction> OnTimer(Time now);

  Report report() const;
  Version current() const { return current_; }
  const std::set<Version>& kept() const { return kept_; }
  bool has_target() const { return target_.has_value(); }
  // Whether `v` is a version the target still wants staged (the fleet's current one this node
  // catches up to, or the undecided one it prepares).
  bool wants(Version v) const { return IsWanted(v); }
  // Nothing outstanding and the node is where the target wants it.
  bool settled() const;
  // The earliest retry time, or Time::max().
  Time next_deadline() const;

 private:
  enum class StageState : uint8_t {
    kPartial,   // on disk from before, not being fetched
    kFetching,  // kFetch outstanding
    kVerified,  // every wanted chunk verified: prepared
    kFailed,    // the fetch or the commit failed; retried at retry_at
    kAborting,  // kAbortStaging outstanding (or retried at retry_at)
  };
  struct Staging {
    Version version;
    StageState state = StageState::kPartial;
    std::string error;
    Time retry_at{0};
  };
  enum class StoreOp : uint8_t { kNone, kCommit, kSwitch, kAbort };
  struct HookRun {
    Version version;
    Version before;  // current before the change (what a rollback returns to)
    bool after_switch = false;
  };

  explicit Participant(ParticipantOptions options) : options_(options) {}
  std::span<const ParticipantAction> Flush() { return {actions_.data(), actions_.size()}; }
  void Emit(ParticipantActionKind kind, Version v, Version to = Version(), uint32_t attempt = 0) {
    actions_.push_back(ParticipantAction{kind, v, to, attempt});
  }
  Staging* Find(Version v);
  const Staging* Find(Version v) const;
  // The version the target wants fetched now: the fleet's current version when this node
  // must catch up and does not keep it, else the pending version to prepare; 0 when none.
  Version Wanted() const;
  // The undecided version to prepare (0: none).
  Version PrepareVersion() const;
  bool IsWanted(Version v) const;
  // Works out the next actions from the target and the local state.
  void Step(Time now);
  void StartHook(HookRun run);
  // Emits kReport when the report changed since `before`.
  void NoteReport(const Report& before);

  ParticipantOptions options_;
  std::optional<Target> target_;
  Version current_;
  std::set<Version> kept_;
  std::vector<Staging> staging_;  // versions with staging on disk (or being fetched)
  Version fetching_;              // the outstanding kFetch (0: none)
  StoreOp op_ = StoreOp::kNone;
  Version op_version_;
  // A failed switch: not tried again before switch_retry_at.
  Version switch_failed_;
  std::string switch_error_;
  Time switch_retry_at_{0};
  // Engine hook: the run in progress or waiting for its retry, and the next one queued.
  std::optional<HookRun> hook_;
  bool hook_running_ = false;
  uint32_t hook_attempt_ = 0;
  Time hook_retry_at_ = Time::max();
  std::string hook_error_;
  Version hook_error_version_;
  std::optional<HookRun> hook_next_;
  std::vector<ParticipantAction> actions_;
};

}  // namespace weightcast::rollout
