// One writer per channel: the writer lease, its epoch as a fence, take-over, a
// restarted writer, a lapsed lease, and the fence across a coordinator restart.
#include <gtest/gtest.h>

#include "coord_test_util.h"

namespace weightcast::coord {
namespace {

using testing::AsDelta;
using testing::CoordinatorHarness;
using testing::Signed;
using testing::TestManifest;

wire::Register Writer(uint64_t node, std::string writer_id, bool take_over = false,
                      uint64_t held_epoch = 0) {
  wire::Register r;
  r.set_peer_address("mem:pub" + std::to_string(node));
  r.add_channels("policy");
  r.set_source(true);
  r.set_hostname("host" + std::to_string(node));
  r.set_writer_id(std::move(writer_id));
  r.set_take_over(take_over);
  if (held_epoch != 0) {
    wire::WriterLease* lease = r.add_leases();
    lease->set_channel("policy");
    lease->set_epoch(held_epoch);
  }
  return r;
}

uint64_t EpochOf(const wire::RegisterReply& reply) {
  for (const wire::WriterLease& lease : reply.leases()) {
    if (lease.channel() == "policy") return lease.epoch();
  }
  return 0;
}

Result<Version> PublishWithEpoch(CoordinatorClient& client, const Manifest& m, uint64_t epoch) {
  return client.Publish(Signed(m), epoch);
}

TEST(WriterLease, FirstWriterGetsEpochOneAndPublishesWithIt) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  auto a = h.Connect(7, net::Role::kPublisher);
  auto reply = a->Register(Writer(7, "trainer-a"));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(EpochOf(*reply), 1u);
  EXPECT_TRUE(PublishWithEpoch(*a, TestManifest("policy", 1, 1), 1).ok());
  // Registering again from the same process keeps the lease and the epoch.
  reply = a->Register(Writer(7, "trainer-a", false, 1));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(EpochOf(*reply), 1u);
  auto tool = h.Connect(9, net::Role::kTool);
  auto status = tool->GetStatus("policy");
  ASSERT_TRUE(status.ok());
  const wire::ChannelWriter& w = status->channels(0).writer();
  EXPECT_EQ(w.writer_id(), "trainer-a");
  EXPECT_EQ(w.epoch(), 1u);
  EXPECT_EQ(w.node_id(), 7u);
  EXPECT_TRUE(w.live());
}

TEST(WriterLease, SecondWriterIsRefusedNamingTheHolder) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  auto a = h.Connect(7, net::Role::kPublisher);
  ASSERT_TRUE(a->Register(Writer(7, "trainer-a")).ok());
  auto b = h.Connect(8, net::Role::kPublisher);
  auto refused = b->Register(Writer(8, "trainer-b"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(IsWriterConflict(refused.status())) << refused.status().ToString();
  const std::string& message = refused.status().message();
  EXPECT_NE(message.find("channel policy already has a writer"), std::string::npos) << message;
  EXPECT_NE(message.find("trainer-a"), std::string::npos) << message;
  EXPECT_NE(message.find("node 7 at mem:pub7"), std::string::npos) << message;
  EXPECT_NE(message.find("host7"), std::string::npos) << message;
  EXPECT_NE(message.find("since 2023-11-14T22:13:20Z"), std::string::npos) << message;
  EXPECT_NE(message.find("--take-over"), std::string::npos) << message;
  // Nor may it publish without registering (a tool or an older publisher: no epoch).
  auto refused_publish = b->Publish(Signed(TestManifest("policy", 1, 1)));
  EXPECT_EQ(refused_publish.status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(IsWriterConflict(refused_publish.status()));
  // The holder is untouched.
  EXPECT_TRUE(PublishWithEpoch(*a, TestManifest("policy", 1, 1), 1).ok());
  // An agent on the channel is no writer and is not refused.
  auto agent = h.Connect(20, net::Role::kAgent);
  EXPECT_TRUE(agent->Register(testing::AgentRegistration(20)).ok());
  wire::Register agent_as_writer = testing::AgentRegistration(21);
  agent_as_writer.set_writer_id("x");
  auto agent21 = h.Connect(21, net::Role::kAgent);
  EXPECT_EQ(agent21->Register(agent_as_writer).status().code(), Code::kInvalidArgument);
}

TEST(WriterLease, TakeOverFencesTheOldWriter) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  auto a = h.Connect(7, net::Role::kPublisher);
  ASSERT_TRUE(a->Register(Writer(7, "trainer-a")).ok());
  const Manifest v1 = TestManifest("policy", 1, 1);
  ASSERT_TRUE(PublishWithEpoch(*a, v1, 1).ok());

  auto b = h.Connect(8, net::Role::kPublisher);
  auto taken = b->Register(Writer(8, "trainer-b", /*take_over=*/true));
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(EpochOf(*taken), 2u);

  // The old writer's connection was closed; whatever it does next is refused, naming the new one.
  auto a2 = h.Connect(7, net::Role::kPublisher);
  auto publish = PublishWithEpoch(*a2, AsDelta(TestManifest("policy", 2, 2), v1), 1);
  ASSERT_EQ(publish.status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(IsWriterConflict(publish.status()));
  EXPECT_NE(publish.status().message().find("fenced by writer trainer-b (node 8"),
            std::string::npos)
      << publish.status().ToString();
  // Registering again with the lease it held is refused, take_over or not.
  for (bool take_over : {false, true}) {
    auto again = a2->Register(Writer(7, "trainer-a", take_over, /*held_epoch=*/1));
    ASSERT_EQ(again.status().code(), Code::kFailedPrecondition);
    EXPECT_NE(again.status().message().find("fenced by writer trainer-b"), std::string::npos)
        << again.status().ToString();
  }
  // The new writer publishes on.
  EXPECT_TRUE(PublishWithEpoch(*b, AsDelta(TestManifest("policy", 2, 2), v1), 2).ok());
  auto tool = h.Connect(9, net::Role::kTool);
  auto status = tool->GetStatus("policy");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->channels(0).writer().writer_id(), "trainer-b");
  EXPECT_TRUE(status->channels(0).writer().taken_over());
}

TEST(WriterLease, HeartbeatOfAFencedWriterIsRefused) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  // Same node id twice would replace the registration; a fenced writer that still has its
  // session open (the coordinator closes it, but a heartbeat may race that) is told on its
  // next heartbeat. Simulated through Handle, which has no sessions to close.
  const net::PeerInfo a{.node_id = PeerId(7), .role = net::Role::kPublisher, .address = "a"};
  const net::PeerInfo b{.node_id = PeerId(8), .role = net::Role::kPublisher, .address = "b"};
  wire::Envelope reg;
  *reg.mutable_register_() = Writer(7, "trainer-a");
  ASSERT_FALSE(h.coordinator().Handle(1, a, reg).has_error());
  *reg.mutable_register_() = Writer(8, "trainer-b", true);
  ASSERT_FALSE(h.coordinator().Handle(2, b, reg).has_error());
  wire::Envelope heartbeat;
  heartbeat.mutable_heartbeat();
  wire::Envelope reply = h.coordinator().Handle(1, a, heartbeat);
  ASSERT_TRUE(reply.has_error());
  EXPECT_EQ(reply.error().code(), static_cast<uint32_t>(Code::kFailedPrecondition));
  EXPECT_NE(reply.error().message().find("fenced by writer trainer-b"), std::string::npos)
      << reply.error().message();
  EXPECT_FALSE(h.coordinator().Handle(2, b, heartbeat).has_error());
}

TEST(WriterLease, SameWriterInANewProcessContinuesWithoutTakeOver) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  auto old_process = h.Connect(7, net::Role::kPublisher);
  ASSERT_TRUE(old_process->Register(Writer(7, "store-1")).ok());
  const Manifest v1 = TestManifest("policy", 1, 1);
  ASSERT_TRUE(PublishWithEpoch(*old_process, v1, 1).ok());
  // A restart: another node id, the same writer id, no lease yet. Accepted at once (the old
  // process may not have timed out yet) with a new epoch; its delta continues the chain.
  auto restarted = h.Connect(11, net::Role::kPublisher);
  auto reply = restarted->Register(Writer(11, "store-1"));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(EpochOf(*reply), 2u);
  EXPECT_TRUE(PublishWithEpoch(*restarted, AsDelta(TestManifest("policy", 2, 2), v1), 2).ok());
  // The old process, were it still running, is fenced.
  auto stale = h.Connect(7, net::Role::kPublisher);
  EXPECT_EQ(PublishWithEpoch(*stale, TestManifest("policy", 3, 3), 1).status().code(),
            Code::kFailedPrecondition);
}

