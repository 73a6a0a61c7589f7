// Words shared by the two sides of the two-phase rollout (docs/rollout.md): the coordinator's
// RolloutTracker (rollout/tracker.h) and the agent's Participant (rollout/participant.h).
// Like swarm/, rollout/ is sans-I/O: no sockets, clocks, threads or files. The enums carry the
// numbers of their coord.proto twins (coord::wire::Phase, coord::wire::Decision) so the daemons
// convert with a static_cast; rollout/ itself does not depend on the protocol.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include <weightcast/status.h>
#include <weightcast/types.h>

namespace weightcast::rollout {

// Time is a value the owner passes in (nanoseconds since any fixed epoch of its choosing).
using Time = std::chrono::nanoseconds;
using Duration = std::chrono::nanoseconds;

// Where a node stands in one channel (coord::wire::Phase, same numbers).
enum class Phase : uint8_t {
  kIdle = 0,       // nothing to do
  kFetching = 1,   // receiving `version`
  kPrepared = 2,   // `version` staged and verified end to end; waiting for the decision
  kCommitted = 3,  // `version` is current
  kFailed = 4,     // `version` could not be prepared (or committed); `error` says why
};
std::string_view PhaseName(Phase phase);

// The coordinator's decision for one version (coord::wire::Decision, same numbers).
enum class Decision : uint8_t {
  kNone = 0,    // not decided yet: fetch and prepare
  kCommit = 1,  // the version may become current
  kAbort = 2,   // drop its staging; it never becomes current
};
std::string_view DecisionName(Decision decision);

// What the coordinator answers every heartbeat with, per channel (coord::wire::ChannelTarget).
// Only durable decisions ever appear here.
struct Target {
  Version version;                      // the newest published version (0: none yet)
  Decision decision = Decision::kNone;  // for `version`
  // The version every follower should have current: the newest committed one, or the one a
  // rollback chose. 0: nothing committed yet.
  Version current;
  std::string abort_reason;  // when decision == kAbort
  friend bool operator==(const Target&, const Target&) = default;
};

// How the coordinator decides a channel's pending version.
enum class PolicyKind : uint8_t {
  kAll,     // every live follower prepared (a dead one is excluded and caught up later)
  kQuorum,  // at least ceil(fraction x live followers) prepared
  kEach,    // committed at publish: each node switches as soon as it has prepared it
};

struct CommitPolicy {
  PolicyKind kind = PolicyKind::kAll;
  double fraction = 1.0;  // kQuorum only, in (0, 1]
  friend bool operator==(const CommitPolicy&, const CommitPolicy&) = default;
};

// Parses the --commit-policy flag: "all", "each", "quorum:0.8" (also "quorum:80%").
// kInvalidArgument naming the input for anything else, or a fraction outside (0, 1].
Result<CommitPolicy> ParseCommitPolicy(std::string_view text);
// "all", "each", "quorum:0.8": parses back with ParseCommitPolicy.
std::string FormatCommitPolicy(const CommitPolicy& policy);

}  // namespace weightcast::rollout
