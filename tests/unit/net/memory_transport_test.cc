#include "net/memory_transport.h"

#include <gtest/gtest.h>

#include "net_test_util.h"

namespace weightcast::net {
namespace {

using namespace std::chrono_literals;
using testing::LogCapture;
using testing::Pattern;
using testing::TestOptions;

TEST(MemoryTransport, HandshakeAndChunkDelivery) {
  FakeClock clock;
  MemoryNetwork network(clock);
  LogCapture log;
  auto a = network.CreateTransport("a", TestOptions(1, &log));
  auto b = network.CreateTransport("b", TestOptions(2, &log, Role::kCoordinator));
  auto listener = b->Listen("mem:b");
  ASSERT_TRUE(listener.ok());
  auto client = a->Connect("mem:b");
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto server = (*listener)->Accept(0ns);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_EQ((*client)->peer().node_id, PeerId(2));
  EXPECT_EQ((*client)->peer().role, Role::kCoordinator);
  EXPECT_EQ((*server)->peer().node_id, PeerId(1));

  auto payload = std::make_shared<std::vector<uint8_t>>(Pattern(4096, 3));
  ASSERT_TRUE(
      (*client)->SendChunk({.version = 2, .channel = 1, .chunk_index = 9}, *payload, payload).ok());
  auto frame = (*server)->Receive(0ns);
  ASSERT_TRUE(frame.ok()) << frame.status().ToString();
  EXPECT_EQ(frame->chunk_header()->chunk_index, 9u);
  auto got = frame->chunk_payload();
  EXPECT_TRUE(std::equal(got.begin(), got.end(), payload->begin(), payload->end()));
  EXPECT_EQ((*server)->Receive(0ns).status().code(), Code::kDeadlineExceeded);
}

TEST(MemoryTransport, WrongSecretIsRefusedAndNothingIsAccepted) {
  FakeClock clock;
  MemoryNetwork network(clock);
  LogCapture log;
  Options bad = TestOptions(1, &log);
  bad.secret = "not the cluster secret at all";
  auto a = network.CreateTransport("a", bad);
  auto b = network.CreateTransport("b", TestOptions(2, &log));
  auto listener = b->Listen("mem:b");
  ASSERT_TRUE(listener.ok());
  auto client = a->Connect("mem:b");
  EXPECT_FALSE(client.ok());
  EXPECT_EQ((*listener)->Accept(0ns).status().code(), Code::kDeadlineExceeded);
  EXPECT_TRUE(log.Contains("refused peer")) << log.All();
  EXPECT_TRUE(log.Contains("does not verify")) << log.All();
}

TEST(MemoryTransport, WrongClusterAndVersionAreRefusedWithLoggedReason) {
  FakeClock clock;
  MemoryNetwork network(clock);
  LogCapture log;
  auto b = network.CreateTransport("b", TestOptions(2, &log));
  auto listener = b->Listen("mem:b");
  Options other_cluster = TestOptions(1, &log);
  other_cluster.self.cluster_id = "elsewhere";
  auto c1 = network.CreateTransport("c1", other_cluster)->Connect("mem:b");
  EXPECT_EQ(c1.status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(log.Contains("cluster 'elsewhere'")) << log.All();
  Options future = TestOptions(3, &log);
  future.self.protocol_version = 2;
  auto c2 = network.CreateTransport("c2", future)->Connect("mem:b");
  EXPECT_FALSE(c2.ok());
  EXPECT_TRUE(log.Contains("protocol version 2")) << log.All();
  EXPECT_EQ((*listener)->Accept(0ns).status().code(), Code::kDeadlineExceeded);
}

TEST(MemoryTransport, SenderBlocksWhenPeerDoesNotRead) {
  FakeClock clock;
  MemoryNetwork network(clock);
  Options opts = TestOptions(1, nullptr);
  opts.send_queue_bytes = 64 << 10;
  auto a = network.CreateTransport("a", opts);
  auto b = network.CreateTransport("b", TestOptions(2, nullptr));
  auto listener = b->Listen("mem:b");
  auto client = a->Connect("mem:b");
  auto server = (*listener)->Accept(0ns);
  ASSERT_TRUE(server.ok());
  std::vector<uint8_t> body(16 << 10);
  int sent = 0;
  while ((*client)->SendControl(body, 0ns).ok()) ++sent;
  EXPECT_EQ(sent, 4);  // 64 KiB of 16 KiB frames; the fifth waits for the reader
  ASSERT_TRUE((*server)->Receive(0ns).ok());
  EXPECT_TRUE((*client)->SendControl(body, 0ns).ok());
}

TEST(MemoryTransport, HungPeerIsDetectedByKeepaliveOnFakeClock) {
  FakeClock clock;
  MemoryNetwork network(clock);
  LogCapture log;
  auto a = network.CreateTransport("a", TestOptions(1, &log));
  auto b = network.CreateTransport("b", TestOptions(2, &log));
  auto listener = b->Listen("mem:b");
  auto client = a->Connect("mem:b");
  auto server = (*listener)->Accept(0ns);
  ASSERT_TRUE(server.ok());
  // Idle but alive: pings keep the connection up far beyond the timeout.
  clock.AdvanceInSteps(60s, 250ms);
  EXPECT_TRUE((*client)->status().ok());
  EXPECT_TRUE((*server)->status().ok());
  network.Freeze("b");
  clock.AdvanceInSteps(4s, 250ms);
  EXPECT_TRUE((*client)->status().ok());  // 4 s < keepalive_timeout of 5 s
  clock.AdvanceInSteps(2s, 250ms);
  EXPECT_EQ((*client)->status().code(), Code::kDeadlineExceeded);
  EXPECT_EQ((*client)->Receive(0ns).status().code(), Code::kDeadlineExceeded);
  EXPECT_TRUE(log.Contains("keepalive")) << log.All();
}

TEST(MemoryTransport, BlockedReceiveReturnsWhenFakeTimePasses) {
  FakeClock clock;
  MemoryNetwork network(clock);
  auto a = network.CreateTransport("a", TestOptions(1, nullptr));
  auto b = network.CreateTransport("b", TestOptions(2, nullptr));
  auto listener = b->Listen("mem:b");
  auto client = a->Connect("mem:b");
  auto server = (*listener)->Accept(0ns);
  std::thread advancer([&] {
    for (int i = 0; i < 100; ++i) {
      clock.Advance(100ms);
      std::this_thread::sleep_for(1ms);
    }
  });
  auto r = (*server)->Receive(2s);
  EXPECT_EQ(r.status().code(), Code::kDeadlineExceeded);
  advancer.join();
}

TEST(MemoryTransport, CloseIsSeenByPeer) {
  FakeClock clock;
  MemoryNetwork network(clock);
  auto a = network.CreateTransport("a", TestOptions(1, nullptr));
  auto b = network.CreateTransport("b", TestOptions(2, nullptr));
  auto listener = b->Listen("mem:b");
  auto client = a->Connect("mem:b");
  auto server = (*listener)->Accept(0ns);
  (*client)->Close();
  EXPECT_EQ((*server)->Receive(0ns).status().code(), Code::kUnavailable);
}

// Two memory nodes connected, `server` the accepted side; what push delivery tests start from.
struct MemoryPair {
  FakeClock clock;
  MemoryNetwork network{clock};
  std::unique_ptr<Transport> a = network.CreateTransport("a", TestOptions(1, nullptr));
  std::unique_ptr<Transport> b = network.CreateTransport("b", TestOptions(2, nullptr));
  std::unique_ptr<Connection> client, server;
  MemoryPair() {
    auto listener = b->Listen("mem:b");
    EXPECT_TRUE(listener.ok());
    auto c = a->Connect("mem:b");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    auto s = (*listener)->Accept(0ns);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    client = std::move(c).value();
    server = std::move(s).value();
  }
};

TEST(MemoryTransport, PushDeliveryKeepsTheOrderAndEndsOnce) {
  testing::Collected got;  // before the connections: their end goes to it
  MemoryPair p;
  ASSERT_TRUE(p.server->CanDeliverFrames());
  auto payload = std::make_shared<std::vector<uint8_t>>(Pattern(64 << 10, 9));
  testing::SendMixedFrames(*p.client, 0, 3, payload);
  ASSERT_TRUE(p.server->DeliverFrames(got.Handler()));   // the three already there come first
  EXPECT_FALSE(p.server->DeliverFrames(got.Handler()));  // one handler
  testing::SendMixedFrames(*p.client, 3, 40, payload);
  testing::ExpectMixedFramesInOrder(got, 40, *payload);
  EXPECT_EQ(got.end_count(), 0u);
  p.client->Close();  // the peer hangs up: the end, once
  ASSERT_TRUE(got.WaitEnd());
  p.server->Close();
  EXPECT_EQ(got.end_count(), 1u);
  {
    std::lock_guard lock(got.mu);
    EXPECT_EQ(got.ends[0].reason(), Reason::kPeerClosed);
  }
}

TEST(MemoryTransport, PushDeliveryEndsInsideCloseAndAfterTheEnd) {
  testing::Collected closed, late;
  MemoryPair p;
  ASSERT_TRUE(p.server->DeliverFrames(closed.Handler()));
  p.server->Close();
  EXPECT_EQ(closed.end_count(), 1u);  // inside Close, before it returned
  MemoryPair q;
  q.server->Close();
  ASSERT_TRUE(q.server->DeliverFrames(late.Handler()));
  ASSERT_TRUE(late.WaitEnd());  // a handler given after the end gets the end
  EXPECT_EQ(late.end_count(), 1u);
}

TEST(MemoryTransport, APushingPeerDeclaredDeadOnTheFakeClockGetsItsEnd) {
  testing::Collected got;
  MemoryPair p;
  ASSERT_TRUE(p.server->DeliverFrames(got.Handler()));
  p.network.Freeze("a");
  p.clock.AdvanceInSteps(TestOptions(2, nullptr).keepalive_timeout + 1s, 100ms);
  ASSERT_TRUE(got.WaitEnd());
  std::lock_guard lock(got.mu);
  EXPECT_EQ(got.ends[0].code(), Code::kDeadlineExceeded);
}

}  // namespace
}  // namespace weightcast::net
