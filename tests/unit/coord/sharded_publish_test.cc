// Sharded publish at the coordinator (docs/sharded_publish.md): W ranks of one writer give the
// parts of one version; it is published once all are in, aborted when one does not come in
// time; the rank set holds the writer lease together.
#include <gtest/gtest.h>

#include "coord_test_util.h"
#include "manifest/part_assembly.h"
#include "trust/assembled_manifest.h"
#include "trust/signed_manifest.h"
#include "unit/trust/trust_test_util.h"

namespace weightcast::coord {
namespace {

using testing::AsDelta;
using testing::CoordinatorHarness;
using testing::Signed;
using testing::TestManifest;

constexpr uint32_t kWorld = 4;

wire::Register Rank(uint64_t node, uint32_t rank, uint32_t world = kWorld,
                    std::string writer_id = "trainer", bool take_over = false) {
  wire::Register r;
  r.set_peer_address("mem:rank" + std::to_string(node));
  r.add_channels("policy");
  r.set_source(true);
  r.set_writer_id(std::move(writer_id));
  r.set_take_over(take_over);
  r.set_rank(rank);
  r.set_world(world);
  return r;
}

Manifest Part(uint64_t version, uint32_t rank, uint64_t seed, int step = 7) {
  Manifest m = TestManifest("policy", version, seed * 100 + rank);
  m.metadata[std::string(kPartKey)] = PartValue({rank, kWorld});
  m.metadata["step"] = std::to_string(step);
  m.root = ComputeRoot(m);
  return m;
}

uint64_t EpochOf(const wire::RegisterReply& reply) {
  return reply.leases_size() == 0 ? 0 : reply.leases(0).epoch();
}

struct Ranks {
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  uint64_t epoch = 0;
};

Ranks RegisterRanks(CoordinatorHarness& h, uint64_t first_node = 10) {
  Ranks out;
  for (uint32_t r = 0; r < kWorld; ++r) {
    out.clients.push_back(h.Connect(first_node + r, net::Role::kPublisher));
    auto reply = out.clients.back()->Register(Rank(first_node + r, r));
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    if (reply.ok()) out.epoch = EpochOf(*reply);
  }
  return out;
}

Result<wire::PublishReply> Give(Ranks& ranks, uint32_t rank, const Manifest& part,
                                const trust::SigningIdentity* signer = nullptr) {
  return ranks.clients[rank]->PublishPart(
      signer == nullptr ? Signed(part) : *SignManifest(part, {testing::kSecret, signer}),
      ranks.epoch);
}

Result<Manifest> Newest(CoordinatorHarness& h) {
  auto tool = h.Connect(99, net::Role::kTool);
  WC_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, tool->GetManifest("policy", Version(0)));
  return VerifySignedManifestWithSecret(bytes, testing::kSecret);
}

TEST(ShardedPublish, TheVersionIsPublishedWhenEveryPartIsIn) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  Ranks ranks = RegisterRanks(h);
  ASSERT_EQ(ranks.epoch, 1u);
  for (uint32_t r : {3u, 1u, 0u}) {
    auto reply = Give(ranks, r, Part(1, r, 1));
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_FALSE(reply->assembled());
    EXPECT_EQ(reply->world(), kWorld);
  }
  EXPECT_EQ(Newest(h).status().code(), Code::kNotFound);  // nothing published yet
  auto last = Give(ranks, 2, Part(1, 2, 1));
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_TRUE(last->assembled());
  EXPECT_EQ(last->version(), 1u);
  auto m = Newest(h);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->chunk_count(), 12u);
  EXPECT_EQ(m->files[2].path, "rank-00002-of-00004/model.safetensors");
  // A rank asking again (its reply was lost) hears that it is assembled.
  auto again = Give(ranks, 0, Part(1, 0, 1));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->assembled());

  // The next version: each part a delta on its rank's part of v1; the version a delta on v1.
  for (uint32_t r = 0; r < kWorld; ++r) {
    auto reply = Give(ranks, r, AsDelta(Part(2, r, 2), Part(1, r, 1)));
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  }
  auto v2 = Newest(h);
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(v2->version, Version(2));
  ASSERT_TRUE(v2->delta.has_value());
  EXPECT_EQ(v2->delta->base_root, m->root);
}

