// The publisher against a real coordinator, in process, over TCP on 127.0.0.1.
#include "publish/publisher.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <thread>
#include <vector>

#include "coord/coordinator.h"
#include "net/clock.h"
#include "net/tcp_transport.h"
#include "synth/model.h"
#include "testing/temp_dir.h"
#include "trust/signed_manifest.h"
#include "unit/synth/tiny_shape.h"

namespace weightcast::publish {
namespace {

namespace fs = std::filesystem;
namespace wire = coord::wire;
using ::weightcast::testing::TempDir;
using namespace std::chrono_literals;

constexpr std::string_view kSecret = "publisher-test-secret-0123456789";

void WriteTrainer(const fs::path& root, uint64_t steps) {
  synth::SynthModelOptions model;
  model.out_dir = root / "step-0000";
  model.shape = synth::testing::TinyShape();
  model.threads = 2;
  ASSERT_TRUE(synth::WriteSynthModel(model).ok());
  if (steps == 0) return;
  synth::SynthStepsOptions o;
  o.from = model.out_dir;
  o.out_dir = root;
  o.steps = steps;
  o.threads = 2;
  o.adam.lr = 1e-4;
  ASSERT_TRUE(synth::WriteSynthSteps(o).ok());
}

// A coordinator serving on 127.0.0.1 from its own thread.
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

  // What a tool sees: the channel's log.
  wire::ChannelLog Log() {
    net::Options net;
    net.self.cluster_id = "default";
    net.self.node_id = PeerId(99);
    net.self.role = net::Role::kTool;
    net.secret = std::string(kSecret);
    net.log = [](std::string_view) {};
    auto t = net::TcpTransport::Create(std::move(net), 1);
    EXPECT_TRUE(t.ok());
    auto client = coord::CoordinatorClient::Connect(**t, address());
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    if (!client.ok()) return {};
    auto status = (*client)->GetStatus("policy");
    EXPECT_TRUE(status.ok()) << status.status().ToString();
    for (const auto& log : status->channels()) {
      if (log.channel() == "policy") return log;
    }
    return {};
  }