TEST(WriterLease, LapsesWhenTheWriterDiesOrLeaves) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  auto a = h.Connect(7, net::Role::kPublisher);
  ASSERT_TRUE(a->Register(Writer(7, "trainer-a")).ok());
  auto b = h.Connect(8, net::Role::kPublisher);
  ASSERT_FALSE(b->Register(Writer(8, "trainer-b")).ok());
  // Silent past the heartbeat timeout: dead, and its lease lapsed.
  h.Advance(std::chrono::seconds(4));
  h.coordinator().Sweep();
  auto reply = b->Register(Writer(8, "trainer-b"));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(EpochOf(*reply), 2u);
  // A writer that leaves frees the channel at once.
  ASSERT_TRUE(b->Leave().ok());
  auto c = h.Connect(9, net::Role::kPublisher);
  reply = c->Register(Writer(9, "trainer-c"));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(EpochOf(*reply), 3u);
  // The writer whose lease lapsed and was taken is fenced when it comes back with it.
  auto a2 = h.Connect(7, net::Role::kPublisher);
  EXPECT_EQ(a2->Register(Writer(7, "trainer-a", false, 1)).status().code(),
            Code::kFailedPrecondition);
}

TEST(WriterLease, FenceSurvivesACoordinatorRestart) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  {
    auto a = h.Connect(7, net::Role::kPublisher);
    ASSERT_TRUE(a->Register(Writer(7, "trainer-a")).ok());
    ASSERT_TRUE(PublishWithEpoch(*a, TestManifest("policy", 1, 1), 1).ok());
    auto b = h.Connect(8, net::Role::kPublisher);
    ASSERT_TRUE(b->Register(Writer(8, "trainer-b", true)).ok());
  }
  h.Stop();
  ASSERT_TRUE(h.Start().ok());
  EXPECT_EQ(h.coordinator().recovery().records, 3u);  // two writer epochs and a version
  // The fenced writer stays fenced.
  auto a = h.Connect(7, net::Role::kPublisher);
  auto fenced = a->Register(Writer(7, "trainer-a", false, 1));
  ASSERT_EQ(fenced.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(fenced.status().message().find("fenced by writer trainer-b"), std::string::npos);
  EXPECT_EQ(PublishWithEpoch(*a, TestManifest("policy", 2, 2), 1).status().code(),
            Code::kFailedPrecondition);
  // A third writer is refused while the holder has its heartbeat timeout to come back...
  auto c = h.Connect(9, net::Role::kPublisher);
  EXPECT_EQ(c->Register(Writer(9, "trainer-c")).status().code(), Code::kFailedPrecondition);
  // ...and the holder reconnecting keeps its epoch.
  auto b = h.Connect(8, net::Role::kPublisher);
  auto kept = b->Register(Writer(8, "trainer-b", false, 2));
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(EpochOf(*kept), 2u);
  EXPECT_TRUE(PublishWithEpoch(*b, TestManifest("policy", 2, 2), 2).ok());
}

