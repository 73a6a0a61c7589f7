// VersionServer and FetchVersion over the in-memory transport: full and delta fetches, refused
// secrets and manifests, corrupt chunks that must not be committed, and resume after a partial
// staging.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "agent/version_fetcher.h"
#include "agent/version_server.h"
#include "net/memory_transport.h"
#include "swarm/messages.h"
#include "trust/signed_manifest.h"
#include "unit/store/store_test_util.h"

using weightcast::swarm::EncodeMessage;
using weightcast::swarm::Message;
using weightcast::swarm::MessageType;
using weightcast::swarm::ParseMessage;

namespace weightcast::agent {
namespace {

using store_test::Flat;
using store_test::MakeManifest;
using store_test::SampleFiles;
using store_test::TempDir;
using store_test::TestFile;

constexpr char kSecret[] = "p2p test cluster secret";
constexpr char kChannel[] = "policy";

net::Options NodeOptions(uint64_t id, std::string secret = kSecret) {
  net::Options o;
  o.self.cluster_id = "test";
  o.self.node_id = PeerId(id);
  o.secret = std::move(secret);
  o.log = [](std::string_view) {};
  return o;
}

// Version 2: version 1 with a few bytes changed in some chunks, the rest untouched.
std::vector<TestFile> NextStep(std::vector<TestFile> files) {
  for (size_t at = 10; at < files[0].bytes.size(); at += 40'000) files[0].bytes[at] ^= 0x5a;
  files[3].bytes[5] ^= 1;
  return files;
}

class P2p : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server_store = Store::Open(dir_.path() / "trainer");
    ASSERT_TRUE(server_store.ok()) << server_store.status().ToString();
    server_store_.emplace(std::move(server_store).value());
    client_root_ = dir_.path() / "sampler";
  }
  void TearDown() override { StopServer(); }

  void Publish(Version version, const std::vector<TestFile>& files) {
    ASSERT_TRUE(StageAndCommit(*server_store_, kChannel, version, files).ok());
  }

  void StartServer(std::string secret = kSecret) {
    server_transport_ = network_.CreateTransport("trainer", NodeOptions(1, secret));
    auto listener = server_transport_->Listen("mem:trainer");
    ASSERT_TRUE(listener.ok());
    listener_ = std::move(listener).value();
    server_.emplace(*server_store_, VersionServerOptions{.channel = kChannel,
                                                         .manifest_secret = secret,
                                                         .log = [](std::string_view) {}});
    serve_thread_ = std::thread([this] { server_->Serve(*listener_); });
  }
  void StopServer() {
    if (listener_) listener_->Close();
    if (serve_thread_.joinable()) serve_thread_.join();
  }

  Result<FetchStats> Fetch(std::optional<Version> version, std::string secret = kSecret) {
    auto transport = network_.CreateTransport("sampler", NodeOptions(2, secret));
    WC_ASSIGN_OR_RETURN(auto connection, transport->Connect("mem:trainer"));
    WC_ASSIGN_OR_RETURN(Store store, Store::Open(client_root_));
    FetchOptions options{.channel = kChannel, .version = version, .manifest_secret = secret};
    options.log = [](std::string_view) {};
    return FetchVersion(*connection, store, options);
  }

  std::string ClientFile(Version v, const std::string& path) {
    return store_test::ReadAll(client_root_ / kChannel / "versions" / std::to_string(v.value()) /
                               path);
  }
  void ExpectHolds(Version v, const std::vector<TestFile>& files) {
    for (const TestFile& f : files) EXPECT_EQ(ClientFile(v, f.path), f.bytes) << f.path;
  }

  TempDir dir_;
  std::optional<Store> server_store_;
  std::filesystem::path client_root_;
  net::FakeClock clock_;
  net::MemoryNetwork network_{clock_};
  std::unique_ptr<net::Transport> server_transport_;
  std::unique_ptr<net::Listener> listener_;
  std::optional<VersionServer> server_;
  std::thread serve_thread_;
};

TEST_F(P2p, FetchesCurrentVersionWholeIntoEmptyStore) {
  auto files = SampleFiles(1, 3);
  Publish(Version(1), files);
  StartServer();
  auto stats = Fetch(std::nullopt);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->version, Version(1));
  EXPECT_FALSE(stats->base.has_value());
  EXPECT_EQ(stats->chunks_raw, stats->chunks);
  EXPECT_GT(stats->wire_bytes, stats->model_bytes);
  ExpectHolds(Version(1), files);
  {
    auto store = Store::Open(client_root_);
    ASSERT_TRUE(store.ok());
    EXPECT_EQ(*store->Current(kChannel), Version(1));
    EXPECT_TRUE(store->Verify(kChannel, Version(1)).ok());
  }