 private:
  std::unique_ptr<coord::Coordinator> coordinator_;
  std::unique_ptr<net::Transport> transport_;
  std::unique_ptr<net::Listener> listener_;
  std::thread thread_;
};

struct Fixture {
  TempDir dir;
  fs::path trainer = dir.path() / "trainer";
  std::optional<TestCoordinator> coordinator;
  explicit Fixture(uint64_t steps) {
    WriteTrainer(trainer, steps);
    coordinator.emplace(dir.path() / "coord");
  }
  PublisherOptions Options() {
    PublisherOptions o;
    o.coordinator = coordinator->address();
    o.store = dir.path() / "store";
    o.channel = "policy";
    o.secret = std::string(kSecret);
    o.node_id = PeerId(500);
    o.build.chunk_size = kMinChunkSize;
    o.build.threads = 2;
    o.codec.threads = 2;
    o.connect_timeout = 5s;
    o.log = metrics::Logger("publish", metrics::LogFormat::kText, [](std::string_view) {});
    return o;
  }
};

TEST(Publisher, PublishesAFullVersionThenADeltaAndTheCoordinatorLogsBoth) {
  Fixture f(1);
  auto publisher = Publisher::Create(f.Options());
  ASSERT_TRUE(publisher.ok()) << publisher.status().ToString();
  EXPECT_FALSE((*publisher)->address().empty());
  EXPECT_EQ((*publisher)->seeding(), Version(0));

  auto v1 = (*publisher)->PublishDirectory(f.trainer / "step-0000");
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  EXPECT_EQ(v1->version, Version(1));
  EXPECT_FALSE(v1->delta);
  EXPECT_EQ((*publisher)->seeding(), Version(1));

  auto v2 = (*publisher)->PublishDirectory(f.trainer / "step-0001");
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_EQ(v2->version, Version(2));
  EXPECT_TRUE(v2->delta);
  EXPECT_GT(v2->payload_bytes, 0u);
  EXPECT_LT(v2->payload_bytes, v2->model_bytes);

  wire::ChannelLog log = f.coordinator->Log();
  ASSERT_EQ(log.versions_size(), 2);
  EXPECT_EQ(log.versions(0).base_version(), 0u);
  EXPECT_EQ(log.versions(1).base_version(), 1u);
  EXPECT_EQ(log.versions(1).payload_bytes(), v2->payload_bytes);
  EXPECT_EQ(log.versions(1).publisher_node(), 500u);
}

// The one safetensors file of a synth step, as a trainer's image of it.
std::vector<uint8_t> StepImage(const fs::path& step) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(step)) {
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  }
  EXPECT_EQ(files.size(), 1u) << step;
  std::ifstream in(files.at(0), std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(Publisher, AnImageIsCommittedBehindItsAnnounceAndTheNextPublishWaitsForIt) {
  Fixture f(1);
  auto publisher = Publisher::Create(f.Options());
  ASSERT_TRUE(publisher.ok()) << publisher.status().ToString();
  const std::vector<uint8_t> first = StepImage(f.trainer / "step-0000");
  auto v1 = (*publisher)->PublishImage({"model.safetensors", first}, nullptr);
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  EXPECT_EQ((*publisher)->seeding(), Version(1));
  const std::vector<uint8_t> second = StepImage(f.trainer / "step-0001");
  const HeldBase held{v1->version, v1->root, first};
  auto v2 = (*publisher)->PublishImage({"model.safetensors", second}, &held);
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_TRUE(v2->delta) << "v1 was in the store before v2 was laid out";
  EXPECT_EQ(f.coordinator->Log().versions_size(), 2);
  (*publisher)->Stop();  // waits for v2's commit
  StoreOptions read_only;
  read_only.read_only = true;
  auto store = Store::Open(f.dir.path() / "store", read_only);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(*store->Current("policy"), Version(2));
  EXPECT_TRUE(store->Verify("policy", Version(2)).ok());
  auto bytes = store->ReadChunk("policy", Version(2), ChunkIndex(0));
  ASSERT_TRUE(bytes.ok());
  EXPECT_TRUE(std::equal(bytes->begin(), bytes->end(), second.begin()));
}

// Runs `wait` on its own thread while the fake clock moves, until it returns.
Status WhileTimeMoves(net::FakeClock& clock, const std::function<Status()>& wait) {
  std::future<Status> waited = std::async(std::launch::async, wait);
  while (waited.wait_for(5ms) != std::future_status::ready) clock.Advance(100ms);
  return waited.get();
}

TEST(Publisher, CompleteWaitsForAgents) {
  Fixture f(0);
  // The waits' timeouts and polls run on a fake clock: the test moves it past them.
  net::FakeClock clock;
  PublisherOptions options = f.Options();
  options.clock = &clock;
  auto publisher = Publisher::Create(options);
  ASSERT_TRUE(publisher.ok()) << publisher.status().ToString();
  EXPECT_EQ((*publisher)->WaitUntil(SeedUntil::kComplete, 10ms).code(),
            Code::kFailedPrecondition);  // nothing seeded yet
  ASSERT_TRUE((*publisher)->PublishDirectory(f.trainer / "step-0000").ok());
  // No agent follows the channel: complete never holds, replicated neither (no peer holds it).
  EXPECT_EQ(
      WhileTimeMoves(clock, [&] { return (*publisher)->WaitUntil(SeedUntil::kComplete, 300ms); })
          .code(),
      Code::kDeadlineExceeded);
  EXPECT_EQ(
      WhileTimeMoves(clock, [&] { return (*publisher)->WaitUntil(SeedUntil::kReplicated, 300ms); })
          .code(),
      Code::kDeadlineExceeded);
  // Stop from another thread ends a wait at once.
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    (*publisher)->Stop();
  });
  EXPECT_EQ((*publisher)->WaitUntil(SeedUntil::kNever).code(), Code::kAborted);
  stopper.join();
}

TEST(Publisher, ARestartedPublisherContinuesTheNumberingAndTheDeltas) {
  Fixture f(2);
  {
    auto publisher = Publisher::Create(f.Options());
    ASSERT_TRUE(publisher.ok()) << publisher.status().ToString();
    ASSERT_TRUE((*publisher)->PublishDirectory(f.trainer / "step-0000").ok());
    ASSERT_TRUE((*publisher)->PublishDirectory(f.trainer / "step-0001").ok());
  }
  auto again = Publisher::Create(f.Options());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->seeding(), Version(2)) << "the logged version is seeded again";
  auto v3 = (*again)->PublishDirectory(f.trainer / "step-0002");
  ASSERT_TRUE(v3.ok()) << v3.status().ToString();
  EXPECT_EQ(v3->version, Version(3));
  EXPECT_TRUE(v3->delta);
}

