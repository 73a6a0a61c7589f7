// Long polls (Heartbeat.wait_ms): a held heartbeat is answered as soon as something in
// the node's reply changes, when wait_ms passes, or when the node wakes it; holding keeps the
// node alive; a node that goes away while held is cleaned up. Over the in-memory transport with
// the fake clock: nothing here waits on real time except for the coordinator's threads to act.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "coord/rollout_decider.h"
#include "coord_test_util.h"

namespace weightcast::coord {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::AgentRegistration;
using testing::CoordinatorHarness;
using testing::Signed;
using testing::TestManifest;

// Real time the tests give the coordinator's threads to do something; generous for a loaded
// machine, and only spent where a test waits for something that must happen.
constexpr auto kPatience = seconds(10);

template <typename Pred>
bool Eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

wire::Heartbeat Poll(uint64_t seen, uint32_t wait_ms = 1000, wire::Phase phase = wire::PHASE_IDLE,
                     uint64_t version = 0) {
  wire::Heartbeat beat;
  beat.set_wait_ms(wait_ms);
  beat.set_seen_generation(seen);
  wire::ChannelProgress* p = beat.add_channels();
  p->set_channel("policy");
  p->set_version(version);
  p->set_phase(phase);
  return beat;
}

// A held call on its own thread.
std::future<Result<wire::HeartbeatReply>> Hold(CoordinatorClient& client,
                                               const wire::Heartbeat& beat) {
  return std::async(std::launch::async, [&client, beat] { return client.Heartbeat(beat); });
}

bool Pending(const std::future<Result<wire::HeartbeatReply>>& call) {
  return call.wait_for(milliseconds(50)) == std::future_status::timeout;
}

struct Fleet {
  explicit Fleet(CoordinatorOptions options = {}) : h(std::move(options)) {
    EXPECT_TRUE(h.Start().ok());
    pub = h.Connect(7, net::Role::kPublisher);
    agent = h.Connect(10, net::Role::kAgent);
    EXPECT_TRUE(agent->Register(AgentRegistration(10)).ok());
  }
  // The generation an immediate heartbeat reports.
  uint64_t Generation(CoordinatorClient& client) {
    auto reply = client.Heartbeat(Poll(0, 0));
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? reply->generation() : 0;
  }
  bool Held(uint64_t n) {
    return Eventually([&] { return h.coordinator().counters().heartbeats_held.load() == n; });
  }
  Status Publish(uint64_t v) { return pub->Publish(Signed(TestManifest("policy", v, v))).status(); }

  CoordinatorHarness h;
  std::unique_ptr<CoordinatorClient> pub;
  std::unique_ptr<CoordinatorClient> agent;
};

TEST(LongPoll, HeldHeartbeatIsAnsweredWhenAVersionIsPublished) {
  Fleet f;
  const uint64_t seen = f.Generation(*f.agent);
  EXPECT_NE(seen, 0u);
  auto call = Hold(*f.agent, Poll(seen));
  ASSERT_TRUE(f.Held(1));
  EXPECT_TRUE(Pending(call));  // nothing changed: still held, no time passed
  ASSERT_TRUE(f.Publish(1).ok());
  auto reply = call.get();  // no clock moved: the publish answered it
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  ASSERT_EQ(reply->channels_size(), 1);
  EXPECT_EQ(reply->channels(0).version(), 1u);
  EXPECT_GT(reply->generation(), seen);
  EXPECT_EQ(f.h.coordinator().counters().heartbeats_held.load(), 0u);
  EXPECT_EQ(f.h.coordinator().counters().heartbeats_pushed.load(), 1u);
}

TEST(LongPoll, HeldHeartbeatIsAnsweredWhenTheRolloutDecides) {
  RolloutDeciderOptions ro;
  ro.policy = *rollout::ParseCommitPolicy("all");
  ro.recovery_grace = seconds(0);
  CoordinatorOptions options;
  options.decider = *RolloutDecider::Create(ro);
  Fleet f(options);
  auto other = f.h.Connect(11, net::Role::kAgent);
  ASSERT_TRUE(other->Register(AgentRegistration(11)).ok());
  // The sweeper builds the two agents' peer lists (a change of its own, pushed as such): wait
  // for it, so that only the decision can answer the held heartbeat below.
  ASSERT_TRUE(Eventually([&] {
    auto a = f.agent->Heartbeat(Poll(0, 0));
    auto b = other->Heartbeat(Poll(0, 0));
    return a.ok() && b.ok() && a->peers_size() == 1 && b->peers_size() == 1;
  }));
  ASSERT_TRUE(f.Publish(1).ok());
  // Agent 10 prepared first: its report is recorded at once, and it waits for the decision.
  auto prepared = f.agent->Heartbeat(Poll(0, 0, wire::PHASE_PREPARED, 1));
  ASSERT_TRUE(prepared.ok());
  EXPECT_EQ(prepared->channels(0).decision(), wire::DECISION_NONE);
  auto call = Hold(*f.agent, Poll(prepared->generation(), 1000, wire::PHASE_PREPARED, 1));
  ASSERT_TRUE(f.Held(1));
  EXPECT_TRUE(Pending(call));
  // The last agent's PREPARED completes the rollout: the held agent hears COMMIT at once.
  auto last = other->Heartbeat(Poll(0, 0, wire::PHASE_PREPARED, 1));
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->channels(0).decision(), wire::DECISION_COMMIT);
  auto reply = call.get();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->channels(0).decision(), wire::DECISION_COMMIT);
  EXPECT_EQ(reply->channels(0).current_version(), 1u);
}

