#include "sim/fleet.h"
#include "small_fleet.h"

#include <algorithm>
#include <cstdio>

#include <gtest/gtest.h>

namespace weightcast::sim {
namespace {

using testing::Small;

double Sum(const FleetResult& r, double NodeResult::*field) {
  double s = 0;
  for (const NodeResult& n : r.nodes) s += n.*field;
  return s;
}

// The same run, event for event: counts, and every node's completion and bytes.
void ExpectSameRun(const FleetResult& a, const FleetResult& b) {
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.requests, b.requests);
  EXPECT_EQ(a.edges_added, b.edges_added);
  EXPECT_EQ(a.edges_dropped, b.edges_dropped);
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

// A death reaches the peer graph when the coordinator marks the node dead; the graph links the
// dead node's neighbours to each other and drops no other edge.
TEST(Fleet, DeathsRepairThePeerGraphAndStillConserveBytes) {
  FleetConfig c = Small();
  c.receivers = 40;
  c.die_fraction = 0.25;
  c.detect_delay = 0.01;       // noticed while the transfer is still running
  c.heartbeat_timeout = 0.03;  // and repaired while it runs
  c.tuning.adaptive_window = true;
  c.tuning.max_outstanding = 6;
  Result<FleetResult> r = RunFleet(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // The ten die at once and are found in one sweep: one change of the graph.
  EXPECT_EQ(r->membership_events, 1u);
  EXPECT_GT(r->edges_detached, 0u);
  EXPECT_GT(r->edges_added, 0u);
  EXPECT_LE(r->max_dropped_per_event, 1u);
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

// Late joiners enter the peer graph at the coordinator's next sweep: they splice themselves into
// edges drawn across the whole graph (half their degree dropped each), not into each other's
// free slots, so each is as well connected to the nodes that hold data as anyone. They finish
// about S/B after they join, and the others keep their pace.
TEST(Fleet, LateJoinersSpliceInAndTheOthersKeepTheirPace) {
  FleetConfig c = Small();
  c.receivers = 60;
  c.total_bytes = 256ull * c.chunk_bytes;
  c.tuning.degree = 6;
  c.tuning.upload_slots = c.tuning.degree;
  c.tuning.max_outstanding = 8;
  Result<FleetResult> base = RunFleet(c);
  c.late_fraction = 0.05;
  c.late_at = 0.5;
  Result<FleetResult> late = RunFleet(c);
  ASSERT_TRUE(base.ok() && late.ok());
  EXPECT_EQ(base->membership_events, 0u);
  // The three join at once and enter the graph in one sweep, three splices each.
  EXPECT_EQ(late->membership_events, 1u);
  EXPECT_LE(late->edges_dropped, 3u * c.tuning.degree / 2);
  EXPECT_EQ(late->edges_detached, 0u);
  auto healthy_max = [](const FleetResult& r) {
    double m = 0;
    for (const NodeResult& n : r.nodes) {
      if (n.node != 0 && n.role == NodeRole::kHealthy) m = std::max(m, n.completed_at);
    }
    return m;
  };
  double late_max = 0;  // seconds from joining to completing
  for (const NodeResult& n : late->nodes) {
    if (n.node == 0) continue;
    ASSERT_GE(n.completed_at, 0) << "node " << n.node;
    if (n.role == NodeRole::kLate) late_max = std::max(late_max, n.completed_at - n.joined_at);
  }
  std::printf(
      "healthy max / bound: %.4f no late joiner, %.4f with late joiners; late joiners "
      "%.4f of the bound after joining\n",
      healthy_max(*base) / base->lower_bound, healthy_max(*late) / base->lower_bound,
      late_max / base->lower_bound);
  EXPECT_LT(healthy_max(*late), 1.05 * healthy_max(*base));
  EXPECT_LT(late_max, 1.5 * base->lower_bound);
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
  // have_to_holders); delivering them must give the very same run, deaths and peer-graph repairs
  // too.
  FleetConfig c = Small();
  c.die_fraction = 0.25;
  c.straggler_fraction = 0.2;
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
  // of one thread, event for event: deaths, stragglers, late joiners and peer-graph changes too.
  FleetConfig c = Small();
  c.receivers = 40;
  c.tuning.degree = 12;
  c.tuning.source_degree = 16;
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

// An origin with the fleet's aggregate bandwidth four times a node's: the granted receivers fetch
// their shares there, so the source sends far less than one copy; each chunk leaves the origin
// about once; every receiver still completes near the bound.
TEST(Fleet, AnOriginServesItsSharesAboutOnceAndUnloadsTheSource) {
  FleetConfig c = Small();
  c.origin_bandwidth = 4 * c.bandwidth;
  c.origin_fetchers = 8;
  Result<FleetResult> r = RunFleet(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->nodes.size(), c.receivers + 1u) << "the origin is not a receiver";
  for (size_t i = 1; i < r->nodes.size(); ++i) {
    EXPECT_GE(r->nodes[i].completed_at, r->lower_bound) << "node " << i;
    EXPECT_LT(r->nodes[i].completed_at, 2 * r->lower_bound) << "node " << i;
  }
  const double s = double(c.total_bytes);
  EXPECT_GT(r->origin_bytes, 0.25 * s);
  EXPECT_LE(r->origin_bytes, 1.05 * s);
  EXPECT_LT(r->source_bytes, s);
  // Every byte a receiver took came from the source, the origin or another receiver.
  EXPECT_NEAR(Sum(*r, &NodeResult::bytes_out) + r->origin_bytes,
              r->delivered_bytes + r->aborted_bytes, 1.0);
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
  // An origin adds its upload to the source's: 2NS/((N+1)B + O), never below S/B.
  EXPECT_NEAR(SharedBound(500e9, 1.25e9, 100, 4 * 1.25e9), 2.0 * 100 * 500e9 / (105 * 1.25e9),
              0.01);
  EXPECT_DOUBLE_EQ(SharedBound(500e9, 1.25e9, 100, 1000 * 1.25e9), 400);
  EXPECT_DOUBLE_EQ(RackBound(500e9, 1.25e9, 40, 4), 400);
  EXPECT_DOUBLE_EQ(RackBound(500e9, 1.25e9, 40, 80), 800);
}

}  // namespace
}  // namespace weightcast::sim
