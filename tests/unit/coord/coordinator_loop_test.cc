// The coordinator serves connections that push frames (TCP) from one event loop: its
// process's threads do not grow with the connections, and heartbeats and long polls on them are
// still answered. The clients run in a child process forked before the parent starts any thread,
// so that /proc/self/task in the parent counts the coordinator's threads only.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coord/envelope.h"
#include "coord_test_util.h"
#include "net/tcp_transport.h"

namespace weightcast::coord {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::AgentRegistration;
using testing::NodeOptions;

constexpr int kClients = 64;
// The long polls each client keeps parked while the parent counts.
constexpr auto kPollFor = milliseconds(2500);

size_t Threads() {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++n;
  }
  return n;
}

// The child: kClients agents, each registers, heartbeats once, then long-polls until kPollFor
// passed. Exit status 0 when every call answered and the polls were held (not answered at once).
int RunClients(const std::string& address, int ready_fd) {
  std::vector<std::unique_ptr<net::Transport>> transports;
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  for (int i = 0; i < kClients; ++i) {
    auto transport = net::TcpTransport::Create(NodeOptions(100 + i, net::Role::kAgent));
    if (!transport.ok()) return 2;
    auto client = CoordinatorClient::Connect(**transport, address);
    if (!client.ok()) return 3;
    (*client)->set_timeout(seconds(10));
    if (!(*client)->Register(AgentRegistration(100 + i)).ok()) return 4;
    transports.push_back(std::move(transport).value());
    clients.push_back(std::move(client).value());
  }
  std::atomic<int> failures{0};
  std::atomic<int> polls{0};
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  const auto until = std::chrono::steady_clock::now() + kPollFor;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      wire::Heartbeat beat;
      wire::ChannelProgress* p = beat.add_channels();
      p->set_channel("policy");
      p->set_phase(wire::PHASE_IDLE);
      auto first = clients[i]->Heartbeat(beat);
      if (!first.ok()) {
        ++failures;
        return;
      }
      uint64_t seen = first->generation();
      ++started;
      while (std::chrono::steady_clock::now() < until) {
        beat.set_wait_ms(1000);
        beat.set_seen_generation(seen);
        auto reply = clients[i]->Heartbeat(beat);
        if (!reply.ok()) {
          ++failures;
          return;
        }
        seen = reply->generation();
        ++polls;
      }
    });
  }
  while (started.load() + failures.load() < kClients) std::this_thread::sleep_for(milliseconds(5));
  const char byte = 'r';
  if (write(ready_fd, &byte, 1) != 1) return 5;
  for (std::thread& t : threads) t.join();
  if (failures.load() != 0) return 6;
  // Held polls: about three per client in kPollFor (1 s each, fewer at the first rebuilds).
  // Polls answered at once would be hundreds.
  if (polls.load() > kClients * 10) return 7;
  return 0;
}

// A coordinator serving TCP on 127.0.0.1 from a thread of its own, until Stop.
struct ServedCoordinator {
  weightcast::testing::TempDir dir;
  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<net::Transport> transport;
  std::unique_ptr<net::Listener> listener;
  std::thread serve;

  // Fails the test (ASSERT in the caller: check ok()) when it cannot start.
  explicit ServedCoordinator(uint32_t loop_queue_frames = CoordinatorOptions{}.loop_queue_frames) {
    CoordinatorOptions options;
    options.state_dir = dir.path() / "state";
    options.secret = testing::kSecret;
    options.log = [](std::string_view) {};
    options.loop_queue_frames = loop_queue_frames;
    auto opened = Coordinator::Open(options);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    auto created = net::TcpTransport::Create(NodeOptions(1, net::Role::kCoordinator));
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!opened.ok() || !created.ok()) return;
    coordinator = std::move(opened).value();
    transport = std::move(created).value();
    auto listening = transport->Listen("127.0.0.1:0");
    EXPECT_TRUE(listening.ok()) << listening.status().ToString();
    if (!listening.ok()) return;
    listener = std::move(listening).value();
    serve = std::thread([this] { coordinator->Serve(*listener); });
  }
  bool ok() const { return listener != nullptr; }
  void Stop() {
    if (coordinator) coordinator->Stop();
    if (serve.joinable()) serve.join();
  }
  ~ServedCoordinator() { Stop(); }
};