TEST(LongPoll, HeldHeartbeatIsAnsweredOnRollback) {
  Fleet f;
  ASSERT_TRUE(f.Publish(1).ok());
  ASSERT_TRUE(f.Publish(2).ok());
  const uint64_t seen = f.Generation(*f.agent);
  auto call = Hold(*f.agent, Poll(seen, 1000, wire::PHASE_COMMITTED, 2));
  ASSERT_TRUE(f.Held(1));
  auto tool = f.h.Connect(9, net::Role::kTool);
  ASSERT_TRUE(tool->Rollback("policy", Version(1)).ok());
  auto reply = call.get();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->channels(0).current_version(), 1u);
}

TEST(LongPoll, HeldHeartbeatIsAnsweredWhenThePeerListChanges) {
  Fleet f;
  const uint64_t seen = f.Generation(*f.agent);
  auto call = Hold(*f.agent, Poll(seen));
  ASSERT_TRUE(f.Held(1));
  auto other = f.h.Connect(11, net::Role::kAgent);
  ASSERT_TRUE(other->Register(AgentRegistration(11)).ok());
  // The sweeper rebuilds the peer lists within its period (real time) and pushes.
  auto reply = call.get();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  ASSERT_EQ(reply->peers_size(), 1);
  EXPECT_EQ(reply->peers(0).node_id(), 11u);
}

