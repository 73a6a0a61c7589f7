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
#include "node/certificate_mode.h"
#include "testing/temp_dir.h"
#include "trust/authority.h"
#include "util/file.h"

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
  // `certified`: certificate mode (the coordinator's own certificate, the CA).
  explicit TestCoordinator(const fs::path& state_dir,
                           const std::optional<node::CertificateMode>& certified = {}) {
    coord::CoordinatorOptions o;
    if (certified) {
      o.trust_anchor = certified->anchor;
      o.identity = certified->identity;
    }
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
    if (certified) net.tls = certified->tls;
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

// Certificate mode through the public API (docs/security.md): a certified publisher's version
// reaches a certified subscriber over mutual TLS; a publisher whose certificate lacks the
// publisher role, and a subscriber without certificates, fail Open within seconds with the reason.
TEST(CoordinatedApi, CertificateModeWithTheNodesOwnCertificates) {
  TempDir dir;
  auto ca = trust::Authority::Create("client test CA");
  ASSERT_TRUE(ca.ok());
  ASSERT_TRUE(ca->WriteNew(dir.path() / "ca").ok());
  auto issue = [&](const std::string& name, const std::string& roles) {
    auto issued = ca->Issue({.name = name, .roles = *trust::ParseRolesFlag(roles)});
    EXPECT_TRUE(issued.ok());
    EXPECT_TRUE(WriteFileAtomic(dir.path() / (name + ".pem"), issued->certificate_pem).ok());
    EXPECT_TRUE(WritePrivateFile(dir.path() / (name + ".key"), issued->key_pem, false).ok());
    return CertificateFiles{dir.path() / "ca" / "ca.pem", dir.path() / (name + ".pem"),
                            dir.path() / (name + ".key")};
  };
  const CertificateFiles coordinator_files = issue("coordinator", "coordinator");
  const CertificateFiles trainer = issue("trainer", "publisher:policy");
  const CertificateFiles sampler = issue("sampler", "agent");
  auto certified = node::LoadCertificateMode(coordinator_files.ca, {},
                                             coordinator_files.certificate, coordinator_files.key);
  ASSERT_TRUE(certified.ok()) << certified.status().ToString();
  TestCoordinator coordinator(dir.path() / "coord", *certified);

  PublisherOptions po = PublisherAt(dir.path() / "pub", coordinator.address());
  po.certificates = trainer;
  auto publisher = Publisher::Open(po);
  ASSERT_TRUE(publisher.ok()) << publisher.status().ToString();
  SubscriberOptions so = SubscriberAt(dir.path() / "agent", coordinator.address());
  so.certificates = sampler;
  auto subscriber = Subscriber::Open(so);
  ASSERT_TRUE(subscriber.ok()) << subscriber.status().ToString();
  std::vector<float> w(50000, 0.5f);
  auto published = (*publisher)
                       ->Publish({{{"w",
                                    "F32",
                                    {w.size()},
                                    {reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4}}}},
                                 1);
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  auto v = (*subscriber)->Wait(published->version, 30s);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->root(), published->root);

  PublisherOptions as_agent = PublisherAt(dir.path() / "pub2", coordinator.address());
  as_agent.certificates = sampler;
  as_agent.writer_id = "another";
  const auto start = Clock::now();
  auto refused = Publisher::Open(as_agent);
  EXPECT_EQ(refused.status().code(), Code::kUnauthenticated) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("does not hold the publisher role"), std::string::npos)
      << refused.status().message();
  EXPECT_LT(SecondsSince(start), 5.0);

  PublisherOptions partial = PublisherAt(dir.path() / "pub3", coordinator.address());
  partial.certificates.certificate = trainer.certificate;
  EXPECT_EQ(Publisher::Open(partial).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace weightcast
