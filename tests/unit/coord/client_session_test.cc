// The session agents and publishers hold with their coordinator: registering again after a
// reconnect, following a new leader, long polls, and logging each outage once.
#include "coord/client_session.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coord/coordinator.h"
#include "coord/standby.h"
#include "coord_test_util.h"
#include "net/memory_transport.h"

namespace weightcast::coord {
namespace {

using namespace std::chrono_literals;
using testing::AgentRegistration;
using testing::CoordinatorHarness;
using testing::kSecret;
using testing::NodeOptions;

// Lines the session logged, with their level.
class Lines {
 public:
  SessionLog Log() {
    return {.info = [this](const std::string& line) { Add("INFO " + line); },
            .error = [this](const std::string& line) { Add("ERROR " + line); }};
  }
  std::vector<std::string> Take() {
    std::lock_guard lock(mu_);
    return std::exchange(lines_, {});
  }

 private:
  void Add(std::string line) {
    std::lock_guard lock(mu_);
    lines_.push_back(std::move(line));
  }
  std::mutex mu_;
  std::vector<std::string> lines_;
};

bool StartsWith(const std::string& line, std::string_view prefix) {
  return line.starts_with(prefix);
}

// An agent-like node: registers node 7 on "policy" and counts registrations.
class CountingDelegate : public SessionDelegate {
 public:
  wire::Register Registration() override { return AgentRegistration(7); }
  void OnRegistered(const wire::RegisterReply&) override { ++registrations; }
  void OnConnectResult(const Status& status) override { last_result = status; }
  std::atomic<int> registrations{0};
  Status last_result;
};

class ClientSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(harness_.Start().ok());
    transport_ = harness_.network().CreateTransport("node7", NodeOptions(7, net::Role::kAgent));
  }

  std::unique_ptr<ClientSession> MakeSession(std::string coordinator = "mem:coord") {
    ClientSessionOptions options;
    options.coordinator = std::move(coordinator);
    options.connect_timeout = 2s;
    options.log = lines_.Log();
    options.clock = &clock_;
    return std::make_unique<ClientSession>(*transport_, std::move(options), delegate_);
  }

  CoordinatorHarness harness_;
  std::unique_ptr<net::Transport> transport_;
  net::FakeClock clock_;  // the session's outage clock
  Lines lines_;
  CountingDelegate delegate_;
};

TEST_F(ClientSessionTest, RegistersOnceAndKeepsTheConnection) {
  auto session = MakeSession();
  auto first = session->Client();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto again = session->Client();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(first->get(), again->get());
  EXPECT_EQ(delegate_.registrations, 1);
  EXPECT_TRUE(delegate_.last_result.ok());
  // The interval is the coordinator's (a third of its 3 s timeout).
  EXPECT_EQ(session->heartbeat_interval(), harness_.coordinator().heartbeat_interval());
  EXPECT_TRUE(lines_.Take().empty());
}

TEST_F(ClientSessionTest, ReconnectsAndRegistersAgainAfterTheCoordinatorComesBack) {
  auto session = MakeSession();
  auto client = session->Client();
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(session->Heartbeat(*client, {}, /*hold=*/false).ok());

  harness_.Stop();
  auto lost = session->Heartbeat(*client, {}, /*hold=*/false);
  ASSERT_FALSE(lost.ok());
  EXPECT_TRUE(LostConnection(lost.status())) << lost.status().ToString();
  std::vector<std::string> lines = lines_.Take();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(StartsWith(lines[0], "INFO lost the coordinator: ")) << lines[0];

  // The outage: said once at INFO, however many tries, with a growing backoff.
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(session->Client().ok());
  EXPECT_EQ(session->retry_delay(), 1600ms);
  EXPECT_FALSE(delegate_.last_result.ok());
  lines = lines_.Take();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(StartsWith(lines[0], "INFO coordinator at mem:coord: ")) << lines[0];
  EXPECT_NE(lines[0].find("; retrying every 100ms"), std::string::npos) << lines[0];

  ASSERT_TRUE(harness_.Start().ok());
  auto back = session->Client();
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_NE(back->get(), client->get());
  EXPECT_EQ(delegate_.registrations, 2);
  EXPECT_TRUE(delegate_.last_result.ok());
  EXPECT_EQ(session->retry_delay(), kReconnectFirst);
  EXPECT_TRUE(session->Heartbeat(*back, {}, /*hold=*/false).ok());
  // A short outage ends quietly: it was never logged at ERROR.
  EXPECT_TRUE(lines_.Take().empty());
}