TEST(LongPoll, HeldHeartbeatIsAnsweredWhenWaitPassesAndIsCappedAtTheInterval) {
  Fleet f;  // heartbeat timeout 3 s, interval 1 s
  const uint64_t seen = f.Generation(*f.agent);
  auto call = Hold(*f.agent, Poll(seen, 60'000));  // asks for a minute; gets the interval
  ASSERT_TRUE(f.Held(1));
  f.h.Advance(milliseconds(900));
  EXPECT_TRUE(Pending(call));
  f.h.Advance(milliseconds(100));
  auto reply = call.get();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->generation(), seen);  // nothing changed
  EXPECT_EQ(f.h.coordinator().counters().heartbeats_pushed.load(), 0u);
}

TEST(LongPoll, NodeThatKeepsOneHeartbeatHeldStaysAlive) {
  Fleet f;
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  uint64_t seen = f.Generation(*f.agent);
  std::thread poller([&] {
    while (!stop) {
      auto reply = f.agent->Heartbeat(Poll(seen, 1000));
      if (!reply.ok()) return;
      seen = reply->generation();
      ++answered;
    }
  });
  // Ten seconds of fake time, three heartbeat timeouts. Each held heartbeat expires after the
  // interval (1 s); the clock only moves on once the poller has the next one held.
  for (int step = 1; step <= 100; ++step) {
    ASSERT_TRUE(f.Held(1));
    f.h.Advance(milliseconds(100));
    if (step % 10 == 0) {
      // Nudged 1 ms at a time while waiting: the coordinator turns the held heartbeat's deadline
      // into a timeout for Receive, and an Advance between the two (a loaded machine, tsan)
      // moves the deadline that much later on the fake clock, which then waits for the next
      // Advance (seen once under tsan: the test hung at step 10).
      const bool got = Eventually([&] {
        if (answered.load() >= step / 10) return true;
        f.h.Advance(milliseconds(1));
        return false;
      });
      if (!got) {
        stop = true;
        f.agent->Wake().IgnoreError();
        poller.join();
        FAIL() << "no answer by step " << step;
      }
    }
  }
  f.h.coordinator().Sweep();
  EXPECT_GE(answered.load(), 9);
  EXPECT_EQ(f.h.coordinator().counters().nodes_died.load(), 0u);
  EXPECT_EQ(f.h.coordinator().counters().members_alive.load(), 1u);
  stop = true;
  f.agent->Wake().IgnoreError();
  poller.join();
}

TEST(LongPoll, WakeAnswersTheHeldHeartbeatAndIsNotAnswered) {
  Fleet f;
  const uint64_t seen = f.Generation(*f.agent);
  auto call = Hold(*f.agent, Poll(seen));
  ASSERT_TRUE(f.Held(1));
  ASSERT_TRUE(f.agent->Wake().ok());
  auto reply = call.get();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->generation(), seen);
  // The connection is in step: the next call gets its own reply.
  auto next = f.agent->Heartbeat(Poll(0, 0));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(f.h.coordinator().counters().heartbeats_held.load(), 0u);
}

TEST(LongPoll, WakeThatOvertakesItsHeartbeatKeepsTheNextOneFromWaiting) {
  Fleet f;
  const uint64_t seen = f.Generation(*f.agent);
  ASSERT_TRUE(f.agent->Wake().ok());
  auto reply = f.agent->Heartbeat(Poll(seen));  // would be held; the wake came first
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  // Only that one: the next is held again.
  auto call = Hold(*f.agent, Poll(seen));
  ASSERT_TRUE(f.Held(1));
  ASSERT_TRUE(f.agent->Wake().ok());
  EXPECT_TRUE(call.get().ok());
}

TEST(LongPoll, NodeThatDisconnectsWhileHeldIsCleanedUp) {
  Fleet f;
  const uint64_t seen = f.Generation(*f.agent);
  auto call = Hold(*f.agent, Poll(seen));
  ASSERT_TRUE(f.Held(1));
  f.agent->Close();
  auto reply = call.get();
  EXPECT_FALSE(reply.ok());
  ASSERT_TRUE(f.Held(0));
  // A change after it left pushes nothing and breaks nothing.
  ASSERT_TRUE(f.Publish(1).ok());
  EXPECT_EQ(f.h.coordinator().counters().heartbeats_pushed.load(), 0u);
  // It comes back on a new connection and polls again.
  auto again = f.h.Connect(10, net::Role::kAgent);
  ASSERT_TRUE(again->Register(AgentRegistration(10)).ok());
  auto fresh = again->Heartbeat(Poll(seen));  // a new registration is news: answered at once
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(fresh->channels(0).version(), 1u);
  EXPECT_GT(fresh->generation(), seen);
}

TEST(LongPoll, NothingIsHeldWithoutWaitMsOrThroughHandle) {
  Fleet f;
  const uint64_t seen = f.Generation(*f.agent);
  // An older agent: no wait_ms, answered at once although nothing changed.
  auto reply = f.agent->Heartbeat(Poll(seen, 0));
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->generation(), seen);
  // Handle (the bench's and tests' direct path) never holds.
  wire::Envelope e;
  e.set_request_id(5);
  *e.mutable_heartbeat() = Poll(seen);
  wire::Envelope r = f.h.coordinator().Handle(
      99, {.node_id = PeerId(10), .role = net::Role::kAgent, .address = {}}, e);
  // Session 99 is not the node's connection: refused, but answered.
  EXPECT_EQ(r.request_id(), 5u);
  EXPECT_EQ(r.body_case(), wire::Envelope::kError);
  EXPECT_EQ(f.h.coordinator().counters().heartbeats_held.load(), 0u);
}

}  // namespace
}  // namespace weightcast::coord
