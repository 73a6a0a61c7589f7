#include "coord/coordinator_metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <sstream>
#include <string>

#include "coord/coordinator.h"
#include "coord_test_util.h"

namespace weightcast::coord {
namespace {

using testing::AgentRegistration;
using testing::CoordinatorHarness;
using testing::Signed;
using testing::TestManifest;

// Decides nothing at publish; decides what the test queued at the next Decide (any thread: the
// harness's sweeper calls it too).
class QueuedDecider final : public Decider {
 public:
  DecisionChange OnPublish(const ChannelState&, const wire::VersionEntry& entry) override {
    return {.version = entry.version(), .decision = wire::DECISION_NONE, .abort_reason = {}};
  }
  std::vector<DecisionChange> Decide(const ChannelState& channel, std::span<const NodeProgress>,
                                     net::TimePoint) override {
    std::lock_guard lock(mu_);
    std::vector<DecisionChange> out;
    for (const wire::VersionEntry& e : channel.versions) {
      auto it = queued_.find(e.version());
      if (it == queued_.end() || e.decision() != wire::DECISION_NONE) continue;
      out.push_back({.version = e.version(),
                     .decision = it->second,
                     .abort_reason = it->second == wire::DECISION_ABORT ? "test" : ""});
      queued_.erase(it);
    }
    return out;
  }
  void Queue(uint64_t version, wire::Decision decision) {
    std::lock_guard lock(mu_);
    queued_[version] = decision;
  }

 private:
  std::mutex mu_;
  std::map<uint64_t, wire::Decision> queued_;
};

// The value of the sample `series` (name and labels as rendered) on `page`; "" when absent.
std::string Sample(const std::string& page, const std::string& series) {
  std::istringstream lines(page);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with(series + " ")) return line.substr(series.size() + 1);
  }
  return "";
}

