// The coordinator with the two-phase rollout plugged into its Decider seam: real version log,
// real client, in-memory transport, fake clock.
#include "coord/rollout_decider.h"

#include <gtest/gtest.h>

#include "coord_test_util.h"

namespace weightcast::coord {
namespace {

using std::chrono::seconds;
using testing::AgentRegistration;
using testing::CoordinatorHarness;
using testing::Signed;
using testing::TestManifest;

std::shared_ptr<RolloutDecider> MakeDecider(std::string_view policy,
                                            net::Duration deadline = seconds(30)) {
  RolloutDeciderOptions o;
  o.policy = *rollout::ParseCommitPolicy(policy);
  o.prepare_deadline = deadline;
  o.recovery_grace = seconds(0);
  auto d = RolloutDecider::Create(o);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return *d;
}

wire::Heartbeat Beat(uint64_t version, wire::Phase phase, std::string error = {}) {
  wire::Heartbeat beat;
  wire::ChannelProgress* p = beat.add_channels();
  p->set_channel("policy");
  p->set_version(version);
  p->set_phase(phase);
  p->set_error(std::move(error));
  return beat;
}

struct Fleet {
  explicit Fleet(std::shared_ptr<RolloutDecider> decider, int agents = 2) : h(Options(decider)) {
    EXPECT_TRUE(h.Start().ok());
    pub = h.Connect(7, net::Role::kPublisher);
    for (int i = 0; i < agents; ++i) {
      nodes.push_back(h.Connect(10 + i, net::Role::kAgent));
      EXPECT_TRUE(nodes.back()->Register(AgentRegistration(10 + i)).ok());
    }
  }
  static CoordinatorOptions Options(std::shared_ptr<RolloutDecider> decider) {
    CoordinatorOptions o;
    o.decider = std::move(decider);
    return o;
  }
  wire::ChannelTarget Target(int agent, const wire::Heartbeat& beat) {
    auto reply = nodes[agent]->Heartbeat(beat);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() && reply->channels_size() > 0 ? reply->channels(0) : wire::ChannelTarget();
  }
  Status Publish(uint64_t v) { return pub->Publish(Signed(TestManifest("policy", v, v))).status(); }