TEST_F(ClientSessionTest, ALongOutageIsAnErrorOnceAndEndsWithALine) {
  auto session = MakeSession();
  ASSERT_TRUE(session->Client().ok());
  harness_.Stop();
  auto client = session->Client();
  ASSERT_TRUE(client.ok());  // the session does not know yet
  EXPECT_FALSE(session->Heartbeat(*client, {}, false).ok());
  lines_.Take();

  EXPECT_FALSE(session->Client().ok());  // INFO
  clock_.Advance(kUnreachableErrorAfter - 1s);
  EXPECT_FALSE(session->Client().ok());  // still quiet
  clock_.Advance(1s);
  EXPECT_FALSE(session->Client().ok());  // ERROR
  clock_.Advance(30s);
  EXPECT_FALSE(session->Client().ok());  // quiet until the reminder
  clock_.Advance(kErrorReminder);
  EXPECT_FALSE(session->Client().ok());  // the reminder
  std::vector<std::string> lines = lines_.Take();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(StartsWith(lines[0], "INFO coordinator at mem:coord: "));
  EXPECT_TRUE(StartsWith(lines[1], "ERROR coordinator at mem:coord unreachable for 10s: "))
      << lines[1];
  EXPECT_NE(lines[1].find("; still retrying every"), std::string::npos) << lines[1];
  EXPECT_TRUE(StartsWith(lines[2], "ERROR coordinator at mem:coord unreachable for 100s: "))
      << lines[2];

  ASSERT_TRUE(harness_.Start().ok());
  ASSERT_TRUE(session->Client().ok());
  lines = lines_.Take();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "INFO reached the coordinator again after 100s of errors");

  // The next outage is a new one: INFO again.
  harness_.Stop();
  client = session->Client();
  EXPECT_FALSE(session->Heartbeat(*client, {}, false).ok());
  EXPECT_FALSE(session->Client().ok());
  lines = lines_.Take();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(StartsWith(lines[1], "INFO coordinator at mem:coord: ")) << lines[1];
}

TEST_F(ClientSessionTest, LongPollsAreHeldAndWoken) {
  auto session = MakeSession();
  auto client = session->Client();
  ASSERT_TRUE(client.ok());
  EXPECT_FALSE(session->long_poll());
  auto first = session->Heartbeat(*client, {}, /*hold=*/true);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // The generation says the coordinator holds heartbeats; the next one is held until woken.
  EXPECT_NE(first->generation(), 0u);
  EXPECT_TRUE(session->long_poll());
  std::atomic<bool> answered{false};
  std::thread held([&] {
    EXPECT_TRUE(session->Heartbeat(*client, {}, /*hold=*/true).ok());
    answered = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(answered);
  session->Wake();
  held.join();
  EXPECT_TRUE(answered);
}

TEST_F(ClientSessionTest, EndLeavesAndRefusesLaterCalls) {
  auto session = MakeSession();
  ASSERT_TRUE(session->Client().ok());
  session->End(/*leave=*/true);
  auto after = session->Client();
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), Code::kAborted);
  auto status = harness_.Connect(9, net::Role::kTool)->GetStatus("policy", true);
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->nodes_size(), 1);
  EXPECT_TRUE(status->nodes(0).left());
}

TEST(OutageLog, ARefusalIsAnErrorAtOnceAndRetriedSlowly) {
  net::FakeClock clock;
  Lines lines;
  OutageLog log("mem:coord", lines.Log(), clock, kReconnectMax, /*retry_refusals=*/true);
  const Status refused = Unauthenticated("the coordinator refused our handshake: wrong secret?");
  EXPECT_EQ(log.OnFailure(refused), kRefusedRetryFirst);
  EXPECT_EQ(log.OnFailure(refused), 2 * kRefusedRetryFirst);
  for (int i = 0; i < 10; ++i) log.OnFailure(refused);
  EXPECT_EQ(log.OnFailure(refused), kRefusedRetryMax);
  std::vector<std::string> said = lines.Take();
  ASSERT_EQ(said.size(), 1u);
  EXPECT_TRUE(StartsWith(said[0], "ERROR cannot work with the coordinator at mem:coord: "));
  EXPECT_NE(said[0].find("this will not fix itself; retrying every 1000ms"), std::string::npos)
      << said[0];
  // Another error is said at once.
  log.OnFailure(FailedPrecondition("coordinator mem:coord: wrong cluster (--cluster ...)"));
  EXPECT_EQ(lines.Take().size(), 1u);
}

TEST(OutageLog, ANodeThatGivesUpOnRefusalsDoesNotSayItRetries) {
  net::FakeClock clock;
  Lines lines;
  OutageLog log("mem:coord", lines.Log(), clock, kReconnectMax, /*retry_refusals=*/false);
  log.OnFailure(Unauthenticated("wrong secret?"));
  std::vector<std::string> said = lines.Take();
  ASSERT_EQ(said.size(), 1u);
  EXPECT_TRUE(said[0].ends_with("this will not fix itself")) << said[0];
}

TEST(OutageLog, ARefusedHeartbeatIsAnErrorOncePerErrorAndMinute) {
  net::FakeClock clock;
  Lines lines;
  OutageLog log("mem:coord", lines.Log(), clock, kReconnectMax, true);
  const Status replaced = FailedPrecondition("replaced by a newer registration");
  log.OnRefusedHeartbeat(replaced);
  log.OnRefusedHeartbeat(replaced);
  clock.Advance(30s);
  log.OnRefusedHeartbeat(replaced);
  std::vector<std::string> said = lines.Take();
  ASSERT_EQ(said.size(), 1u);
  EXPECT_TRUE(StartsWith(said[0], "ERROR the coordinator refused a heartbeat: ")) << said[0];
  clock.Advance(kErrorReminder);
  log.OnRefusedHeartbeat(replaced);
  log.OnRefusedHeartbeat(FailedPrecondition("register first"));
  EXPECT_EQ(lines.Take().size(), 2u);
  // Accepted in between: the same refusal is news again.
  log.OnHeartbeatAccepted();
  log.OnRefusedHeartbeat(replaced);
  EXPECT_EQ(lines.Take().size(), 1u);
}