TEST(ChannelMetrics, VersionsDecisionsRollbacksAndRolloutTimesPerChannel) {
  metrics::Registry registry;  // outlives the coordinator, which updates it
  auto decider = std::make_shared<QueuedDecider>();
  CoordinatorOptions options;
  options.decider = decider;
  options.metrics = &registry;
  CoordinatorHarness h(options);
  ASSERT_TRUE(h.Start().ok());
  auto pub = h.Connect(7, net::Role::kPublisher);
  const uint64_t t0 = 1'700'000'000'000;
  h.SetUnixMs(t0);
  ASSERT_TRUE(pub->Publish(Signed(TestManifest("p", 1, 1))).ok());
  std::string page = registry.Render();
  EXPECT_EQ(Sample(page, "weightcast_coordinator_current_version{channel=\"p\"}"), "0") << page;
  EXPECT_EQ(Sample(page, "weightcast_coordinator_commits_total{channel=\"p\"}"), "0");

  // Committed 90 s after its publication.
  h.SetUnixMs(t0 + 90'000);
  decider->Queue(1, wire::DECISION_COMMIT);
  h.coordinator().Sweep();
  // v2 committed at once, v3 aborted.
  ASSERT_TRUE(pub->Publish(Signed(TestManifest("p", 2, 2))).ok());
  decider->Queue(2, wire::DECISION_COMMIT);
  h.coordinator().Sweep();
  ASSERT_TRUE(pub->Publish(Signed(TestManifest("p", 3, 3))).ok());
  decider->Queue(3, wire::DECISION_ABORT);
  h.coordinator().Sweep();
  page = registry.Render();
  EXPECT_EQ(Sample(page, "weightcast_coordinator_current_version{channel=\"p\"}"), "2") << page;
  EXPECT_EQ(Sample(page, "weightcast_coordinator_committed_version{channel=\"p\"}"), "2");
  EXPECT_EQ(Sample(page, "weightcast_coordinator_commits_total{channel=\"p\"}"), "2");
  EXPECT_EQ(Sample(page, "weightcast_coordinator_aborts_total{channel=\"p\"}"), "1");
  EXPECT_EQ(Sample(page, "weightcast_coordinator_rollout_seconds_count{channel=\"p\"}"), "2");
  EXPECT_EQ(Sample(page, "weightcast_coordinator_rollout_seconds_sum{channel=\"p\"}"), "90");
  EXPECT_EQ(Sample(page, "weightcast_coordinator_rollout_seconds_bucket{channel=\"p\",le=\"64\"}"),
            "1");
  EXPECT_EQ(Sample(page, "weightcast_coordinator_rollout_seconds_bucket{channel=\"p\",le=\"128\"}"),
            "2");

  // A rollback lowers current, keeps the newest committed and is counted, not as an abort.
  auto tool = h.Connect(9, net::Role::kTool);
  ASSERT_TRUE(tool->Rollback("p", Version(1)).ok());
  page = registry.Render();
  EXPECT_EQ(Sample(page, "weightcast_coordinator_current_version{channel=\"p\"}"), "1") << page;
  EXPECT_EQ(Sample(page, "weightcast_coordinator_committed_version{channel=\"p\"}"), "2");
  EXPECT_EQ(Sample(page, "weightcast_coordinator_rollbacks_total{channel=\"p\"}"), "1");
  EXPECT_EQ(Sample(page, "weightcast_coordinator_aborts_total{channel=\"p\"}"), "1");
  EXPECT_EQ(Sample(page, "weightcast_coordinator_commits_total{channel=\"p\"}"), "2");
  EXPECT_TRUE(registry.errors().empty());

  // A restarted coordinator shows the recovered versions before anything happens.
  h.Stop();
  metrics::Registry fresh;
  options.metrics = &fresh;
  CoordinatorHarness restarted(options);
  std::filesystem::copy(h.state_dir(), restarted.state_dir(),
                        std::filesystem::copy_options::recursive);
  ASSERT_TRUE(restarted.Start().ok());
  page = fresh.Render();
  EXPECT_EQ(Sample(page, "weightcast_coordinator_current_version{channel=\"p\"}"), "1") << page;
  EXPECT_EQ(Sample(page, "weightcast_coordinator_committed_version{channel=\"p\"}"), "2");
  EXPECT_EQ(Sample(page, "weightcast_coordinator_commits_total{channel=\"p\"}"), "0");
}

TEST(ChannelMetrics, CountsFailedLaggingAndDeadAgentsPerChannel) {
  metrics::Registry registry;
  CoordinatorOptions options;
  options.metrics = &registry;  // EachDecider: every version is committed as it is published
  CoordinatorHarness h(options);
  ASSERT_TRUE(h.Start().ok());
  auto pub = h.Connect(7, net::Role::kPublisher);
  ASSERT_TRUE(pub->Publish(Signed(TestManifest("p", 1, 1))).ok());
  auto report = [](uint64_t version, wire::Phase phase, uint64_t current) {
    wire::Heartbeat hb;
    wire::ChannelProgress* p = hb.add_channels();
    p->set_channel("p");
    p->set_version(version);
    p->set_phase(phase);
    p->set_current_version(current);
    return hb;
  };
  auto ok = h.Connect(10, net::Role::kAgent);
  auto failed = h.Connect(11, net::Role::kAgent);
  auto behind = h.Connect(12, net::Role::kAgent);
  auto silent = h.Connect(13, net::Role::kAgent);
  auto other = h.Connect(14, net::Role::kAgent);
  ASSERT_TRUE(ok->Register(AgentRegistration(10, "p")).ok());
  ASSERT_TRUE(failed->Register(AgentRegistration(11, "p")).ok());
  ASSERT_TRUE(behind->Register(AgentRegistration(12, "p")).ok());
  ASSERT_TRUE(silent->Register(AgentRegistration(13, "p")).ok());
  ASSERT_TRUE(other->Register(AgentRegistration(14, "q")).ok());
  // Half a timeout later the others report; node 13 stays silent and dies first.
  h.Advance(std::chrono::milliseconds(1600));
  ASSERT_TRUE(ok->Heartbeat(report(1, wire::PHASE_COMMITTED, 1)).ok());
  ASSERT_TRUE(failed->Heartbeat(report(1, wire::PHASE_FAILED, 0)).ok());
  ASSERT_TRUE(behind->Heartbeat(report(1, wire::PHASE_FETCHING, 0)).ok());
  ASSERT_TRUE(other->Heartbeat({}).ok());
  h.Advance(std::chrono::milliseconds(1600));
  h.coordinator().Sweep();
  const std::string page = registry.Render();
  EXPECT_EQ(Sample(page, "weightcast_coordinator_agents_failed{channel=\"p\"}"), "1") << page;
  EXPECT_EQ(Sample(page, "weightcast_coordinator_agents_lagging{channel=\"p\"}"), "1");
  EXPECT_EQ(Sample(page, "weightcast_coordinator_agents_dead{channel=\"p\"}"), "1");
  // A channel known only from a registration has its series too, all zero.
  EXPECT_EQ(Sample(page, "weightcast_coordinator_agents_failed{channel=\"q\"}"), "0");
  EXPECT_EQ(Sample(page, "weightcast_coordinator_current_version{channel=\"q\"}"), "0");
  EXPECT_EQ(Sample(page, "weightcast_coordinator_rollout_seconds_count{channel=\"p\"}"), "1");
  EXPECT_EQ(Sample(page, "weightcast_coordinator_commits_total{channel=\"p\"}"), "1");
}

TEST(ChannelMetrics, WithoutARegistryNothingIsRegistered) {
  ChannelMetrics m(nullptr);
  ChannelState channel;
  channel.name = "p";
  m.Update(channel);
  m.SetAgents({{"p", ChannelAgentCounts{.failed = 1}}});  // no crash, nothing to check
}

}  // namespace
}  // namespace weightcast::coord
