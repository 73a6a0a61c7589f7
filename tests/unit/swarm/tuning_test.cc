#include "swarm/tuning.h"

#include <gtest/gtest.h>

namespace weightcast::swarm {
namespace {

// The defaults are the settings of the simulator's goal runs (bench/sim_goals.sh,
// docs/simulator.md): changing one here changes what both the agents and `weightcast sim` run.
TEST(Tuning, DefaultsAreTheSimulatorsGoalSettings) {
  const Tuning t;
  EXPECT_EQ(t.degree, 24u);
  EXPECT_EQ(t.SourceDegree(), 32u);
  EXPECT_TRUE(t.adaptive_window);
  EXPECT_EQ(t.upload_slots, 24u);
  EXPECT_EQ(t.max_outstanding, 32u);
  EXPECT_TRUE(t.slot_per_peer);
  // Adaptive windows move requests only when the total exceeds the peers' share of one each.
  EXPECT_GT(t.max_outstanding, t.degree * t.window_per_peer);
}

TEST(Tuning, AppliesToAReceiverAndToASource) {
  Tuning t;
  SchedulerOptions receiver, source;
  ApplyTuning(t, /*source=*/false, receiver);
  ApplyTuning(t, /*source=*/true, source);
  EXPECT_EQ(receiver.upload_slots, t.upload_slots);
  EXPECT_EQ(source.upload_slots, t.source_upload_slots);
  for (const SchedulerOptions* o : {&receiver, &source}) {
    EXPECT_EQ(o->window_per_peer, t.window_per_peer);
    EXPECT_EQ(o->max_window_per_peer, t.max_window_per_peer);
    EXPECT_EQ(o->adaptive_window, t.adaptive_window);
    EXPECT_EQ(o->max_outstanding, t.max_outstanding);
    EXPECT_EQ(o->serve_queue_limit, t.serve_queue_limit);
    EXPECT_EQ(o->slot_per_peer, t.slot_per_peer);
    EXPECT_EQ(o->endgame_max_requests, t.endgame_max_requests);
    EXPECT_EQ(o->request_timeout, t.request_timeout);
  }
}

TEST(Tuning, SourceDegreeNeverBelowDegreeAndMaxWindowNeverBelowWindow) {
  Tuning t;
  t.degree = 40;
  EXPECT_EQ(t.SourceDegree(), 40u);
  t.source_upload_slots = 0;  // 0: the receivers' slots
  t.window_per_peer = 6;
  SchedulerOptions o;
  ApplyTuning(t, /*source=*/true, o);
  EXPECT_EQ(o.upload_slots, t.upload_slots);
  EXPECT_EQ(o.max_window_per_peer, 6u);
}

}  // namespace
}  // namespace weightcast::swarm
