#include "sim/fleet.h"

#include <algorithm>
#include <cstdio>

#include <gtest/gtest.h>

namespace weightcast::sim {
namespace {

FleetConfig Small() {
  FleetConfig c;
  c.receivers = 12;
  c.chunk_bytes = 16 << 20;
  c.total_bytes = 64ull * c.chunk_bytes;  // 1 GiB
  c.tuning.degree = 4;
  c.tuning.source_degree = 6;
  return c;
}

double Sum(const FleetResult& r, double NodeResult::*field) {
  double s = 0;
  for (const NodeResult& n : r.nodes) s += n.*field;
  return s;
}

// The same run, event for event: counts, and every node's completion and bytes.
void ExpectSameRun(const FleetResult& a, const FleetResult& b) {
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.requests, b.requests);
  EXPECT_EQ(a.replacement_peers, b.replacement_peers);
  EXPECT_EQ(a.duplicate_bytes, b.duplicate_bytes);
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    EXPECT_EQ(a.nodes[i].completed_at, b.nodes[i].completed_at) << "node " << i;
    EXPECT_EQ(a.nodes[i].bytes_in, b.nodes[i].bytes_in) << "node " << i;
    EXPECT_EQ(a.nodes[i].bytes_out, b.nodes[i].bytes_out) << "node " << i;
  }
}

TEST(Fleet, EveryReceiverCompletesNearTheBound) {
  Result<FleetResult> r = RunFleet(Small());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (size_t i = 1; i < r->nodes.size(); ++i) {
    EXPECT_GE(r->nodes[i].completed_at, r->lower_bound) << "node " << i << " beat the bound";
    EXPECT_LT(r->nodes[i].completed_at, 2 * r->lower_bound) << "node " << i;
  }
  EXPECT_GE(r->source_bytes, double(Small().total_bytes));
}

TEST(Fleet, ConservesBytes) {
  FleetConfig c = Small();
  c.die_fraction = 0.25;  // deaths abort flows mid-way; bytes must still add up
  Result<FleetResult> r = RunFleet(c);
  ASSERT_TRUE(r.ok());
  // Every byte that arrived was sent by someone, and every byte sent either arrived, was cut
  // off by a stop, or was in flight to a node that died.
  EXPECT_NEAR(Sum(*r, &NodeResult::bytes_out), r->delivered_bytes + r->aborted_bytes, 1.0);
  EXPECT_LE(Sum(*r, &NodeResult::bytes_in), r->delivered_bytes + 1.0);
  for (const NodeResult& n : r->nodes) {
    if (n.node == 0 || n.role == NodeRole::kDies) continue;
    EXPECT_GE(n.completed_at, 0) << "healthy node " << n.node << " did not complete";
    EXPECT_GE(n.bytes_in, double(c.total_bytes));
  }
}

TEST(Fleet, ReplacesDeadPeersAndStillConservesBytes) {
  FleetConfig c = Small();
  c.die_fraction = 0.25;
  c.tuning.min_peers = c.tuning.degree;  // every receiver that loses a peer asks for one
  c.detect_delay = 0.01;  // noticed while the 1 GiB transfer (0.86 s) is still running
  c.tuning.adaptive_window = true;
  c.tuning.max_outstanding = 6;
  Result<FleetResult> r = RunFleet(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->replacement_peers, 0u);
  EXPECT_NEAR(Sum(*r, &NodeResult::bytes_out), r->delivered_bytes + r->aborted_bytes, 1.0);
  for (const NodeResult& n : r->nodes) {
    if (n.node == 0 || n.role == NodeRole::kDies) continue;
    EXPECT_GE(n.completed_at, r->lower_bound) << "node " << n.node;
  }
}

TEST(Fleet, StragglersAndLateJoinersStillComplete) {
  FleetConfig c = Small();
  c.straggler_fraction = 0.2;
  c.late_fraction = 0.2;
  Result<FleetResult> r = RunFleet(c);
  ASSERT_TRUE(r.ok());
  for (size_t i = 1; i < r->nodes.size(); ++i) EXPECT_GE(r->nodes[i].completed_at, 0);
}