TEST(Publisher, PublishesAVersionItImportedButNeverLogged) {
  Fixture f(1);
  {
    auto publisher = Publisher::Create(f.Options());
    ASSERT_TRUE(publisher.ok()) << publisher.status().ToString();
    ASSERT_TRUE((*publisher)->PublishDirectory(f.trainer / "step-0000").ok());
  }
  {
    // A run that died after its import: the store has v2, the coordinator does not.
    auto store = Store::Open(f.dir.path() / "store");
    ASSERT_TRUE(store.ok());
    PrepareOptions o;
    o.channel = "policy";
    o.secret = std::string(kSecret);
    o.build.chunk_size = kMinChunkSize;
    ASSERT_TRUE(PrepareVersion(*store, f.trainer / "step-0001", o).ok());
  }
  auto again = Publisher::Create(f.Options());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->seeding(), Version(2));
  wire::ChannelLog log = f.coordinator->Log();
  ASSERT_EQ(log.versions_size(), 2);
  EXPECT_EQ(log.versions(1).version(), 2u);
  EXPECT_EQ(log.versions(1).base_version(), 1u) << "its base is logged: it stays a delta";
}

TEST(Publisher, RefusesBadOptionsAndAMissingCoordinator) {
  Fixture f(0);
  PublisherOptions o = f.Options();
  o.channel = "no/slash";
  EXPECT_EQ(Publisher::Create(o).status().code(), Code::kInvalidArgument);
  o = f.Options();
  o.secret.clear();
  EXPECT_EQ(Publisher::Create(o).status().code(), Code::kInvalidArgument);
  o = f.Options();
  o.coordinator = "127.0.0.1:1";  // nothing listens there
  o.connect_timeout = 300ms;
  EXPECT_FALSE(Publisher::Create(o).ok());
  // The store was released: a correct publisher can take it.
  EXPECT_TRUE(Publisher::Create(f.Options()).ok());
}

TEST(Publisher, AWrongSecretIsRefusedByTheCoordinator) {
  Fixture f(0);
  PublisherOptions o = f.Options();
  o.secret = "another-cluster-secret-0123456789";
  EXPECT_FALSE(Publisher::Create(o).ok());
}

TEST(Publisher, AWrongSecretFailsAtOnceNotAfterTheConnectTimeout) {
  Fixture f(0);
  PublisherOptions o = f.Options();
  o.secret = "another-cluster-secret-0123456789";
  o.connect_timeout = 60s;
  const auto start = std::chrono::steady_clock::now();
  auto created = Publisher::Create(o);
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), Code::kUnauthenticated) << created.status().ToString();
  EXPECT_NE(created.status().message().find("wrong cluster secret?"), std::string::npos)
      << created.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "a refused handshake is not retried";
}

TEST(Publisher, WaitUntilEndsWhenTheCoordinatorStaysAway) {
  Fixture f(0);
  PublisherOptions o = f.Options();
  o.unreachable_timeout = 500ms;
  auto publisher = Publisher::Create(o);
  ASSERT_TRUE(publisher.ok()) << publisher.status().ToString();
  ASSERT_TRUE((*publisher)->PublishDirectory(f.trainer / "step-0000").ok());
  f.coordinator.reset();  // gone for good
  const auto start = std::chrono::steady_clock::now();
  for (SeedUntil until : {SeedUntil::kComplete, SeedUntil::kReplicated}) {
    Status waited = (*publisher)->WaitUntil(until, 60s);
    EXPECT_EQ(waited.code(), Code::kUnavailable) << waited.ToString();
    EXPECT_NE(waited.message().find("unreachable for"), std::string::npos) << waited.ToString();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
}

TEST(ParseSeedUntil, KnowsTheThreeModes) {
  EXPECT_EQ(*ParseSeedUntil("replicated"), SeedUntil::kReplicated);
  EXPECT_EQ(*ParseSeedUntil("complete"), SeedUntil::kComplete);
  EXPECT_EQ(*ParseSeedUntil("never"), SeedUntil::kNever);
  EXPECT_EQ(ParseSeedUntil("sometimes").status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace weightcast::publish