  auto again = Fetch(Version(1));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->already_held);
}

TEST_F(P2p, FetchesNextVersionAsDeltaOntoCommittedBase) {
  auto v1 = SampleFiles(2, 3);
  auto v2 = NextStep(v1);
  Publish(Version(1), v1);
  Publish(Version(2), v2);
  StartServer();
  ASSERT_TRUE(Fetch(Version(1)).ok());
  auto stats = Fetch(std::nullopt);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->version, Version(2));
  ASSERT_TRUE(stats->base.has_value());
  EXPECT_EQ(*stats->base, Version(1));
  EXPECT_GT(stats->chunks_delta, 0u);
  EXPECT_GT(stats->chunks_same, 0u);
  EXPECT_EQ(stats->chunks_raw, 0u);
  EXPECT_LT(stats->wire_bytes * 10, stats->model_bytes);
  ExpectHolds(Version(2), v2);
  EXPECT_GT(server_->stats().delta_chunks, 0u);
}

TEST_F(P2p, LocalVersionWithAnotherRootIsNotUsedAsBase) {
  auto v1 = SampleFiles(9, 3);
  auto v2 = NextStep(v1);
  Publish(Version(1), v1);
  Publish(Version(2), v2);
  {
    // The sampler's v1 holds other bytes than the trainer's v1: deltas against it would be wrong.
    auto store = Store::Open(client_root_);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(StageAndCommit(*store, kChannel, Version(1), SampleFiles(10, 3)).ok());
  }
  StartServer();
  auto stats = Fetch(Version(2));
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_FALSE(stats->base.has_value());
  EXPECT_EQ(stats->chunks_raw, stats->chunks);
  ExpectHolds(Version(2), v2);
  EXPECT_EQ(Fetch(Version(1)).status().code(), Code::kFailedPrecondition);
}

TEST_F(P2p, WrongSecretIsRefusedAtTheHandshake) {
  Publish(Version(1), SampleFiles(3));
  StartServer();
  auto stats = Fetch(std::nullopt, "a different secret, long enough");
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), Code::kUnauthenticated) << stats.status().ToString();
}

TEST_F(P2p, ManifestSignedWithAnotherKeyIsRefusedAndNothingIsStaged) {
  Publish(Version(1), SampleFiles(4));
  // The connection authenticates, but the server signs manifests with another key (a relay that
  // altered them would look the same).
  server_transport_ = network_.CreateTransport("trainer", NodeOptions(1));
  listener_ = std::move(server_transport_->Listen("mem:trainer")).value();
  server_.emplace(*server_store_, VersionServerOptions{.channel = kChannel,
                                                       .manifest_secret = "not the cluster key!",
                                                       .log = [](std::string_view) {}});
  serve_thread_ = std::thread([this] { server_->Serve(*listener_); });
  auto stats = Fetch(std::nullopt);
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), Code::kUnauthenticated) << stats.status().ToString();
  auto store = Store::Open(client_root_);
  ASSERT_TRUE(store.ok());
  auto staging = store->ListStaging(kChannel);
  EXPECT_TRUE(!staging.ok() || staging->empty());
}

TEST_F(P2p, CorruptChunkFromServerIsRefetchedOnceThenFailsWithoutCommit) {
  auto files = SampleFiles(5, 3);
  Publish(Version(1), files);
  // Damage the trainer's committed copy: the server sends bytes that miss the manifest hash.
  {
    std::fstream f(dir_.path() / "trainer" / kChannel / "versions" / "1" / files[0].path,
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(70'000);
    f.put('\x7f');
  }
  StartServer();
  auto stats = Fetch(std::nullopt);
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), Code::kCorrupt) << stats.status().ToString();
  EXPECT_NE(stats.status().message().find("again"), std::string::npos);
  auto store = Store::Open(client_root_);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(store->Current(kChannel).status().code(), Code::kNotFound);
}