// A late joiner is in its neighbours' peer lists from the start, so until it comes they are
// short of min_peers without having lost anyone. They ask on their timer (swarm::Scheduler,
// min_peers) and the simulated coordinator links them to each other first (nodes below the
// degree), so the healthy nodes keep their degree and finish about as they would with no late
// joiner at all.
TEST(Fleet, NeighboursOfLateJoinersAskForPeersAndKeepTheirPace) {
  FleetConfig c = Small();
  c.receivers = 40;
  c.total_bytes = 256ull * c.chunk_bytes;
  c.tuning.degree = 6;
  c.tuning.min_peers = c.tuning.degree;
  c.tuning.upload_slots = c.tuning.degree;
  c.tuning.max_outstanding = 8;
  Result<FleetResult> base = RunFleet(c);
  c.late_fraction = 0.25;
  c.late_at = 0.5;
  Result<FleetResult> late = RunFleet(c);
  c.tuning.min_peers = 0;  // nobody asks: the late joiners' neighbours stay short until they come
  Result<FleetResult> short_lists = RunFleet(c);
  ASSERT_TRUE(base.ok() && late.ok() && short_lists.ok());
  EXPECT_EQ(base->replacement_peers, 0u);
  EXPECT_EQ(short_lists->replacement_peers, 0u);
  EXPECT_GT(late->replacement_peers, 0u) << "no death: every replacement was asked on a timer";
  auto healthy_max = [](const FleetResult& r) {
    double m = 0;
    for (const NodeResult& n : r.nodes) {
      if (n.node != 0 && n.role == NodeRole::kHealthy) m = std::max(m, n.completed_at);
    }
    return m;
  };
  std::printf("healthy max / bound: %.4f no late joiner, %.4f late (asking), %.4f late (not)\n",
              healthy_max(*base) / base->lower_bound, healthy_max(*late) / base->lower_bound,
              healthy_max(*short_lists) / base->lower_bound);
  // Measured: 1.143, 1.163 and 1.327 of the bound.
  EXPECT_LT(healthy_max(*late), 1.05 * healthy_max(*base));
  EXPECT_LT(healthy_max(*late), healthy_max(*short_lists));
  for (const NodeResult& n : late->nodes) {
    if (n.node == 0) continue;
    EXPECT_GE(n.completed_at, 0) << "node " << n.node;
  }
}

TEST(Fleet, SourceLeavingEarlyStrandsTheFleet) {
  FleetConfig c = Small();
  c.source_leaves_at = 0.01;  // before the first chunks are out
  c.time_limit_factor = 3;
  Result<FleetResult> r = RunFleet(c);
  ASSERT_TRUE(r.ok());
  for (size_t i = 1; i < r->nodes.size(); ++i) EXPECT_LT(r->nodes[i].completed_at, 0);
}

TEST(Fleet, SameSeedSameRun) {
  Result<FleetResult> a = RunFleet(Small());
  Result<FleetResult> b = RunFleet(Small());
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < a->nodes.size(); ++i) {
    EXPECT_EQ(a->nodes[i].completed_at, b->nodes[i].completed_at);
  }
}

TEST(Fleet, SkippingHavesToHoldersChangesNothing) {
  // The fan-out skips HAVEs to neighbours that already hold the chunk (FleetConfig::
  // have_to_holders); delivering them must give the very same run, deaths and replacements too.
  FleetConfig c = Small();
  c.die_fraction = 0.25;
  c.straggler_fraction = 0.2;
  c.tuning.min_peers = c.tuning.degree;
  c.tuning.adaptive_window = true;
  c.tuning.max_outstanding = 8;
  Result<FleetResult> skip = RunFleet(c);
  c.have_to_holders = true;
  Result<FleetResult> all = RunFleet(c);
  ASSERT_TRUE(skip.ok() && all.ok());
  ExpectSameRun(*skip, *all);
}

TEST(Fleet, TheFanOutWorkerChangesNothing) {
  // The HAVE fan-out on two threads (FleetConfig::threads, sim/side_worker.h) must give the run
  // of one thread, event for event: deaths, stragglers, late joiners and replacements too.
  FleetConfig c = Small();
  c.receivers = 40;
  c.tuning.degree = 12;
  c.tuning.source_degree = 16;
  c.tuning.min_peers = c.tuning.degree;
  c.die_fraction = 0.1;
  c.straggler_fraction = 0.2;
  c.late_fraction = 0.1;
  c.late_at = 0.4;
  c.threads = 1;
  Result<FleetResult> one = RunFleet(c);
  c.threads = 2;
  Result<FleetResult> two = RunFleet(c);
  ASSERT_TRUE(one.ok() && two.ok());
  ExpectSameRun(*one, *two);
}

TEST(Fleet, RejectsNonsense) {
  FleetConfig c = Small();
  c.chunk_bytes = 0;
  EXPECT_FALSE(RunFleet(c).ok());
  c = Small();
  c.receivers = 0;
  EXPECT_FALSE(RunFleet(c).ok());
}

TEST(Bounds, MatchTheDesignFigures) {
  EXPECT_DOUBLE_EQ(FullDuplexBound(500e9, 1.25e9), 400);
  EXPECT_NEAR(SharedBound(500e9, 1.25e9, 100), 792.08, 0.01);
  EXPECT_NEAR(SharedBound(500e9, 1.25e9, 1000), 799.2, 0.01);
  EXPECT_DOUBLE_EQ(RackBound(500e9, 1.25e9, 40, 4), 400);
  EXPECT_DOUBLE_EQ(RackBound(500e9, 1.25e9, 40, 80), 800);
}

}  // namespace
}  // namespace weightcast::sim