TEST(CoordinatorLoopTest, ThreadsDoNotGrowWithTcpConnections) {
  int address_pipe[2];
  int ready_pipe[2];
  ASSERT_EQ(pipe(address_pipe), 0);
  ASSERT_EQ(pipe(ready_pipe), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(address_pipe[1]);
    close(ready_pipe[0]);
    char buffer[128] = {};
    ssize_t got = 0;
    while (got < static_cast<ssize_t>(sizeof(buffer)) - 1) {
      const ssize_t n = read(address_pipe[0], buffer + got, sizeof(buffer) - 1 - got);
      if (n <= 0) break;
      got += n;
    }
    _exit(RunClients(std::string(buffer, static_cast<size_t>(got)), ready_pipe[1]));
  }
  close(address_pipe[0]);
  close(ready_pipe[1]);

  ServedCoordinator served;
  ASSERT_TRUE(served.ok());
  Coordinator* coordinator = served.coordinator.get();
  std::this_thread::sleep_for(milliseconds(200));  // Serve's threads are up
  const size_t baseline = Threads();

  const std::string address = served.listener->address();
  ASSERT_EQ(write(address_pipe[1], address.data(), address.size()),
            static_cast<ssize_t>(address.size()));
  close(address_pipe[1]);

  pollfd ready{.fd = ready_pipe[0], .events = POLLIN, .revents = 0};
  const bool child_ready = poll(&ready, 1, 60'000) == 1;
  size_t most_threads = Threads();
  uint64_t most_held = 0;
  const auto sample_until = std::chrono::steady_clock::now() + milliseconds(1500);
  while (child_ready && std::chrono::steady_clock::now() < sample_until) {
    most_threads = std::max(most_threads, Threads());
    most_held = std::max(most_held, coordinator->counters().heartbeats_held.load());
    std::this_thread::sleep_for(milliseconds(10));
  }
  const uint64_t registrations = coordinator->counters().registrations.load();

  int wstatus = 0;
  pid_t done = 0;
  for (int i = 0; i < 3000 && done == 0; ++i) {
    done = waitpid(child, &wstatus, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(milliseconds(10));
  }
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &wstatus, 0);
  }
  close(ready_pipe[0]);
  served.Stop();
  // Serve left no thread behind.
  EXPECT_LE(Threads(), baseline - 3);

  ASSERT_TRUE(child_ready) << "the clients did not get ready";
  ASSERT_NE(done, 0) << "the clients did not finish";
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "the clients' calls failed (see RunClients)";
  EXPECT_EQ(registrations, static_cast<uint64_t>(kClients));
  EXPECT_GE(most_held, static_cast<uint64_t>(kClients / 2)) << "long polls were not held";
  // One thread per connection would add kClients; the loop adds none.
  EXPECT_LE(most_threads, baseline + 4) << "baseline " << baseline;
}