TEST(WriterLease, ALeaseNobodyRenewsAfterARestartLapses) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  {
    auto a = h.Connect(7, net::Role::kPublisher);
    ASSERT_TRUE(a->Register(Writer(7, "trainer-a")).ok());
  }
  h.Stop();
  ASSERT_TRUE(h.Start().ok());
  auto c = h.Connect(9, net::Role::kPublisher);
  EXPECT_FALSE(c->Register(Writer(9, "trainer-c")).ok());
  h.Advance(std::chrono::seconds(4));
  auto reply = c->Register(Writer(9, "trainer-c"));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(EpochOf(*reply), 2u);
}

TEST(WriterLease, PublishersWithoutAWriterIdAreWritersByNodeId) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  auto a = h.Connect(7, net::Role::kPublisher);
  ASSERT_TRUE(a->Register(Writer(7, "")).ok());
  // An older publisher publishes without an epoch: it holds the lease, so that is fine.
  EXPECT_TRUE(a->Publish(Signed(TestManifest("policy", 1, 1))).ok());
  auto b = h.Connect(8, net::Role::kPublisher);
  auto refused = b->Register(Writer(8, ""));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("writer node-7"), std::string::npos)
      << refused.status().ToString();
}

}  // namespace
}  // namespace weightcast::coord
