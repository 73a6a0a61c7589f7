// Following the leader: a standby refuses every request naming the leader, and a
// client given a list of coordinators ends up on the one that leads, whatever the order.
#include "coord/standby.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "coord/client.h"
#include "coord/coordinator.h"
#include "coord_test_util.h"
#include "net/memory_transport.h"

namespace weightcast::coord {
namespace {

using testing::AgentRegistration;
using testing::kSecret;
using testing::NodeOptions;

class StandbyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.state_dir = dir_.path() / "state";
    options.secret = kSecret;
    options.clock = &clock_;
    options.log = [](std::string_view) {};
    auto opened = Coordinator::Open(std::move(options));
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    coordinator_ = std::move(*opened);
    leader_transport_ = network_.CreateTransport("leader", NodeOptions(1, net::Role::kCoordinator));
    auto leader_listener = leader_transport_->Listen("mem:leader");
    ASSERT_TRUE(leader_listener.ok());
    leader_listener_ = std::move(*leader_listener);
    serve_ = std::thread([this] { coordinator_->Serve(*leader_listener_); });
    standby_transport_ =
        network_.CreateTransport("standby", NodeOptions(2, net::Role::kCoordinator));
    auto standby_listener = standby_transport_->Listen("mem:standby");
    ASSERT_TRUE(standby_listener.ok());
    standby_ = StandbyServer::Start(std::move(*standby_listener), [] { return "mem:leader"; });
    agent_transport_ = network_.CreateTransport("agent", NodeOptions(7, net::Role::kAgent));
  }
  void TearDown() override {
    if (standby_ != nullptr) standby_->Stop();
    if (coordinator_ != nullptr) coordinator_->Stop();
    if (serve_.joinable()) serve_.join();
  }

  weightcast::testing::TempDir dir_;
  net::FakeClock clock_;
  net::MemoryNetwork network_{clock_};
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<net::Transport> leader_transport_;
  std::unique_ptr<net::Listener> leader_listener_;
  std::thread serve_;
  std::unique_ptr<net::Transport> standby_transport_;
  std::unique_ptr<StandbyServer> standby_;
  std::unique_ptr<net::Transport> agent_transport_;
};

TEST_F(StandbyTest, StandbyRefusesEveryRequestNamingTheLeader) {
  auto client = CoordinatorClient::Connect(*agent_transport_, "mem:standby");
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto registered = (*client)->Register(AgentRegistration(7));
  ASSERT_FALSE(registered.ok());
  EXPECT_EQ(registered.status().code(), Code::kUnavailable);
  EXPECT_TRUE(IsStandbyRefusal(registered.status()));
  // The leader comes in the refusal's own field, not out of its words.
  EXPECT_EQ((*client)->standby_leader(), "mem:leader");
  EXPECT_TRUE(IsStandbyRefusal((*client)->GetStatus().status()));
  EXPECT_FALSE(IsStandbyRefusal(Unavailable("coordinator gone")));
  EXPECT_FALSE(IsStandbyRefusal(Unavailable(StandbyRefusal("mem:leader"))));
}

TEST_F(StandbyTest, AListFollowsTheLeaderInAnyOrder) {
  for (const char* list : {"mem:standby,mem:leader", "mem:leader,mem:standby", "mem:standby"}) {
    auto client = CoordinatorClient::Connect(*agent_transport_, list);
    if (std::string_view(list) == "mem:standby") {
      // One address: no probe, as before; the first call says where the leader is.
      ASSERT_TRUE(client.ok());
      EXPECT_TRUE(IsStandbyRefusal((*client)->Register(AgentRegistration(7)).status()));
      continue;
    }
    ASSERT_TRUE(client.ok()) << list << ": " << client.status().ToString();
    auto registered = (*client)->Register(AgentRegistration(7));
    EXPECT_TRUE(registered.ok()) << list << ": " << registered.status().ToString();
  }
}

TEST_F(StandbyTest, AStandbyNamingALeaderOutsideTheListIsFollowed) {
  // The list names only the standby and a dead address; the standby names the leader.
  auto client = CoordinatorClient::Connect(*agent_transport_, "mem:nobody,mem:standby");
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE((*client)->Register(AgentRegistration(7)).ok());
}

// The memory network waits on the fake clock, and nothing else moves it here: a probe whose
// answer never came would wait forever instead of timing out (CoordinatorClient counts its
// deadline on the real clock, the memory connection on the fake one). This test once hung in a
// full ctest run, with the client waiting for the standby's refusal; no run since (12,000 of
// them, under load) has lost an answer. Time moves on while the client probes, so a lost
// answer fails the test with DEADLINE_EXCEEDED and does not hang it.
TEST_F(StandbyTest, NoLeaderAmongTheListIsUnavailable) {
  // A standby that knows no leader yet, and an address nobody listens on.
  auto transport = network_.CreateTransport("standby2", NodeOptions(3, net::Role::kCoordinator));
  auto listener = transport->Listen("mem:standby2");
  ASSERT_TRUE(listener.ok());
  auto lonely = StandbyServer::Start(std::move(*listener), [] { return std::string(); });
  std::atomic<bool> probing{true};
  std::thread ticker([&] {
    while (probing) {
      clock_.Advance(std::chrono::milliseconds(10));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  auto client = CoordinatorClient::Connect(*agent_transport_, "mem:standby2,mem:nobody");
  probing = false;
  ticker.join();
  lonely->Stop();
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), Code::kUnavailable) << client.status().ToString();
}

}  // namespace
}  // namespace weightcast::coord
