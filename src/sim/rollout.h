// The control plane after a simulated broadcast: every receiver's rollout::Participant and the
// coordinator's rollout::RolloutTracker (the objects the agent and the coordinator run), driven
// on a virtual clock over a modelled control channel: periodic heartbeats (plus an immediate one
// whenever the participant asks to report), a one-way latency each way, the coordinator's
// durable write of a decision, dead-member detection by heartbeat silence, and the agent's store
// commit. docs/simulator.md ("Rollout") describes the model.
//
// It runs after sim::RunFleet on the fleet's outcome (when each node finished fetching, died or
// joined): the control plane does not change the data plane, whose transfers keep going whatever
// the rollout decides, so the two can be simulated one after the other with the same result as
// interleaved.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <weightcast/status.h>

#include "rollout/types.h"
#include "sim/fleet.h"

namespace weightcast::sim {

struct RolloutConfig {
  rollout::CommitPolicy policy{};  // the coordinator's --commit-policy
  double prepare_deadline = 600;   // seconds after publication (--prepare-deadline, 10m)
  double heartbeat_interval = 1;   // agent heartbeat period (the coordinator's default: 3 s / 3)
  double heartbeat_timeout = 3;    // silence after which the coordinator marks a member dead
  // The agent heartbeats at once when its participant asks to report (kReport), as the daemon
  // does; false: progress travels only with the periodic heartbeat.
  bool push = true;
  // Long poll (coord.proto Heartbeat.wait_ms): the agent keeps one heartbeat
  // outstanding; the coordinator holds it until the node's target changes (a durable decision)
  // or heartbeat_interval passes, and the agent sends the next one when the reply arrives.
  // Progress to report wakes the held heartbeat; the reply is followed by one carrying it.
  bool long_poll = false;
  double latency = 100e-6;       // one way, agent <-> coordinator
  double persist_delay = 0.005;  // the coordinator's durable write of one decision record
  double commit_delay = 0.01;    // the agent's Store::Commit / Rollback / abort of a staging
  double publish_at = 0;         // the version is published (and every fetch starts) here
  uint64_t seed = 1;             // heartbeat phases
};

// One receiver's data-plane outcome (seconds; < 0: never).
struct RolloutNode {
  double complete_at = -1;  // every chunk verified: the fetch of the version succeeded
  double dies_at = -1;      // stops (no more heartbeats)
  double joins_at = 0;      // first heartbeat possible (late joiners)
  NodeRole role = NodeRole::kHealthy;
};

// The nodes of a finished fleet run (receivers only: result.nodes[1..]).
std::vector<RolloutNode> RolloutNodes(const FleetResult& result);

struct RolloutResult {
  rollout::Decision decision = rollout::Decision::kNone;  // durable decision for the version
  std::string reason;
  double decided_at = -1;  // the decision durable at the coordinator
  uint32_t members_at_decision = 0;
  uint32_t prepared_at_decision = 0;
  double last_prepared_at = -1;  // the last node to finish fetching (among those that did)
  // Every node that was prepared when the decision was taken has the version current.
  double decided_nodes_committed_at = -1;
  // Every live healthy node (not dead, not straggler, not late) has the version current.
  double healthy_committed_at = -1;
  // Every live node has the version current (stragglers and late joiners included).
  double all_committed_at = -1;
  uint32_t committed = 0;    // nodes with the version current at the end
  uint32_t marked_dead = 0;  // OnMemberDead calls (heartbeat silence)
  uint64_t heartbeats = 0;
  double end_time = 0;
  std::vector<double> node_committed_at;  // per receiver; -1: never
};

// Publishes version 2 over a fleet whose current version is 1 and runs until every live node is
// settled at the decision (committed, or staging dropped after an abort). kInvalidArgument for
// a bad config (non-positive intervals, a quorum fraction outside (0, 1]).
Result<RolloutResult> SimulateRollout(const RolloutConfig& config,
                                      std::span<const RolloutNode> nodes);

}  // namespace weightcast::sim