// Certificate mode (docs/security.md, "Sharded publishes"): no one signs the assembled manifest;
// it travels as the ranks' signed parts, which every reader checks and assembles itself.
TEST(ShardedPublish, InCertificateModeEveryReaderAssemblesTheRanksSignedParts) {
  trust::Authority ca = weightcast::testing::NewAuthority();
  auto anchor = weightcast::testing::AnchorOf(ca);
  CoordinatorOptions options;
  options.trust_anchor = anchor;
  options.identity = weightcast::testing::Issue(ca, "coordinator", "coordinator");
  CoordinatorHarness h(options);
  ASSERT_TRUE(h.Start().ok());
  Ranks ranks = RegisterRanks(h);
  std::vector<std::shared_ptr<const trust::SigningIdentity>> rank_keys;
  for (uint32_t r = 0; r < kWorld; ++r) {
    rank_keys.push_back(
        weightcast::testing::Issue(ca, "trainer-" + std::to_string(r), "publisher:policy"));
  }
  // A part signed by a certificate without the publisher role is refused at once.
  auto sampler = weightcast::testing::Issue(ca, "sampler", "agent");
  EXPECT_EQ(Give(ranks, 0, Part(1, 0, 1), sampler.get()).status().code(), Code::kUnauthenticated);
  for (uint32_t r = 0; r < kWorld; ++r) {
    auto reply = Give(ranks, r, Part(1, r, 1), rank_keys[r].get());
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  }
  auto tool = h.Connect(99, net::Role::kTool);
  auto v1_bytes = tool->GetManifest("policy", Version(1));
  ASSERT_TRUE(v1_bytes.ok()) << v1_bytes.status().ToString();
  ASSERT_EQ((*v1_bytes)[4], kAssembledManifestFormat);
  auto v1 = VerifySignedManifest(*v1_bytes, {"", anchor.get()});
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  // The same manifest development mode assembles from the same parts.
  PartAssembly same("policy", Version(1), kWorld, PartDeadline{});
  for (uint32_t r = 0; r < kWorld; ++r) ASSERT_TRUE(same.Add({r, kWorld}, Part(1, r, 1)).ok());
  EXPECT_EQ(v1->root, same.Assemble(nullptr)->root);
  EXPECT_EQ(v1->chunk_count(), 12u);
  EXPECT_FALSE(v1->delta.has_value());
  // A node without the CA cannot read it; a node of another CA refuses it.
  EXPECT_EQ(VerifySignedManifest(*v1_bytes, {testing::kSecret, nullptr}).status().code(),
            Code::kUnauthenticated);
  auto other = weightcast::testing::AnchorOf(weightcast::testing::NewAuthority("other"));
  EXPECT_EQ(VerifySignedManifest(*v1_bytes, {"", other.get()}).status().code(),
            Code::kUnauthenticated);

  // v2: every part a delta on its rank's part of v1, assembled as a delta on v1.
  for (uint32_t r = 0; r < kWorld; ++r) {
    auto reply = Give(ranks, r, AsDelta(Part(2, r, 2), Part(1, r, 1)), rank_keys[r].get());
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  }
  auto v2_bytes = tool->GetManifest("policy", Version(2));
  ASSERT_TRUE(v2_bytes.ok());
  auto v2 = VerifySignedManifest(*v2_bytes, {"", anchor.get()});
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  ASSERT_TRUE(v2->delta.has_value());
  EXPECT_EQ(v2->delta->base_version, Version(1));
  EXPECT_EQ(v2->delta->base_root, v1->root);
  EXPECT_EQ(v2->delta->chunks.size(), 12u);

  // No byte of a part can change, and the coordinator's one claim, the delta base, changes no
  // chunk hash and no root: only what the payloads are decoded onto.
  std::vector<uint8_t> tampered = *v2_bytes;
  tampered[tampered.size() / 2] ^= 0x01;
  EXPECT_FALSE(VerifySignedManifest(tampered, {"", anchor.get()}).ok());
  std::vector<uint8_t> other_base = *v2_bytes;
  other_base[other_base.size() - 1] ^= 0x01;  // the base root's last byte
  auto rebased = VerifySignedManifest(other_base, {"", anchor.get()});
  ASSERT_TRUE(rebased.ok()) << rebased.status().ToString();
  EXPECT_EQ(rebased->root, v2->root);
  EXPECT_EQ(rebased->chunk_hashes, v2->chunk_hashes);
  EXPECT_NE(rebased->delta->base_root, v1->root);
}