  CoordinatorHarness h;
  std::unique_ptr<CoordinatorClient> pub;
  std::vector<std::unique_ptr<CoordinatorClient>> nodes;
};

TEST(RolloutDecider, RefusesBadOptions) {
  RolloutDeciderOptions o;
  o.policy = {rollout::PolicyKind::kQuorum, 0};
  EXPECT_EQ(RolloutDecider::Create(o).status().code(), Code::kInvalidArgument);
  o.policy = {};
  o.prepare_deadline = seconds(0);
  EXPECT_FALSE(RolloutDecider::Create(o).ok());
}

TEST(RolloutDecider, AllCommitsOnceEveryAgentPrepared) {
  Fleet f(MakeDecider("all"));
  f.Target(0, {});
  f.Target(1, {});
  ASSERT_TRUE(f.Publish(1).ok());
  wire::ChannelTarget t = f.Target(0, Beat(1, wire::PHASE_PREPARED));
  EXPECT_EQ(t.version(), 1u);
  EXPECT_EQ(t.decision(), wire::DECISION_NONE);
  EXPECT_EQ(t.current_version(), 0u);
  t = f.Target(1, Beat(1, wire::PHASE_PREPARED));
  EXPECT_EQ(t.decision(), wire::DECISION_COMMIT);
  EXPECT_EQ(t.current_version(), 1u);
  // Durable: a restarted coordinator (with a fresh decider) serves the same.
  f.nodes.clear();
  f.pub.reset();
  f.h.Stop();
  ASSERT_TRUE(f.h.Start().ok());
  auto tool = f.h.Connect(9, net::Role::kTool);
  auto status = tool->GetStatus("policy");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->channels(0).versions(0).decision(), wire::DECISION_COMMIT);
}

TEST(RolloutDecider, AbortsOnAFailedAgentWithItsReason) {
  Fleet f(MakeDecider("all"));
  f.Target(0, {});
  f.Target(1, {});
  ASSERT_TRUE(f.Publish(1).ok());
  f.Target(0, Beat(1, wire::PHASE_PREPARED));
  wire::ChannelTarget t = f.Target(1, Beat(1, wire::PHASE_FAILED, "no space left"));
  EXPECT_EQ(t.decision(), wire::DECISION_ABORT);
  EXPECT_NE(t.abort_reason().find("no space left"), std::string::npos) << t.abort_reason();
  EXPECT_EQ(t.current_version(), 0u);
}

TEST(RolloutDecider, AbortsAtTheDeadline) {
  Fleet f(MakeDecider("all", seconds(10)));
  f.Target(0, {});
  f.Target(1, {});
  ASSERT_TRUE(f.Publish(1).ok());
  f.Target(0, Beat(1, wire::PHASE_PREPARED));
  f.Target(1, Beat(1, wire::PHASE_FETCHING));
  f.h.Advance(seconds(2));
  f.Target(0, Beat(1, wire::PHASE_PREPARED));
  EXPECT_EQ(f.Target(1, Beat(1, wire::PHASE_FETCHING)).decision(), wire::DECISION_NONE);
  for (int i = 0; i < 5; ++i) {  // heartbeats keep both alive while time passes
    f.h.Advance(seconds(2));
    f.Target(0, Beat(1, wire::PHASE_PREPARED));
    f.Target(1, Beat(1, wire::PHASE_FETCHING));
  }
  f.h.coordinator().Sweep();
  wire::ChannelTarget t = f.Target(0, Beat(1, wire::PHASE_PREPARED));
  EXPECT_EQ(t.decision(), wire::DECISION_ABORT);
  EXPECT_NE(t.abort_reason().find("deadline"), std::string::npos) << t.abort_reason();
}

TEST(RolloutDecider, DeadAgentIsExcluded) {
  Fleet f(MakeDecider("all"));
  f.Target(0, {});
  f.Target(1, {});
  ASSERT_TRUE(f.Publish(1).ok());
  EXPECT_EQ(f.Target(0, Beat(1, wire::PHASE_PREPARED)).decision(), wire::DECISION_NONE);
  // Agent 1 falls silent past the heartbeat timeout (3 s) while agent 0 keeps beating.
  for (int i = 0; i < 4; ++i) {
    f.h.Advance(seconds(1));
    f.Target(0, Beat(1, wire::PHASE_PREPARED));
  }
  f.h.coordinator().Sweep();
  EXPECT_EQ(f.Target(0, Beat(1, wire::PHASE_PREPARED)).decision(), wire::DECISION_COMMIT);
}

TEST(RolloutDecider, QuorumAndEach) {
  {
    Fleet f(MakeDecider("quorum:0.5"), 4);
    for (int i = 0; i < 4; ++i) f.Target(i, {});
    ASSERT_TRUE(f.Publish(1).ok());
    EXPECT_EQ(f.Target(0, Beat(1, wire::PHASE_PREPARED)).decision(), wire::DECISION_NONE);
    EXPECT_EQ(f.Target(1, Beat(1, wire::PHASE_PREPARED)).decision(), wire::DECISION_COMMIT);
  }
  {
    Fleet f(MakeDecider("each"));
    ASSERT_TRUE(f.Publish(1).ok());
    wire::ChannelTarget t = f.Target(0, {});
    EXPECT_EQ(t.decision(), wire::DECISION_COMMIT);
    EXPECT_EQ(t.current_version(), 1u);
  }
}

TEST(RolloutDecider, NewerVersionSupersedesThePendingOne) {
  Fleet f(MakeDecider("all"));
  f.Target(0, {});
  f.Target(1, {});
  ASSERT_TRUE(f.Publish(1).ok());
  f.Target(0, Beat(1, wire::PHASE_PREPARED));
  ASSERT_TRUE(f.Publish(2).ok());
  f.h.coordinator().Sweep();
  auto tool = f.h.Connect(9, net::Role::kTool);
  auto status = tool->GetStatus("policy");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->channels(0).versions(0).decision(), wire::DECISION_ABORT);
  EXPECT_NE(status->channels(0).versions(0).abort_reason().find("superseded"), std::string::npos);
  EXPECT_EQ(status->channels(0).versions(1).decision(), wire::DECISION_NONE);
  f.Target(0, Beat(2, wire::PHASE_PREPARED));
  EXPECT_EQ(f.Target(1, Beat(2, wire::PHASE_PREPARED)).current_version(), 2u);
}

TEST(RolloutDecider, FollowsTheLogsRollbackAndDecidesTheNextVersion) {
  Fleet f(MakeDecider("all"));
  f.Target(0, {});
  f.Target(1, {});
  for (uint64_t v = 1; v <= 2; ++v) {
    ASSERT_TRUE(f.Publish(v).ok());
    f.Target(0, Beat(v, wire::PHASE_PREPARED));
    ASSERT_EQ(f.Target(1, Beat(v, wire::PHASE_PREPARED)).current_version(), v);
  }
  ASSERT_TRUE(f.Publish(3).ok());
  f.Target(0, Beat(3, wire::PHASE_PREPARED));  // 3 pending, half prepared
  auto tool = f.h.Connect(9, net::Role::kTool);
  auto rolled = tool->Rollback("policy", Version(0));
  ASSERT_TRUE(rolled.ok()) << rolled.status().ToString();
  EXPECT_EQ(*rolled, Version(1));
  // The late PREPARED for 3 must not commit it: the log aborted it.
  wire::ChannelTarget t = f.Target(1, Beat(3, wire::PHASE_PREPARED));
  EXPECT_EQ(t.current_version(), 1u);
  EXPECT_EQ(t.decision(), wire::DECISION_ABORT);
  f.h.coordinator().Sweep();
  EXPECT_EQ(f.Target(0, Beat(1, wire::PHASE_COMMITTED)).current_version(), 1u);
  // Version 4 goes through the two phases as usual.
  ASSERT_TRUE(f.Publish(4).ok());
  EXPECT_EQ(f.Target(0, Beat(4, wire::PHASE_PREPARED)).decision(), wire::DECISION_NONE);
  t = f.Target(1, Beat(4, wire::PHASE_PREPARED));
  EXPECT_EQ(t.decision(), wire::DECISION_COMMIT);
  EXPECT_EQ(t.current_version(), 4u);
}

