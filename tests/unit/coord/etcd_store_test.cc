// EtcdLogStore and Election against a real etcd (one member, started here on a loopback port,
// data in a temp dir). Skipped, with a message, where no etcd binary is installed
// (deps/debian-packages.txt lists etcd-server).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "coord/etcd_client.h"
#include "coord/etcd_election.h"
#include "coord/etcd_log_store.h"
#include "coord/version_log.h"
#include "coord_test_util.h"
#include "testing/temp_dir.h"

extern char** environ;

namespace weightcast::coord {
namespace {

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

etcd::ClientOptions Timeout(int ms) {
  etcd::ClientOptions options;
  options.timeout = std::chrono::milliseconds(ms);
  return options;
}

std::string EtcdBinary() {
  for (const char* path : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return {};
}

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string binary = EtcdBinary();
    if (binary.empty()) GTEST_SKIP() << "etcd is not installed (apt-get install etcd-server)";
    const int client_port = FreePort();
    const int peer_port = FreePort();
    endpoint_ = "http://127.0.0.1:" + std::to_string(client_port);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    std::vector<std::string> args = {binary,
                                     "--name=t",
                                     "--data-dir=" + (dir_.path() / "etcd").string(),
                                     "--listen-client-urls=" + endpoint_,
                                     "--advertise-client-urls=" + endpoint_,
                                     "--listen-peer-urls=" + peer,
                                     "--initial-advertise-peer-urls=" + peer,
                                     "--initial-cluster=t=" + peer};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // Its chatter goes to a file in the temp dir, not into the test's output.
    const std::string log = (dir_.path() / "etcd.log").string();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int spawned = posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ASSERT_EQ(spawned, 0);
    auto client = etcd::Client::Create(endpoint_, Timeout(500));
    ASSERT_TRUE(client.ok());
    client_ = std::move(*client);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!client_->Range("x").ok()) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "etcd did not start (" << log << ")";
      ASSERT_EQ(::waitpid(pid_, nullptr, WNOHANG), 0) << "etcd exited (" << log << ")";
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  std::shared_ptr<LeaderTerm> Lead(Election& election) {
    auto outcome = election.Campaign();
    EXPECT_TRUE(outcome.ok()) << outcome.status().ToString();
    return outcome.ok() ? outcome->term : nullptr;
  }

  weightcast::testing::TempDir dir_;
  pid_t pid_ = -1;
  std::string endpoint_;
  std::unique_ptr<etcd::Client> client_;
  const EtcdKeys keys_{"/wc-test/"};
};

TEST_F(EtcdStoreTest, AppendsRecordsInOrderAndLoadsThem) {
  Election election(*client_, keys_, "a:1", std::chrono::seconds(5));
  auto term = Lead(election);
  ASSERT_NE(term, nullptr);
  EtcdLogStore store(*client_, keys_, term);
  ASSERT_TRUE(store.Load().ok());
  for (uint64_t i = 1; i <= 700; ++i) {  // more than one load batch
    ASSERT_TRUE(store.Append(i, "record " + std::to_string(i)).ok());
  }
  EtcdLogStore again(*client_, keys_, term);
  auto loaded = again.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->records.size(), 700u);
  EXPECT_EQ(loaded->records[699], "record 700");
  // The same record at the same sequence is accepted (a retry whose first answer was lost); a
  // different one is not: that sequence is decided.
  EXPECT_TRUE(store.Append(700, "record 700").ok());
  EXPECT_EQ(store.Append(700, "another").code(), Code::kUnavailable);
}

TEST_F(EtcdStoreTest, OnlyOneCandidateLeadsAndAStaleLeaderIsFenced) {
  Election a(*client_, keys_, "a:1", std::chrono::seconds(5));
  Election b(*client_, keys_, "b:2", std::chrono::seconds(5));
  auto term_a = Lead(a);
  ASSERT_NE(term_a, nullptr);
  auto lost = b.Campaign();
  ASSERT_TRUE(lost.ok());
  EXPECT_EQ(lost->term, nullptr);
  EXPECT_EQ(lost->leader, "a:1");

  EtcdLogStore store_a(*client_, keys_, term_a);
  ASSERT_TRUE(store_a.Load().ok());
  ASSERT_TRUE(store_a.Append(1, "decided by a").ok());
  // a's lease goes (as when it is paused past its TTL); b takes over and decides record 2.
  ASSERT_TRUE(client_->LeaseRevoke(term_a->lease()).ok());
  auto term_b = Lead(b);
  ASSERT_NE(term_b, nullptr);
  EtcdLogStore store_b(*client_, keys_, term_b);
  ASSERT_EQ(store_b.Load()->records.size(), 1u);
  ASSERT_TRUE(store_b.Append(2, "decided by b").ok());
  // a comes back with its stale view: it may not write record 2, nor record 3, nor a manifest.
  Status stale = store_a.Append(2, "decided by a, late");
  EXPECT_EQ(stale.code(), Code::kUnavailable) << stale.ToString();
  EXPECT_TRUE(term_a->lost());
  EXPECT_NE(store_a.Health().find("no longer leads"), std::string::npos) << store_a.Health();
  EXPECT_EQ(store_a.Append(3, "x").code(), Code::kUnavailable);
  const std::vector<uint8_t> bytes = {1, 2, 3};
  EXPECT_EQ(store_a.PutManifest("c", 1, bytes).code(), Code::kUnavailable);
  auto loaded = store_b.Load();
  ASSERT_EQ(loaded->records.size(), 2u);
  EXPECT_EQ(loaded->records[1], "decided by b");
  // b's lease is alive; renewing keeps it.
  EXPECT_TRUE(b.Renew(*term_b).ok());
  EXPECT_FALSE(term_b->lost());
  // a renewing its revoked lease learns it lost.
  auto term_a2 = std::make_shared<LeaderTerm>(term_a->lease(), term_a->revision());
  EXPECT_TRUE(a.Renew(*term_a2).ok());
  EXPECT_TRUE(term_a2->lost());
}