TEST(ShardedPublish, AnAssembledEnvelopeIsReadOnlyWhenItsPartsMakeOneVersion) {
  trust::Authority ca = weightcast::testing::NewAuthority();
  auto anchor = weightcast::testing::AnchorOf(ca);
  auto trainer = weightcast::testing::Issue(ca, "trainer", "publisher:policy");
  auto other_channel = weightcast::testing::Issue(ca, "trainer-b", "publisher:reward");
  auto sign = [&](const Manifest& m, const trust::SigningIdentity& who) {
    return *SignManifest(m, {testing::kSecret, &who});
  };
  std::vector<std::vector<uint8_t>> parts;
  for (uint32_t r = 0; r < kWorld; ++r) parts.push_back(sign(Part(3, r, 1), *trainer));
  auto read = [&](std::vector<std::vector<uint8_t>> p, uint64_t base = 0) {
    return VerifySignedManifest(JoinAssembledManifest(p, base, Digest{}), {"", anchor.get()});
  };
  ASSERT_TRUE(read(parts).ok()) << read(parts).status().ToString();
  auto refused = [&](std::vector<std::vector<uint8_t>> p, Code code, std::string_view why,
                     uint64_t base = 0) {
    Result<Manifest> r = read(std::move(p), base);
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  auto swapped = parts;
  std::swap(swapped[1], swapped[2]);
  refused(swapped, Code::kCorrupt, "rank 1's part is not part 1/4");
  auto older = parts;
  older[3] = sign(Part(2, 3, 1), *trainer);
  refused(older, Code::kCorrupt, "rank 3's part does not belong with the others");
  auto three = parts;
  three.pop_back();
  refused(three, Code::kCorrupt, "is not part 0/3");
  auto unsigned_part = parts;
  unsigned_part[2] = Signed(Part(3, 2, 1));
  refused(unsigned_part, Code::kCorrupt, "is not a publisher's certified manifest");
  // The reward model's publisher signs a part of the policy channel: not its channel.
  auto foreign = parts;
  foreign[0] = sign(Part(3, 0, 1), *other_channel);
  refused(foreign, Code::kUnauthenticated, "may not publish on 'policy'");
  // A delta base with full parts.
  refused(parts, Code::kCorrupt, "but rank 0's part is full", 2);
  // Truncated anywhere.
  std::vector<uint8_t> whole = JoinAssembledManifest(parts, 0, Digest{});
  for (size_t cut : {size_t{5}, size_t{12}, whole.size() / 3, whole.size() - 1}) {
    EXPECT_EQ(VerifySignedManifest(std::span(whole).first(cut), {"", anchor.get()}).status().code(),
              Code::kCorrupt)
        << cut;
  }
}

TEST(ShardedPublish, APartMissingAbortsTheVersionAtTheDeadline) {
  CoordinatorOptions options;
  options.part_timeout = std::chrono::seconds(20);
  options.heartbeat_timeout = std::chrono::seconds(60);  // the ranks stay alive meanwhile
  CoordinatorHarness h(options);
  ASSERT_TRUE(h.Start().ok());
  Ranks ranks = RegisterRanks(h);
  for (uint32_t r : {0u, 1u, 3u}) ASSERT_TRUE(Give(ranks, r, Part(1, r, 1)).ok());
  h.Advance(std::chrono::seconds(19));
  h.coordinator().Sweep();
  ASSERT_TRUE(Give(ranks, 0, Part(1, 0, 1)).ok());  // still waiting
  h.Advance(std::chrono::seconds(2));
  h.coordinator().Sweep();
  auto aborted = Give(ranks, 0, Part(1, 0, 1));
  ASSERT_EQ(aborted.status().code(), Code::kAborted) << aborted.status().ToString();
  EXPECT_NE(aborted.status().message().find("v1 was aborted: sharded v1: the parts of ranks 2 did "
                                            "not arrive within 20 s of the first (3 of 4 in)"),
            std::string::npos)
      << aborted.status().message();
  // The late rank hears it too, and nothing was published.
  EXPECT_EQ(Give(ranks, 2, Part(1, 2, 1)).status().code(), Code::kAborted);
  EXPECT_EQ(Newest(h).status().code(), Code::kNotFound);
  // The ranks go on with the next version.
  for (uint32_t r = 0; r < kWorld; ++r) ASSERT_TRUE(Give(ranks, r, Part(2, r, 2)).ok());
  ASSERT_TRUE(Newest(h).ok());
  EXPECT_EQ(Newest(h)->version, Version(2));
}

TEST(ShardedPublish, ADuplicatePartIsTakenOnceAndAnotherPartOfARankIsRefused) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  Ranks ranks = RegisterRanks(h);
  ASSERT_TRUE(Give(ranks, 1, Part(1, 1, 1)).ok());
  auto dup = Give(ranks, 1, Part(1, 1, 1));
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(dup->parts_in(), 1u);
  EXPECT_EQ(Give(ranks, 1, Part(1, 1, 5)).status().code(), Code::kAlreadyExists);
  // A rank may only give its own rank's part.
  auto wrong = Give(ranks, 0, Part(1, 2, 1));
  EXPECT_EQ(wrong.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(wrong.status().message().find("does not hold that rank"), std::string::npos);
}

TEST(ShardedPublish, TwoRanksWithDifferentStepsAbortTheVersion) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  Ranks ranks = RegisterRanks(h);
  ASSERT_TRUE(Give(ranks, 0, Part(1, 0, 1, /*step=*/7)).ok());
  auto other = Give(ranks, 1, Part(1, 1, 1, /*step=*/8));
  ASSERT_EQ(other.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("ranks at different steps"), std::string::npos);
  auto told = Give(ranks, 0, Part(1, 0, 1, 7));
  EXPECT_EQ(told.status().code(), Code::kAborted);
  EXPECT_NE(told.status().message().find("step is '8' but rank 0 gave '7'"), std::string::npos)
      << told.status().message();
}