TEST(RolloutDecider, AnAgentMayRollBackOnlyAChannelItFollows) {
  Fleet f(MakeDecider("each"));
  ASSERT_TRUE(f.Publish(1).ok());
  ASSERT_TRUE(f.Publish(2).ok());
  auto other = f.h.Connect(20, net::Role::kAgent);
  ASSERT_TRUE(other->Register(AgentRegistration(20, "other")).ok());
  EXPECT_EQ(other->Rollback("policy", Version(0)).status().code(), Code::kFailedPrecondition);
  // An agent of the channel whose engine refused v2 (--hook-failure rollback).
  auto rolled = f.nodes[0]->Rollback("policy", Version(1));
  ASSERT_TRUE(rolled.ok()) << rolled.status().ToString();
  EXPECT_EQ(f.Target(1, {}).current_version(), 1u);
}

// Forwards to a decider the test can replace, so that a restarted coordinator gets a fresh
// one as a restarted process would.
struct Swappable final : Decider {
  DecisionChange OnPublish(const ChannelState& c, const wire::VersionEntry& e) override {
    return inner->OnPublish(c, e);
  }
  std::vector<DecisionChange> Decide(const ChannelState& c, std::span<const NodeProgress> n,
                                     net::TimePoint now) override {
    return inner->Decide(c, n, now);
  }
  std::shared_ptr<Decider> inner;
};

TEST(RolloutDecider, RestartedCoordinatorWaitsForItsAgentsThenDecides) {
  RolloutDeciderOptions o;
  o.policy = {};
  o.prepare_deadline = seconds(60);
  o.recovery_grace = seconds(3);
  auto swappable = std::make_shared<Swappable>();
  swappable->inner = *RolloutDecider::Create(o);
  CoordinatorOptions options;
  options.decider = swappable;
  CoordinatorHarness h(options);
  ASSERT_TRUE(h.Start().ok());
  {
    auto pub = h.Connect(7, net::Role::kPublisher);
    ASSERT_TRUE(pub->Publish(Signed(TestManifest("policy", 1, 1))).ok());
  }
  h.Stop();
  h.Advance(seconds(10));  // the old decider's grace is long over
  swappable->inner = *RolloutDecider::Create(o);
  ASSERT_TRUE(h.Start().ok());
  auto a = h.Connect(10, net::Role::kAgent);
  auto b = h.Connect(11, net::Role::kAgent);
  ASSERT_TRUE(a->Register(AgentRegistration(10)).ok());
  auto ta = a->Heartbeat(Beat(1, wire::PHASE_PREPARED));
  ASSERT_TRUE(ta.ok());
  // Only one of the two agents has registered again: within the grace nothing is decided.
  EXPECT_EQ(ta->channels(0).decision(), wire::DECISION_NONE);
  ASSERT_TRUE(b->Register(AgentRegistration(11)).ok());
  ASSERT_TRUE(b->Heartbeat(Beat(1, wire::PHASE_FETCHING)).ok());
  h.Advance(seconds(2));
  ASSERT_TRUE(a->Heartbeat(Beat(1, wire::PHASE_PREPARED)).ok());
  auto tb = b->Heartbeat(Beat(1, wire::PHASE_PREPARED));
  ASSERT_TRUE(tb.ok());
  EXPECT_EQ(tb->channels(0).decision(), wire::DECISION_NONE) << "still within the grace";
  h.Advance(seconds(2));
  h.coordinator().Sweep();
  ASSERT_TRUE(a->Heartbeat(Beat(1, wire::PHASE_PREPARED)).ok());
  tb = b->Heartbeat(Beat(1, wire::PHASE_PREPARED));
  ASSERT_TRUE(tb.ok());
  EXPECT_EQ(tb->channels(0).decision(), wire::DECISION_COMMIT);
}

}  // namespace
}  // namespace weightcast::coord
