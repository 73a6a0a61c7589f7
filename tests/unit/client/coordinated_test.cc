// The public Publisher and Subscriber with a coordinator (in process, TCP on 127.0.0.1): the
// round trip, and the errors that must come within seconds instead of a timeout: a
// wrong secret, an unreachable coordinator, a store path that is not a store.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>
#include <vector>

#include <weightcast/publisher.h>
#include <weightcast/subscriber.h>

#include "coord/coordinator.h"
#include "net/tcp_transport.h"
#include "testing/temp_dir.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;
using ::weightcast::testing::TempDir;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kSecret = "client-test-secret-0123456789abcdef";
constexpr std::string_view kWrongSecret = "client-test-secret-that-is-not-it!";
// Nothing listens on port 1 of the loopback: a connect is refused at once.
constexpr std::string_view kNobody = "127.0.0.1:1";

class TestCoordinator {
 public:
  explicit TestCoordinator(const fs::path& state_dir) {
    coord::CoordinatorOptions o;
    o.state_dir = state_dir;
    o.secret = std::string(kSecret);
    o.heartbeat_timeout = 3s;
    o.log = [](std::string_view) {};
    auto c = coord::Coordinator::Open(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    coordinator_ = std::move(c).value();
    net::Options net;
    net.self.cluster_id = "default";
    net.self.node_id = PeerId(1);
    net.self.role = net::Role::kCoordinator;
    net.secret = std::string(kSecret);
    net.log = [](std::string_view) {};
    auto t = net::TcpTransport::Create(std::move(net), 1);
    EXPECT_TRUE(t.ok());
    transport_ = std::move(t).value();
    auto l = transport_->Listen("127.0.0.1:0");
    EXPECT_TRUE(l.ok());
    listener_ = std::move(l).value();
    thread_ = std::thread([this] { coordinator_->Serve(*listener_); });
  }
  ~TestCoordinator() {
    coordinator_->Stop();
    thread_.join();
  }
  std::string address() const { return listener_->address(); }

 private:
  std::unique_ptr<coord::Coordinator> coordinator_;
  std::unique_ptr<net::Transport> transport_;
  std::unique_ptr<net::Listener> listener_;
  std::thread thread_;
};

PublisherOptions PublisherAt(const fs::path& store, std::string coordinator,
                             std::string_view secret = kSecret) {
  PublisherOptions o;
  o.store = store;
  o.channel = "policy";
  o.coordinator = std::move(coordinator);
  o.secret.secret = std::string(secret);
  o.chunk_size = ChunkSizeLimits::kMin;
  o.log_level = LogLevel::kError;
  o.log_file = store.parent_path() / "publisher.log";
  return o;
}

SubscriberOptions SubscriberAt(const fs::path& store, std::string coordinator,
                               std::string_view secret = kSecret) {
  SubscriberOptions o;
  o.store = store;
  o.channel = "policy";
  o.coordinator = std::move(coordinator);
  o.secret.secret = std::string(secret);
  o.log_level = LogLevel::kError;
  o.log_file = store.parent_path() / "agent.log";
  return o;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(CoordinatedApi, PublishAsyncReachesAnAgentInProcess) {
  TempDir dir;
  TestCoordinator coordinator(dir.path() / "coord");
  auto publisher = Publisher::Open(PublisherAt(dir.path() / "pub", coordinator.address()));
  ASSERT_TRUE(publisher.ok()) << publisher.status().ToString();
  auto subscriber = Subscriber::Open(SubscriberAt(dir.path() / "agent", coordinator.address()));
  ASSERT_TRUE(subscriber.ok()) << subscriber.status().ToString();

  std::vector<float> w(100000, 0.25f);
  auto handle = (*publisher)
                    ->PublishAsync({{{"w",
                                      "F32",
                                      {w.size()},
                                      {reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4}}}},
                                   1);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  auto published = handle->Wait(30s);
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  EXPECT_EQ(published->version, Version(1));
  EXPECT_EQ(published->wire_bytes, published->total_bytes);  // a full version
  auto v = (*subscriber)->Wait(Version(1), 30s);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->root(), published->root);
  EXPECT_EQ(v->step(), 1);
  EXPECT_TRUE(handle->WaitUntil(SeedUntil::kReplicated, 30s).ok());
  auto seeding = (*publisher)->status();
  ASSERT_TRUE(seeding.ok());
  EXPECT_EQ(seeding->version, Version(1));
  auto status = (*subscriber)->status();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->current_version, Version(1));
  EXPECT_TRUE(status->running);
  EXPECT_EQ(status->error, "");
}

TEST(CoordinatedApi, AWrongSecretIsUnauthenticatedWithinSeconds) {
  TempDir dir;
  TestCoordinator coordinator(dir.path() / "coord");
  auto start = Clock::now();
  auto publisher =
      Publisher::Open(PublisherAt(dir.path() / "pub", coordinator.address(), kWrongSecret));
  EXPECT_EQ(publisher.status().code(), Code::kUnauthenticated) << publisher.status().ToString();
  EXPECT_LT(SecondsSince(start), 5);

  auto subscriber =
      Subscriber::Open(SubscriberAt(dir.path() / "agent", coordinator.address(), kWrongSecret));
  ASSERT_TRUE(subscriber.ok()) << subscriber.status().ToString();
  start = Clock::now();
  auto v = (*subscriber)->Wait(Version(1), 30s);
  EXPECT_EQ(v.status().code(), Code::kUnauthenticated) << v.status().ToString();
  EXPECT_LT(SecondsSince(start), 5);
  auto status = (*subscriber)->status();
  ASSERT_TRUE(status.ok());
  EXPECT_NE(status->error.find("UNAUTHENTICATED"), std::string::npos) << status->error;
}

TEST(CoordinatedApi, AnUnreachableCoordinatorIsUnavailableWithinSeconds) {
  TempDir dir;
  PublisherOptions p = PublisherAt(dir.path() / "pub", std::string(kNobody));
  p.connect_timeout = 1s;
  auto start = Clock::now();
  auto publisher = Publisher::Open(p);
  EXPECT_EQ(publisher.status().code(), Code::kUnavailable) << publisher.status().ToString();
  EXPECT_LT(SecondsSince(start), 5);

  SubscriberOptions s = SubscriberAt(dir.path() / "agent", std::string(kNobody));
  s.connect_timeout = 1s;
  auto subscriber = Subscriber::Open(s);
  ASSERT_TRUE(subscriber.ok()) << subscriber.status().ToString();
  start = Clock::now();
  auto v = (*subscriber)->Wait(Version(1), 30s);
  EXPECT_EQ(v.status().code(), Code::kUnavailable) << v.status().ToString();
  EXPECT_LT(SecondsSince(start), 5);
  auto status = (*subscriber)->status();
  ASSERT_TRUE(status.ok());
  EXPECT_NE(status->error.find("UNAVAILABLE"), std::string::npos) << status->error;
}

TEST(CoordinatedApi, AStorePathThatIsNotAStoreFailsOpen) {
  TempDir dir;
  const fs::path home = dir.path() / "home";
  fs::create_directories(home);
  std::ofstream(home / "notes.txt") << "mine";
  EXPECT_EQ(Subscriber::Open(SubscriberAt(home, std::string(kNobody))).status().code(),
            Code::kFailedPrecondition);
  EXPECT_EQ(Publisher::Open(PublisherAt(home, std::string(kNobody))).status().code(),
            Code::kFailedPrecondition);
}

}  // namespace
}  // namespace weightcast