TEST_F(EtcdStoreTest, AStandbyWatchSeesTheLeaderResign) {
  Election a(*client_, keys_, "a:1", std::chrono::seconds(5));
  Election b(*client_, keys_, "b:2", std::chrono::seconds(5));
  auto term_a = Lead(a);
  ASSERT_NE(term_a, nullptr);
  auto waiting = b.Campaign();
  ASSERT_TRUE(waiting.ok());
  std::thread resign([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    a.Resign(*term_a);
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(b.WaitForChange(waiting->watch_from, std::chrono::milliseconds(5000)).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  resign.join();
  EXPECT_NE(Lead(b), nullptr);
}

TEST_F(EtcdStoreTest, ManifestsAboveOnePartRoundTripAndReplaceOrphans) {
  // Nothing renews the lease here, and writing 2.5 MiB in parts takes over 5 s under
  // ThreadSanitizer: a short lease would expire mid-test and fence the writes.
  Election election(*client_, keys_, "a:1", std::chrono::seconds(60));
  auto term = Lead(election);
  ASSERT_NE(term, nullptr);
  EtcdLogStore store(*client_, keys_, term);
  std::vector<uint8_t> big((5u << 19) + 17);  // 2.5 MiB: three parts
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 31 + i / 7);
  const Status put_big = store.PutManifest("policy", 3, big);
  ASSERT_TRUE(put_big.ok()) << put_big.ToString();
  const std::vector<uint8_t> small = {9, 8, 7};
  const Status put_small = store.PutManifest("policy", 4, small);
  ASSERT_TRUE(put_small.ok()) << put_small.ToString();
  auto read = store.GetManifest("policy", 3);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, std::string(big.begin(), big.end()));
  // A smaller manifest over an orphan of more parts leaves none of them behind.
  const Status put_over = store.PutManifest("policy", 3, small);
  ASSERT_TRUE(put_over.ok()) << put_over.ToString();
  EXPECT_EQ(*store.GetManifest("policy", 3), std::string(small.begin(), small.end()));
  EXPECT_EQ(store.GetManifest("policy", 5).status().code(), Code::kNotFound);
}

TEST_F(EtcdStoreTest, VersionLogReplaysFromEtcdAsFromAFile) {
  Election election(*client_, keys_, "a:1", std::chrono::seconds(5));
  auto term = Lead(election);
  ASSERT_NE(term, nullptr);
  {
    auto log =
        VersionLog::Open(std::make_unique<EtcdLogStore>(*client_, keys_, term), testing::kSecret);
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    for (uint64_t v = 1; v <= 3; ++v) {
      auto verified = (*log)->VerifyPublish(testing::Signed(testing::TestManifest("c", v, v)));
      ASSERT_TRUE(verified.ok()) << verified.status().ToString();
      ASSERT_TRUE((*log)->RecordPublish(*verified, PeerId(1), 1000, wire::DECISION_NONE, "").ok());
    }
    ASSERT_TRUE((*log)->RecordDecision("c", 2, wire::DECISION_COMMIT, "", 2000).ok());
  }
  auto replayed =
      VersionLog::Open(std::make_unique<EtcdLogStore>(*client_, keys_, term), testing::kSecret);
  ASSERT_TRUE(replayed.ok()) << replayed.status().ToString();
  const ChannelState* channel = (*replayed)->channel("c");
  ASSERT_NE(channel, nullptr);
  EXPECT_EQ(channel->versions.size(), 3u);
  EXPECT_EQ(channel->current_version, 2u);
  EXPECT_TRUE((*replayed)->GetManifest("c", 1).ok());
  EXPECT_TRUE((*replayed)->GetManifest("c", 0).ok());
}

TEST_F(EtcdStoreTest, UnreachableEtcdIsUnavailableAndSaysSo) {
  auto client = etcd::Client::Create("http://127.0.0.1:1", Timeout(200));
  ASSERT_TRUE(client.ok());
  auto range = (*client)->Range("x");
  EXPECT_EQ(range.status().code(), Code::kUnavailable);
  EXPECT_NE((*client)->Health().find("unreachable or without quorum"), std::string::npos);
  EXPECT_EQ(etcd::Client::Create("https://x:1").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(etcd::Client::Create("x").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(etcd::Client::Create("").status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace weightcast::coord