TEST(ShardedPublish, ASecondWriterIsRefusedWhileTheRankSetHoldsTheChannel) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  Ranks ranks = RegisterRanks(h);
  wire::Register plain;
  plain.set_peer_address("mem:other");
  plain.add_channels("policy");
  plain.set_source(true);
  plain.set_writer_id("other-trainer");
  auto other = h.Connect(50, net::Role::kPublisher);
  auto refused = other->Register(plain);
  ASSERT_EQ(refused.status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(IsWriterConflict(refused.status())) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("writer trainer (4 ranks, first node 10"),
            std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("a second, unsharded writer is refused"),
            std::string::npos);
  // The same writer id unsharded is not a rank of the set either.
  plain.set_writer_id("trainer");
  EXPECT_EQ(other->Register(plain).status().code(), Code::kFailedPrecondition);
  // Nor is a rank set of another world.
  EXPECT_EQ(other->Register(Rank(50, 0, 2)).status().code(), Code::kFailedPrecondition);
  // A tool publishing a whole version while the set holds the channel is refused.
  auto tool = h.Connect(60, net::Role::kTool);
  EXPECT_EQ(tool->Publish(Signed(TestManifest("policy", 1, 1))).status().code(),
            Code::kFailedPrecondition);
  // ... and a rank publishing an unsharded version.
  EXPECT_EQ(
      ranks.clients[0]->Publish(Signed(TestManifest("policy", 1, 1)), ranks.epoch).status().code(),
      Code::kFailedPrecondition);
}