// A server that flips a byte in the first reply for chunk 1 and answers correctly afterwards: the
// fetcher must ask for the chunk whole once more and commit the right bytes.
TEST_F(P2p, ChunkCorruptedOnceInTransitIsRefetchedWholeAndCommitted) {
  auto files = SampleFiles(8, 3);
  Publish(Version(1), files);
  server_transport_ = network_.CreateTransport("trainer", NodeOptions(1));
  listener_ = std::move(server_transport_->Listen("mem:trainer")).value();
  std::atomic<int> chunk1_requests{0};
  serve_thread_ = std::thread([&] {
    auto connection = listener_->Accept(net::kForever);
    if (!connection.ok()) return;
    auto manifest = server_store_->GetManifest(kChannel, Version(1));
    ASSERT_TRUE(manifest.ok());
    while (true) {
      auto frame = (*connection)->Receive(net::kForever);
      if (!frame.ok()) return;
      auto request = ParseMessage(frame->body);
      ASSERT_TRUE(request.ok());
      if (request->type == MessageType::kGetManifest) {
        Message reply{.type = MessageType::kManifest, .version = 1};
        reply.blob = SignManifestWithSecret(*manifest, kSecret);
        ASSERT_TRUE((*connection)->SendControl(EncodeMessage(reply)).ok());
      } else if (request->type == MessageType::kEcho) {
        ASSERT_TRUE((*connection)->SendControl(EncodeMessage(Message{})).ok());
      } else {
        auto bytes = std::make_shared<std::vector<uint8_t>>(
            server_store_->ReadChunk(kChannel, Version(1), ChunkIndex(request->chunk)).value());
        if (request->chunk == 1 && chunk1_requests++ == 0) (*bytes)[17] ^= 0x20;
        ASSERT_TRUE((*connection)
                        ->SendChunk({.version = 1, .chunk_index = request->chunk}, *bytes, bytes)
                        .ok());
      }
    }
  });
  auto stats = Fetch(std::nullopt);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->chunks_refetched, 1u);
  EXPECT_EQ(chunk1_requests.load(), 2);
  ExpectHolds(Version(1), files);
}

TEST_F(P2p, ResumesFromThePersistedChunkRecord) {
  auto files = SampleFiles(6, 3);
  Publish(Version(1), files);
  Manifest m = MakeManifest(kChannel, Version(1), files);
  ASSERT_GE(m.chunk_count(), 4u);
  {
    auto store = Store::Open(client_root_);
    ASSERT_TRUE(store.ok());
    auto staged = store->BeginStaging(kChannel, m);
    ASSERT_TRUE(staged.ok());
    std::string flat = Flat(files);
    for (uint32_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(
          staged->PutChunk(ChunkIndex(i), store_test::ChunkOf(flat, m, ChunkIndex(i))).ok());
    }
    ASSERT_TRUE(staged->Flush().ok());
  }  // the "killed" fetch: store closed with three chunks recorded
  StartServer();
  auto stats = Fetch(std::nullopt);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->chunks_resumed, 3u);
  EXPECT_EQ(stats->chunks_raw, m.chunk_count() - 3);
  EXPECT_EQ(server_->stats().raw_chunks, m.chunk_count() - 3);
  ExpectHolds(Version(1), files);
}

TEST(SignedManifest, RoundTripsAndRefusesAnyFlippedByte) {
  Manifest m = MakeManifest(kChannel, Version(3), SampleFiles(7));
  std::vector<uint8_t> signed_bytes = SignManifestWithSecret(m, kSecret);
  auto back = VerifySignedManifestWithSecret(signed_bytes, kSecret);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->root, m.root);
  EXPECT_EQ(VerifySignedManifestWithSecret(signed_bytes, "another secret").status().code(),
            Code::kUnauthenticated);
  for (size_t at : {size_t{5}, size_t{20}, kSignedManifestHeaderSize, signed_bytes.size() / 2,
                    signed_bytes.size() - 1}) {
    auto tampered = signed_bytes;
    tampered[at] ^= 0x01;
    EXPECT_EQ(VerifySignedManifestWithSecret(tampered, kSecret).status().code(),
              Code::kUnauthenticated)
        << "byte " << at;
  }
  EXPECT_EQ(
      VerifySignedManifestWithSecret(std::span(signed_bytes).first(10), kSecret).status().code(),
      Code::kCorrupt);
}

TEST(P2pProtocol, MessagesRoundTripAndTruncationIsRefused) {
  Message m{.type = MessageType::kError,
            .version = 7,
            .chunk = 3,
            .base_version = 6,
            .code = 4,
            .text = "why",
            .blob = {1, 2, 3}};
  auto bytes = EncodeMessage(m);
  auto back = ParseMessage(bytes);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->version, 7u);
  EXPECT_EQ(back->chunk, 3u);
  EXPECT_EQ(back->text, "why");
  EXPECT_EQ(back->blob, m.blob);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(ParseMessage(std::span(bytes).first(n)).ok()) << n;
  }
}

}  // namespace
}  // namespace weightcast::agent
