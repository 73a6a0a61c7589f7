#include "sim/rollout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace weightcast::sim {
namespace {

// Ten nodes finishing their fetch between 10 and 19 s.
std::vector<RolloutNode> Fleet10() {
  std::vector<RolloutNode> nodes(10);
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i].complete_at = 10.0 + double(i);
  return nodes;
}

RolloutConfig Config(std::string_view policy) {
  RolloutConfig c;
  Result<rollout::CommitPolicy> p = rollout::ParseCommitPolicy(policy);
  EXPECT_TRUE(p.ok());
  c.policy = *p;
  return c;
}

TEST(SimRollout, AllCommitsRightAfterTheLastNodePrepares) {
  const RolloutConfig c = Config("all");
  Result<RolloutResult> r = SimulateRollout(c, Fleet10());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->decision, rollout::Decision::kCommit);
  EXPECT_EQ(r->reason, "10 of 10 live followers prepared (policy all)");
  EXPECT_DOUBLE_EQ(r->last_prepared_at, 19.0);
  // Pushed report: one latency and one durable write after the last completion.
  EXPECT_NEAR(r->decided_at, 19.0 + c.latency + c.persist_delay, 1e-6);
  EXPECT_EQ(r->committed, 10u);
  EXPECT_EQ(r->members_at_decision, 10u);
  EXPECT_EQ(r->prepared_at_decision, 10u);
  // Everyone learns the decision at its next heartbeat reply, then commits.
  EXPECT_GT(r->healthy_committed_at, r->decided_at + c.commit_delay);
  EXPECT_LE(r->healthy_committed_at,
            r->decided_at + c.heartbeat_interval + 2 * c.latency + c.commit_delay + 1e-6);
  EXPECT_DOUBLE_EQ(r->all_committed_at, r->healthy_committed_at);
  for (double t : r->node_committed_at) EXPECT_GE(t, r->decided_at);
}

TEST(SimRollout, WithoutPushProgressWaitsForThePeriodicHeartbeat) {
  RolloutConfig push = Config("all");
  RolloutConfig poll = push;
  poll.push = false;
  Result<RolloutResult> a = SimulateRollout(push, Fleet10());
  Result<RolloutResult> b = SimulateRollout(poll, Fleet10());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->decision, rollout::Decision::kCommit);
  EXPECT_GT(b->decided_at, a->decided_at);
  EXPECT_LE(b->decided_at, 19.0 + poll.heartbeat_interval + poll.latency + poll.persist_delay);
}

TEST(SimRollout, AllExcludesADeadNodeOnceItIsMarkedDead) {
  std::vector<RolloutNode> nodes = Fleet10();
  nodes[9].complete_at = -1;
  nodes[9].dies_at = 15.5;
  nodes[9].role = NodeRole::kDies;
  const RolloutConfig c = Config("all");
  Result<RolloutResult> r = SimulateRollout(c, nodes);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->decision, rollout::Decision::kCommit);
  EXPECT_EQ(r->marked_dead, 1u);
  EXPECT_EQ(r->reason, "9 of 9 live followers prepared (policy all)");
  // Node 8 prepares at 18 s, after the dead one was dropped (15.5 s + at most ~4 s): the
  // decision waits for whichever comes last.
  EXPECT_GE(r->decided_at, 18.0);
  EXPECT_GE(r->decided_at, 15.5 + c.heartbeat_timeout - c.heartbeat_interval);
  EXPECT_LE(r->decided_at, 15.5 + c.heartbeat_timeout + c.heartbeat_interval + 0.2);
  EXPECT_EQ(r->committed, 9u);
  EXPECT_LT(r->node_committed_at[9], 0);
}

TEST(SimRollout, AllAbortsAtTheDeadlineWhenAStragglerIsTooSlow) {
  std::vector<RolloutNode> nodes = Fleet10();
  nodes[9].complete_at = 100;
  nodes[9].role = NodeRole::kStraggler;
  RolloutConfig c = Config("all");
  c.prepare_deadline = 60;
  Result<RolloutResult> r = SimulateRollout(c, nodes);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->decision, rollout::Decision::kAbort);
  EXPECT_EQ(r->reason, "prepare deadline passed: 9 of 10 live followers prepared, 10 needed");
  EXPECT_GE(r->decided_at, 60.0);
  EXPECT_LE(r->decided_at, 60.2);
  EXPECT_EQ(r->committed, 0u);
  EXPECT_LT(r->healthy_committed_at, 0);
}