TEST(ShardedPublish, TakeOverFencesEveryRank) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  Ranks ranks = RegisterRanks(h);
  ASSERT_TRUE(Give(ranks, 0, Part(1, 0, 1)).ok());
  wire::Register plain;
  plain.set_peer_address("mem:new");
  plain.add_channels("policy");
  plain.set_source(true);
  plain.set_writer_id("new-trainer");
  plain.set_take_over(true);
  auto next = h.Connect(70, net::Role::kPublisher);
  auto reply = next->Register(plain);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(EpochOf(*reply), 2u);
  // Each old rank's connection was closed; reconnecting with its old lease is refused.
  for (uint32_t r = 0; r < kWorld; ++r) {
    auto again = h.Connect(10 + r, net::Role::kPublisher);
    wire::Register old = Rank(10 + r, r);
    wire::WriterLease* lease = old.add_leases();
    lease->set_channel("policy");
    lease->set_epoch(ranks.epoch);
    auto fenced = again->Register(old);
    ASSERT_EQ(fenced.status().code(), Code::kFailedPrecondition) << r;
    EXPECT_NE(fenced.status().message().find("fenced by writer new-trainer"), std::string::npos);
  }
  // The new writer publishes whole versions.
  EXPECT_TRUE(next->Publish(Signed(TestManifest("policy", 1, 3)), 2).ok());
}

TEST(ShardedPublish, ARankRestartedMidVersionTakesItsRankBack) {
  CoordinatorOptions options;
  options.heartbeat_timeout = std::chrono::seconds(60);
  CoordinatorHarness h(options);
  ASSERT_TRUE(h.Start().ok());
  Ranks ranks = RegisterRanks(h);
  for (uint32_t r : {0u, 1u, 3u}) ASSERT_TRUE(Give(ranks, r, Part(1, r, 1)).ok());
  // Rank 2 crashed before it gave its part and comes back as a new process (new node id).
  auto restarted = h.Connect(42, net::Role::kPublisher);
  auto reply = restarted->Register(Rank(42, 2));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(EpochOf(*reply), ranks.epoch);  // the other ranks keep their lease
  // The old process of rank 2 is fenced; the new one completes the version.
  EXPECT_EQ(ranks.clients[2]->PublishPart(Signed(Part(1, 2, 1)), ranks.epoch).status().code(),
            Code::kUnavailable);  // its connection was closed
  auto done = restarted->PublishPart(Signed(Part(1, 2, 1)), ranks.epoch);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(done->assembled());
  // The other ranks were not disturbed.
  auto polled = Give(ranks, 0, Part(1, 0, 1));
  ASSERT_TRUE(polled.ok()) << polled.status().ToString();
  EXPECT_TRUE(polled->assembled());
}

TEST(ShardedPublish, RegistrationChecksRankAndWorld) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  auto c = h.Connect(10, net::Role::kPublisher);
  EXPECT_EQ(c->Register(Rank(10, 4, 4)).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(c->Register(Rank(10, 0, 4, "")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(c->Register(Rank(10, 0, 5000)).status().code(), Code::kInvalidArgument);
  wire::Register agent;
  agent.set_peer_address("mem:a");
  agent.add_channels("policy");
  agent.set_world(2);
  auto a = h.Connect(11, net::Role::kAgent);
  EXPECT_EQ(a->Register(agent).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace weightcast::coord
