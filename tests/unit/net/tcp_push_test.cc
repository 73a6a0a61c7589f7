// Push delivery on the TCP transport (Connection::DeliverFrames): the path an agent's swarm node
// takes so that it needs no reader thread per peer.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "net/tcp_transport.h"
#include "net_test_util.h"

namespace weightcast::net {
namespace {

using namespace std::chrono_literals;
using testing::Collected;
using testing::ConnectedPair;
using testing::Pattern;
using testing::TestOptions;

ConnectedPair Connect(Options server_opts, Options client_opts) {
  return testing::ConnectPair(std::move(TcpTransport::Create(std::move(server_opts))).value(),
                              std::move(TcpTransport::Create(std::move(client_opts))).value());
}

std::vector<uint8_t> Numbered(uint8_t n) { return std::vector<uint8_t>(16, n); }

TEST(TcpPush, FramesBeforeTheHandlerComeFirstThenTheRestInOrder) {
  // Declared before the connections: their destruction hands the end status to it.
  Collected got;
  ConnectedPair p = Connect(TestOptions(2, nullptr), TestOptions(1, nullptr));
  ASSERT_TRUE(p.server && p.client);
  ASSERT_TRUE(p.server->CanDeliverFrames());
  for (uint8_t i = 0; i < 3; ++i) ASSERT_TRUE(p.client->SendControl(Numbered(i)).ok());
  ASSERT_TRUE(p.client->Flush(5s).ok());
  std::this_thread::sleep_for(100ms);  // the three are queued on the server by now
  ASSERT_TRUE(p.server->DeliverFrames(got.Handler()));
  for (uint8_t i = 3; i < 40; ++i) ASSERT_TRUE(p.client->SendControl(Numbered(i)).ok());
  ASSERT_TRUE(got.WaitFrames(40));
  std::lock_guard lock(got.mu);
  for (size_t i = 0; i < got.frames.size(); ++i) {
    ASSERT_EQ(got.frames[i].body.size(), 16u);
    EXPECT_EQ(got.frames[i].body[0], i) << "frame " << i << " out of order";
  }
  EXPECT_TRUE(got.ends.empty());
}

TEST(TcpPush, ASecondHandlerAndReceiveAreRefused) {
  // Declared before the connections: their destruction hands the end status to it.
  Collected got;
  ConnectedPair p = Connect(TestOptions(2, nullptr), TestOptions(1, nullptr));
  ASSERT_TRUE(p.server && p.client);
  ASSERT_TRUE(p.server->DeliverFrames(got.Handler()));
  Collected other;
  EXPECT_FALSE(p.server->DeliverFrames(other.Handler()));
  EXPECT_EQ(p.server->Receive(10ms).status().code(), Code::kFailedPrecondition);
}

TEST(TcpPush, AReaderPausedOnAFullQueueIsWokenByTheHandler) {
  // Declared before the connections: their destruction hands the end status to it.
  Collected got;
  Options server = TestOptions(2, nullptr);
  server.receive_queue_bytes = 1 << 20;  // the client's 8 MiB stop the reader well before
  ConnectedPair p = Connect(server, TestOptions(1, nullptr));
  ASSERT_TRUE(p.server && p.client);
  auto payload = std::make_shared<std::vector<uint8_t>>(Pattern(512 << 10, 3));
  std::thread sender([&] {
    for (uint32_t i = 0; i < 16; ++i) {
      ASSERT_TRUE(
          p.client->SendChunk({.version = 1, .chunk_index = i}, *payload, payload, 10s).ok());
    }
  });
  std::this_thread::sleep_for(300ms);  // the server's reader has paused
  ASSERT_TRUE(p.server->DeliverFrames(got.Handler()));
  EXPECT_TRUE(got.WaitFrames(16)) << got.frame_count() << " of 16 chunks arrived";
  sender.join();
  std::lock_guard lock(got.mu);
  for (uint32_t i = 0; i < got.frames.size(); ++i) {
    ASSERT_TRUE(got.frames[i].chunk_header().ok());
    EXPECT_EQ(got.frames[i].chunk_header()->chunk_index, i);
    EXPECT_EQ(got.frames[i].chunk_payload().size(), payload->size());
  }
}

TEST(TcpPush, ThePeerHangingUpIsDeliveredOnce) {
  // Declared before the connections: their destruction hands the end status to it.
  Collected got;
  ConnectedPair p = Connect(TestOptions(2, nullptr), TestOptions(1, nullptr));
  ASSERT_TRUE(p.server && p.client);
  ASSERT_TRUE(p.server->DeliverFrames(got.Handler()));
  p.client->Close();
  ASSERT_TRUE(got.WaitEnd());
  p.server->Close();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(got.end_count(), 1u);
}

TEST(TcpPush, CloseDeliversTheEndAndNothingFollows) {
  // Declared before the connections: their destruction hands the end status to it.
  Collected got;
  ConnectedPair p = Connect(TestOptions(2, nullptr), TestOptions(1, nullptr));
  ASSERT_TRUE(p.server && p.client);
  ASSERT_TRUE(p.server->DeliverFrames(got.Handler()));
  p.server->Close();
  // The end was handed over inside Close; no call starts after it returned.
  EXPECT_EQ(got.end_count(), 1u);
  const size_t frames = got.frame_count();
  for (uint8_t i = 0; i < 5; ++i) (void)p.client->SendControl(Numbered(i), 100ms);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(got.frame_count(), frames);
  EXPECT_EQ(got.end_count(), 1u);
}

TEST(TcpPush, AHandlerSetAfterTheConnectionEndedGetsTheEndAtOnce) {
  // Declared before the connections: their destruction hands the end status to it.
  Collected got;
  ConnectedPair p = Connect(TestOptions(2, nullptr), TestOptions(1, nullptr));
  ASSERT_TRUE(p.server && p.client);
  ASSERT_TRUE(p.client->SendControl(Numbered(7)).ok());
  ASSERT_TRUE(p.client->Flush(5s).ok());
  p.client->Close();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (p.server->status().ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_FALSE(p.server->status().ok());
  ASSERT_TRUE(p.server->DeliverFrames(got.Handler()));
  // The frame that arrived before the end, then the end, both inside DeliverFrames.
  EXPECT_EQ(got.frame_count(), 1u);
  EXPECT_EQ(got.end_count(), 1u);
}

}  // namespace
}  // namespace weightcast::net