TEST(SimRollout, QuorumCommitsWithoutTheStragglerWhichCatchesUpLater) {
  std::vector<RolloutNode> nodes = Fleet10();
  nodes[9].complete_at = 100;
  nodes[9].role = NodeRole::kStraggler;
  const RolloutConfig c = Config("quorum:0.9");
  Result<RolloutResult> r = SimulateRollout(c, nodes);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->decision, rollout::Decision::kCommit);
  EXPECT_EQ(r->reason, "9 of 10 live followers prepared (policy quorum:0.9)");
  EXPECT_LT(r->decided_at, 18.1);  // node 8 prepared at 18 s: the ninth
  EXPECT_EQ(r->prepared_at_decision, 9u);
  EXPECT_LT(r->healthy_committed_at, 20.0);
  EXPECT_LT(r->decided_nodes_committed_at, 20.0);
  // The straggler commits as soon as it has the version (the target already says current).
  EXPECT_GE(r->all_committed_at, 100.0);
  EXPECT_LE(r->all_committed_at, 100.0 + 2 * c.commit_delay + 1e-6);
  EXPECT_EQ(r->committed, 10u);
}

TEST(SimRollout, ALateJoinerCatchesUpToTheCommittedVersion) {
  std::vector<RolloutNode> nodes = Fleet10();
  nodes[9].joins_at = 30;
  nodes[9].complete_at = 45;
  nodes[9].role = NodeRole::kLate;
  const RolloutConfig c = Config("all");
  Result<RolloutResult> r = SimulateRollout(c, nodes);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->decision, rollout::Decision::kCommit);
  EXPECT_LT(r->decided_at, 19.1);  // without it: it was not a member
  EXPECT_EQ(r->members_at_decision, 9u);
  EXPECT_GE(r->node_committed_at[9], 45.0);
  EXPECT_EQ(r->committed, 10u);
}

TEST(SimRollout, EachCommitsAtPublication) {
  const RolloutConfig c = Config("each");
  Result<RolloutResult> r = SimulateRollout(c, Fleet10());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->decision, rollout::Decision::kCommit);
  EXPECT_LT(r->decided_at, 0.1);
  // Each node switches when it has the version.
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_GE(r->node_committed_at[i], 10.0 + double(i));
    EXPECT_LE(r->node_committed_at[i], 10.0 + double(i) + 2 * c.commit_delay);
  }
}

TEST(SimRollout, RejectsBadSettings) {
  RolloutConfig c = Config("all");
  c.heartbeat_interval = 0;
  EXPECT_FALSE(SimulateRollout(c, Fleet10()).ok());
  c = Config("all");
  c.commit_delay = -1;
  EXPECT_FALSE(SimulateRollout(c, Fleet10()).ok());
  c = Config("all");
  c.policy.kind = rollout::PolicyKind::kQuorum;
  c.policy.fraction = 1.5;
  EXPECT_FALSE(SimulateRollout(c, Fleet10()).ok());
}

TEST(SimRollout, DrivesTheRolloutAfterASimulatedBroadcast) {
  FleetConfig fc;
  fc.receivers = 12;
  fc.chunk_bytes = 16 << 20;
  fc.total_bytes = 64ull * fc.chunk_bytes;
  fc.tuning.degree = 4;
  fc.tuning.source_degree = 6;
  fc.die_fraction = 1.0 / 12;
  fc.die_at = 0.5;
  Result<FleetResult> fleet = RunFleet(fc);
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  const std::vector<RolloutNode> nodes = RolloutNodes(*fleet);
  ASSERT_EQ(nodes.size(), 12u);
  uint32_t dead = 0;
  double last = 0;
  for (const RolloutNode& n : nodes) {
    if (n.dies_at >= 0) ++dead;
    if (n.complete_at >= 0) last = std::max(last, n.complete_at);
  }
  ASSERT_EQ(dead, 1u);
  const RolloutConfig c = Config("all");
  Result<RolloutResult> r = SimulateRollout(c, nodes);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->decision, rollout::Decision::kCommit);
  EXPECT_EQ(r->committed, 11u);
  EXPECT_EQ(r->marked_dead, 1u);
  EXPECT_DOUBLE_EQ(r->last_prepared_at, last);
  EXPECT_GE(r->healthy_committed_at, last);
}

TEST(SimRollout, LongPollDeliversTheDecisionWithinARoundTrip) {
  RolloutConfig poll = Config("all");
  RolloutConfig held = poll;
  held.long_poll = true;
  held.heartbeat_interval = 1;
  Result<RolloutResult> a = SimulateRollout(poll, Fleet10());
  Result<RolloutResult> b = SimulateRollout(held, Fleet10());
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  EXPECT_EQ(b->decision, rollout::Decision::kCommit);
  EXPECT_EQ(b->committed, 10u);
  // The last report wakes the held heartbeat: one and a half round trips, then the write.
  EXPECT_LE(b->decided_at, 19.0 + 3 * held.latency + held.persist_delay + 1e-6);
  // Every held heartbeat is answered when the decision is durable.
  EXPECT_LE(b->healthy_committed_at, b->decided_at + held.latency + held.commit_delay + 1e-6);
  EXPECT_LT(b->healthy_committed_at, a->healthy_committed_at);
}

}  // namespace
}  // namespace weightcast::sim