TEST(OutageLog, BackoffDoublesUpToTheMaximum) {
  net::FakeClock clock;
  Lines lines;
  OutageLog log("mem:coord", lines.Log(), clock, 500ms, true);
  const Status away = Unavailable("connection refused");
  EXPECT_EQ(log.OnFailure(away), 100ms);
  EXPECT_EQ(log.OnFailure(away), 200ms);
  EXPECT_EQ(log.OnFailure(away), 400ms);
  EXPECT_EQ(log.OnFailure(away), 500ms);
  log.OnSuccess();
  EXPECT_EQ(log.OnFailure(away), 100ms);
}

// Two coordinators, one leading and one standing by, that swap: the session follows the leader.
class LeaderChangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The memory network waits on the fake clock: moving it keeps a lost answer to a probe from
    // hanging the test (it times out instead; see StandbyTest.NoLeaderAmongTheListIsUnavailable).
    ticker_ = std::thread([this] {
      while (ticking_) {
        clock_.Advance(10ms);
        std::this_thread::sleep_for(5ms);
      }
    });
    ASSERT_TRUE(Lead("mem:a", "mem:b").ok());
    transport_ = network_.CreateTransport("node7", NodeOptions(7, net::Role::kAgent));
  }
  void TearDown() override {
    StopBoth();
    ticking_ = false;
    ticker_.join();
  }

  // A coordinator at `leader` (its own state), a standby at `standby` naming it.
  Status Lead(const std::string& leader, const std::string& standby) {
    CoordinatorOptions options;
    options.state_dir = dir_.path() / leader.substr(4);
    options.secret = kSecret;
    options.clock = &clock_;
    options.log = [](std::string_view) {};
    WC_ASSIGN_OR_RETURN(coordinator_, Coordinator::Open(std::move(options)));
    transports_.push_back(
        network_.CreateTransport("c" + std::to_string(transports_.size()),
                                 NodeOptions(100 + transports_.size(), net::Role::kCoordinator)));
    WC_ASSIGN_OR_RETURN(leader_listener_, transports_.back()->Listen(leader));
    serve_ = std::thread([this] { coordinator_->Serve(*leader_listener_); });
    transports_.push_back(
        network_.CreateTransport("c" + std::to_string(transports_.size()),
                                 NodeOptions(100 + transports_.size(), net::Role::kCoordinator)));
    WC_ASSIGN_OR_RETURN(std::unique_ptr<net::Listener> standby_listener,
                        transports_.back()->Listen(standby));
    standby_ = StandbyServer::Start(std::move(standby_listener), [leader] { return leader; });
    return Status::Ok();
  }
  void StopBoth() {
    if (standby_ != nullptr) standby_->Stop();
    standby_.reset();
    if (coordinator_ != nullptr) coordinator_->Stop();
    if (serve_.joinable()) serve_.join();
    coordinator_.reset();
    leader_listener_.reset();
  }

  weightcast::testing::TempDir dir_;
  net::FakeClock clock_;
  net::MemoryNetwork network_{clock_};
  std::vector<std::unique_ptr<net::Transport>> transports_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<net::Listener> leader_listener_;
  std::thread serve_;
  std::unique_ptr<StandbyServer> standby_;
  std::unique_ptr<net::Transport> transport_;
  CountingDelegate delegate_;
  Lines lines_;
  std::atomic<bool> ticking_{true};
  std::thread ticker_;
};

TEST_F(LeaderChangeTest, FollowsTheNewLeader) {
  ClientSessionOptions options;
  options.coordinator = "mem:b,mem:a";  // the standby first
  options.connect_timeout = 2s;
  options.log = lines_.Log();
  ClientSession session(*transport_, std::move(options), delegate_);
  auto first = session.Client();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(session.Heartbeat(*first, {}, false).ok());

  // b takes over; a stands by and names it.
  StopBoth();
  ASSERT_TRUE(Lead("mem:b", "mem:a").ok());
  EXPECT_FALSE(session.Heartbeat(*first, {}, false).ok());
  auto second = session.Client();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(delegate_.registrations, 2);
  ASSERT_TRUE(session.Heartbeat(*second, {}, false).ok());
  // The node is a member of the new leader's fleet.
  auto tool = network_.CreateTransport("tool", NodeOptions(9, net::Role::kTool));
  auto status_client = CoordinatorClient::Connect(*tool, "mem:b");
  ASSERT_TRUE(status_client.ok());
  auto status = (*status_client)->GetStatus("policy");
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  ASSERT_EQ(status->nodes_size(), 1);
  EXPECT_EQ(status->nodes(0).node_id(), 7u);
}

}  // namespace
}  // namespace weightcast::coord