// A connection that sends far ahead of the loop's answers (never reading them) is ended once it
// is loop_queue_frames ahead, and the coordinator goes on serving the others.
TEST(CoordinatorLoopTest, AConnectionFloodingTheLoopIsEnded) {
  ServedCoordinator served(/*loop_queue_frames=*/4);
  ASSERT_TRUE(served.ok());
  Coordinator* coordinator = served.coordinator.get();
  const std::string address = served.listener->address();

  auto flooder_transport = net::TcpTransport::Create(NodeOptions(200, net::Role::kAgent));
  ASSERT_TRUE(flooder_transport.ok());
  auto flooder = (*flooder_transport)->Connect(address, seconds(5));
  ASSERT_TRUE(flooder.ok()) << flooder.status().ToString();
  wire::Envelope request;
  request.mutable_get_status()->set_channel("policy");
  auto body = EncodeEnvelope(request);
  ASSERT_TRUE(body.ok());
  // Sent in bursts that the transport hands to the loop faster than it answers them; stops
  // once the coordinator has ended the connection (a send then fails).
  for (int i = 0; i < 20000 && coordinator->counters().connections_flooding.load() == 0; ++i) {
    if (!(*flooder)->SendControl(*body, seconds(1)).ok()) break;
  }
  bool ended = false;
  for (int i = 0; i < 2000 && !ended; ++i) {
    auto frame = (*flooder)->Receive();  // the replies sent before the end, then the end
    ended = !frame.ok();
  }
  EXPECT_TRUE(ended);
  EXPECT_EQ(coordinator->counters().connections_flooding.load(), 1u);

  // Another node is still served.
  auto client_transport = net::TcpTransport::Create(NodeOptions(300, net::Role::kAgent));
  ASSERT_TRUE(client_transport.ok());
  auto client = CoordinatorClient::Connect(**client_transport, address);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  (*client)->set_timeout(seconds(10));
  EXPECT_TRUE((*client)->GetStatus("policy").ok());
}

// A connection that cannot push its frames (as UCX's with a download limit): the rest delegated.
class NoPushConnection : public net::Connection {
 public:
  explicit NoPushConnection(std::unique_ptr<net::Connection> inner) : inner_(std::move(inner)) {}
  const net::PeerInfo& peer() const override { return inner_->peer(); }
  Status Send(net::OutFrame frame, net::Duration timeout) override {
    return inner_->Send(std::move(frame), timeout);
  }
  Result<net::Frame> Receive(net::Duration timeout) override { return inner_->Receive(timeout); }
  Status Flush(net::Duration timeout) override { return inner_->Flush(timeout); }
  void Close() override { inner_->Close(); }
  Status status() const override { return inner_->status(); }

 private:
  std::unique_ptr<net::Connection> inner_;
};

class NoPushListener : public net::Listener {
 public:
  explicit NoPushListener(std::unique_ptr<net::Listener> inner) : inner_(std::move(inner)) {}
  Result<std::unique_ptr<net::Connection>> Accept(net::Duration timeout) override {
    WC_ASSIGN_OR_RETURN(std::unique_ptr<net::Connection> c, inner_->Accept(timeout));
    return std::unique_ptr<net::Connection>(std::make_unique<NoPushConnection>(std::move(c)));
  }
  std::string address() const override { return inner_->address(); }
  void Close() override { inner_->Close(); }

 private:
  std::unique_ptr<net::Listener> inner_;
};

// The coordinator serves every connection on its event loop, with no thread of its own: one
// that cannot push is refused at once and named, and Serve still returns at Stop.
TEST(CoordinatorLoop, AConnectionThatCannotPushIsRefusedByName) {
  weightcast::testing::TempDir dir;
  net::FakeClock clock;
  net::MemoryNetwork network(clock);
  std::mutex mu;
  std::vector<std::string> lines;
  CoordinatorOptions o;
  o.state_dir = dir.path() / "state";
  o.secret = testing::kSecret;
  o.clock = &clock;
  o.log = [&](std::string_view line) {
    std::lock_guard lock(mu);
    lines.emplace_back(line);
  };
  auto coordinator = Coordinator::Open(o);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status().ToString();
  auto transport = network.CreateTransport("coord", NodeOptions(1, net::Role::kCoordinator));
  auto inner = transport->Listen("mem:coord");
  ASSERT_TRUE(inner.ok());
  NoPushListener listener(std::move(inner).value());
  std::thread serve([&] { (*coordinator)->Serve(listener); });
  auto node = network.CreateTransport("n7", NodeOptions(7, net::Role::kAgent));
  auto connection = node->Connect("mem:coord", seconds(5));
  ASSERT_TRUE(connection.ok()) << connection.status().ToString();
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while ((*connection)->status().ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_FALSE((*connection)->status().ok());
  {
    std::lock_guard lock(mu);
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
      return l.find("node 7: its connection cannot push frames") != std::string::npos;
    }));
  }
  (*coordinator)->Stop();
  serve.join();
}

}  // namespace
}  // namespace weightcast::coord
