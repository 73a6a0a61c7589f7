#include "coord/coordinator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "coord/coordinator_metrics.h"
#include "coord_test_util.h"
#include "manifest/attestation.h"

namespace weightcast::coord {
namespace {

using testing::AgentRegistration;
using testing::AsDelta;
using testing::CoordinatorHarness;
using testing::Signed;
using testing::TestManifest;

std::set<uint64_t> PeerIds(const wire::HeartbeatReply& reply) {
  std::set<uint64_t> ids;
  for (const wire::PeerEntry& p : reply.peers()) ids.insert(p.node_id());
  return ids;
}

// Agents first .. first + n - 1 of channel "policy", each connected and registered, by id; with
// `racks`, in racks "a" and "b".
std::map<uint64_t, std::unique_ptr<CoordinatorClient>> RegisterAgents(CoordinatorHarness& h,
                                                                      uint64_t first, uint64_t n,
                                                                      bool racks = false) {
  std::map<uint64_t, std::unique_ptr<CoordinatorClient>> nodes;
  for (uint64_t id = first; id < first + n; ++id) {
    nodes[id] = h.Connect(id, net::Role::kAgent);
    const wire::Register r = racks ? AgentRegistration(id, "policy", id % 3 ? "a" : "b")
                                   : AgentRegistration(id, "policy");
    EXPECT_TRUE(nodes[id]->Register(r).ok()) << id;
  }
  return nodes;
}

std::string ExpectedAttestationBytes(const Manifest& m) {
  const Digest d = ExpectedAttestation(m);
  return std::string(reinterpret_cast<const char*>(d.data()), 16);
}

const wire::NodeStatus* FindNode(const wire::FleetStatus& status, uint64_t id) {
  for (const wire::NodeStatus& n : status.nodes()) {
    if (n.node_id() == id) return &n;
  }
  return nullptr;
}

TEST(Coordinator, RegisterAnswersHeartbeatTimingAndRefusesBadInput) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  auto agent = h.Connect(10, net::Role::kAgent);
  auto reply = agent->Register(AgentRegistration(10));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->heartbeat_timeout_ms(), 3000u);
  EXPECT_EQ(reply->heartbeat_interval_ms(), 1000u);

  auto other = h.Connect(11, net::Role::kAgent);
  auto bad = other->Register(AgentRegistration(11, "../etc"));
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  wire::Register no_address = AgentRegistration(11);
  no_address.clear_peer_address();
  EXPECT_EQ(other->Register(no_address).status().code(), Code::kInvalidArgument);
  wire::Register source = AgentRegistration(11);
  source.set_source(true);  // an agent is not a source
  EXPECT_EQ(other->Register(source).status().code(), Code::kInvalidArgument);
  // Heartbeats need a registration first; refused requests left no trace.
  EXPECT_EQ(other->Heartbeat({}).status().code(), Code::kFailedPrecondition);
  auto tool = h.Connect(12, net::Role::kTool);
  EXPECT_EQ(tool->Register(AgentRegistration(12)).status().code(), Code::kFailedPrecondition);
  auto status = tool->GetStatus();
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->nodes_size(), 1);
  EXPECT_EQ(status->nodes(0).node_id(), 10u);
  EXPECT_EQ(status->nodes(0).hostname(), "host10");
}

TEST(Coordinator, PeerListsAreBoundedSymmetricAndCarryAddresses) {
  CoordinatorOptions options;
  options.degree = 3;
  options.source_degree = 6;
  CoordinatorHarness h(options);
  ASSERT_TRUE(h.Start().ok());
  constexpr int kAgents = 12;
  std::map<uint64_t, std::unique_ptr<CoordinatorClient>> nodes;
  for (uint64_t id = 100; id < 100 + kAgents; ++id) {
    nodes[id] = h.Connect(id, net::Role::kAgent);
    ASSERT_TRUE(nodes[id]->Register(AgentRegistration(id, "policy", id % 2 ? "r1" : "r2")).ok());
  }
  nodes[7] = h.Connect(7, net::Role::kPublisher);
  wire::Register pub = AgentRegistration(7);
  pub.set_source(true);
  pub.set_peer_address("mem:publisher");
  ASSERT_TRUE(nodes[7]->Register(pub).ok());
  // A node of another channel never shows up in policy's lists.
  nodes[500] = h.Connect(500, net::Role::kAgent);
  ASSERT_TRUE(nodes[500]->Register(AgentRegistration(500, "other")).ok());
  // Joins within one sweep period are batched into one rebuild at the next sweep.
  h.coordinator().Sweep();

  std::map<uint64_t, wire::HeartbeatReply> replies;
  for (auto& [id, client] : nodes) {
    auto reply = client->Heartbeat({});
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    replies[id] = *reply;
  }
  for (const auto& [id, reply] : replies) {
    const std::set<uint64_t> peers = PeerIds(reply);
    EXPECT_EQ(peers.size(), static_cast<size_t>(reply.peers_size())) << "duplicate entries";
    EXPECT_FALSE(peers.contains(id));
    EXPECT_LE(peers.size(), id == 7 ? 6u : 3u) << "node " << id;
    if (id == 500) {
      EXPECT_TRUE(peers.empty());
      continue;
    }
    EXPECT_GE(peers.size(), 2u) << "node " << id;
    EXPECT_FALSE(peers.contains(500));
    for (const wire::PeerEntry& entry : reply.peers()) {
      EXPECT_TRUE(PeerIds(replies[entry.node_id()]).contains(id))
          << id << " lists " << entry.node_id() << " but not the other way round";
      if (entry.node_id() == 7) {
        EXPECT_EQ(entry.address(), "mem:publisher");
        EXPECT_TRUE(entry.source());
      } else {
        EXPECT_EQ(entry.address(), "mem:agent" + std::to_string(entry.node_id()));
        EXPECT_EQ(entry.rack(), entry.node_id() % 2 ? "r1" : "r2");
      }
    }
  }
  // The publisher, with its larger bound (source_degree), has more peers than any agent may.
  EXPECT_GT(replies[7].peers_size(), 3);
}

TEST(Coordinator, SilentNodeDiesAndComesBackWhenItRegistersAgain) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  std::map<uint64_t, std::unique_ptr<CoordinatorClient>> nodes;
  for (uint64_t id : {1u, 2u, 3u}) {
    nodes[id] = h.Connect(id + 100, net::Role::kAgent);
    ASSERT_TRUE(nodes[id]->Register(AgentRegistration(id + 100)).ok());
  }
  h.coordinator().Sweep();
  auto a = nodes[1]->Heartbeat({});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(PeerIds(*a), (std::set<uint64_t>{102, 103}));

  h.Advance(std::chrono::seconds(2));
  ASSERT_TRUE(nodes[1]->Heartbeat({}).ok());
  ASSERT_TRUE(nodes[2]->Heartbeat({}).ok());
  h.Advance(std::chrono::milliseconds(1500));  // node 103 silent for 3.5 s > 3 s
  a = nodes[1]->Heartbeat({});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(PeerIds(*a), (std::set<uint64_t>{102}));
  auto status = nodes[1]->GetStatus();
  ASSERT_TRUE(status.ok());
  ASSERT_NE(FindNode(*status, 103), nullptr);
  EXPECT_FALSE(FindNode(*status, 103)->alive());
  EXPECT_EQ(FindNode(*status, 103)->last_heartbeat_ms_ago(), 3500u);
  EXPECT_TRUE(FindNode(*status, 101)->alive());
  EXPECT_EQ(h.coordinator().counters().members_dead.load(), 1u);

  // Restarted: a new connection, the same node id.
  nodes[3] = h.Connect(103, net::Role::kAgent);
  ASSERT_TRUE(nodes[3]->Register(AgentRegistration(103)).ok());
  h.coordinator().Sweep();
  a = nodes[1]->Heartbeat({});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(PeerIds(*a), (std::set<uint64_t>{102, 103}));
  EXPECT_EQ(h.coordinator().counters().members_alive.load(), 3u);
}

TEST(Coordinator, SecondRegistrationOfANodeReplacesTheFirstConnection) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  auto first = h.Connect(42, net::Role::kAgent);
  ASSERT_TRUE(first->Register(AgentRegistration(42)).ok());
  auto second = h.Connect(42, net::Role::kAgent);
  wire::Register moved = AgentRegistration(42);
  moved.set_peer_address("mem:moved");
  ASSERT_TRUE(second->Register(moved).ok());
  // The first connection was closed by the coordinator.
  auto stale = first->Heartbeat({});
  ASSERT_FALSE(stale.ok());
  EXPECT_TRUE(stale.status().code() == Code::kUnavailable ||
              stale.status().code() == Code::kFailedPrecondition)
      << stale.status().ToString();
  ASSERT_TRUE(second->Heartbeat({}).ok());
  auto status = second->GetStatus();
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->nodes_size(), 1);
  EXPECT_EQ(status->nodes(0).address(), "mem:moved");
  EXPECT_TRUE(status->nodes(0).alive());
}

TEST(Coordinator, PublishAcceptsNewVersionsAndDeltasOnTheirBase) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  auto pub = h.Connect(7, net::Role::kPublisher);
  const Manifest v1 = TestManifest("policy", 1, 1);
  auto published = pub->Publish(Signed(v1));
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  EXPECT_EQ(*published, Version(1));
  const Manifest v2 = AsDelta(TestManifest("policy", 2, 2), v1, 1000);
  published = pub->Publish(Signed(v2));
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  EXPECT_EQ(*published, Version(2));

  auto newest = pub->GetManifest("policy", Version(0));
  ASSERT_TRUE(newest.ok());
  EXPECT_EQ(*newest, Signed(v2));
  auto first = pub->GetManifest("policy", Version(1));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, Signed(v1));
  EXPECT_EQ(pub->GetManifest("policy", Version(9)).status().code(), Code::kNotFound);
  EXPECT_EQ(pub->GetManifest("nothing", Version(0)).status().code(), Code::kNotFound);

  // Publishing the same version again (a retry after a lost reply) is answered, not refused.
  published = pub->Publish(Signed(v2));
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  EXPECT_EQ(*published, Version(2));

  auto status = pub->GetStatus("policy");
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->channels_size(), 1);
  const wire::ChannelLog& log = status->channels(0);
  EXPECT_EQ(log.current_version(), 2u);
  ASSERT_EQ(log.versions_size(), 2);
  EXPECT_EQ(log.versions(0).base_version(), 0u);
  EXPECT_EQ(log.versions(0).payload_bytes(), 0u);
  EXPECT_EQ(log.versions(1).base_version(), 1u);
  EXPECT_EQ(log.versions(1).payload_bytes(), 2000u);  // two xor chunks of 1000 bytes
  EXPECT_EQ(log.versions(1).chunk_count(), 3u);
  EXPECT_EQ(log.versions(1).total_bytes(), 3 * kMinChunkSize);
  EXPECT_EQ(log.versions(1).publisher_node(), 7u);
  EXPECT_EQ(log.versions(1).decision(), wire::DECISION_COMMIT);
  EXPECT_EQ(log.versions(1).published_unix_ms(), 1'700'000'000'000u);

  // An agent following the channel is told to fetch and commit the newest version.
  auto agent = h.Connect(10, net::Role::kAgent);
  ASSERT_TRUE(agent->Register(AgentRegistration(10)).ok());
  wire::Heartbeat beat;
  wire::ChannelProgress* progress = beat.add_channels();
  progress->set_channel("policy");
  progress->set_version(2);
  progress->set_phase(wire::PHASE_FETCHING);
  auto reply = agent->Heartbeat(beat);
  ASSERT_TRUE(reply.ok());
  ASSERT_EQ(reply->channels_size(), 1);
  EXPECT_EQ(reply->channels(0).version(), 2u);
  EXPECT_EQ(reply->channels(0).decision(), wire::DECISION_COMMIT);
  EXPECT_EQ(reply->channels(0).current_version(), 2u);
  status = pub->GetStatus("policy");
  ASSERT_TRUE(status.ok());
  ASSERT_NE(FindNode(*status, 10), nullptr);
  ASSERT_EQ(FindNode(*status, 10)->channels_size(), 1);
  EXPECT_EQ(FindNode(*status, 10)->channels(0).phase(), wire::PHASE_FETCHING);
  EXPECT_EQ(h.coordinator().counters().versions_published.load(), 2u);
}

TEST(Coordinator, PublishRefusesWhatDoesNotCheckOut) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  auto pub = h.Connect(7, net::Role::kPublisher);
  // Version numbers need only grow: v2 is skipped.
  const Manifest v1 = TestManifest("policy", 1, 1);
  const Manifest v3 = TestManifest("policy", 3, 3);
  ASSERT_TRUE(pub->Publish(Signed(v1)).ok());
  ASSERT_TRUE(pub->Publish(Signed(v3)).ok());

  // Signed with another secret, or altered after signing.
  EXPECT_EQ(pub->Publish(Signed(TestManifest("policy", 4, 4), "another secret of enough bytes"))
                .status()
                .code(),
            Code::kUnauthenticated);
  std::vector<uint8_t> tampered = Signed(TestManifest("policy", 4, 4));
  tampered.back() ^= 1;
  EXPECT_EQ(pub->Publish(tampered).status().code(), Code::kUnauthenticated);
  EXPECT_EQ(pub->Publish(std::vector<uint8_t>{1, 2, 3}).status().code(), Code::kCorrupt);
  // Not above the newest; the same number with other content.
  auto stale = pub->Publish(Signed(TestManifest("policy", 2, 2)));
  EXPECT_EQ(stale.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(stale.status().message().find("not above the newest published version v3"),
            std::string::npos)
      << stale.status().ToString();
  EXPECT_EQ(pub->Publish(Signed(TestManifest("policy", 3, 99))).status().code(),
            Code::kAlreadyExists);
  // A delta on a version that was never published, or on v1 with the wrong root.
  Manifest unknown_base = AsDelta(TestManifest("policy", 4, 4), TestManifest("policy", 2, 2));
  auto refused = pub->Publish(Signed(unknown_base));
  EXPECT_EQ(refused.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("not a published version"), std::string::npos)
      << refused.status().ToString();
  Manifest wrong_root = AsDelta(TestManifest("policy", 4, 4), TestManifest("policy", 1, 77));
  refused = pub->Publish(Signed(wrong_root));
  EXPECT_EQ(refused.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("root"), std::string::npos);
  // Agents do not publish.
  auto agent = h.Connect(10, net::Role::kAgent);
  EXPECT_EQ(agent->Publish(Signed(TestManifest("policy", 4, 4))).status().code(),
            Code::kFailedPrecondition);

  // Nothing refused reached the log.
  auto status = pub->GetStatus("policy");
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->channels(0).versions_size(), 2);
  EXPECT_EQ(status->channels(0).current_version(), 3u);
  // And the next good publish still goes through, a delta on the older v1 included.
  auto ok = pub->Publish(Signed(AsDelta(TestManifest("policy", 4, 4), v1)));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
}

TEST(Coordinator, RollbackMovesCurrentDownAndAbortsNewerVersions) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  auto pub = h.Connect(7, net::Role::kPublisher);
  for (uint64_t v = 1; v <= 3; ++v) ASSERT_TRUE(pub->Publish(Signed(TestManifest("p", v, v))).ok());
  auto tool = h.Connect(9, net::Role::kTool);
  EXPECT_EQ(tool->Rollback("p", Version(3)).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(tool->Rollback("p", Version(8)).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(tool->Rollback("none", Version(0)).status().code(), Code::kNotFound);
  auto agent = h.Connect(10, net::Role::kAgent);
  EXPECT_EQ(agent->Rollback("p", Version(0)).status().code(), Code::kFailedPrecondition);
  auto back = tool->Rollback("p", Version(0));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, Version(2));

  ASSERT_TRUE(agent->Register(AgentRegistration(10, "p")).ok());
  auto reply = agent->Heartbeat({});
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->channels(0).version(), 3u);
  EXPECT_EQ(reply->channels(0).decision(), wire::DECISION_ABORT);
  EXPECT_EQ(reply->channels(0).current_version(), 2u);
  EXPECT_EQ(reply->channels(0).abort_reason(), "rolled back to v2");
  // v3 is aborted: no delta may build on it, and it cannot be rolled back to.
  EXPECT_EQ(pub->Publish(Signed(AsDelta(TestManifest("p", 4, 4), TestManifest("p", 3, 3))))
                .status()
                .code(),
            Code::kFailedPrecondition);
  EXPECT_EQ(*tool->Rollback("p", Version(1)), Version(1));
  // A new version moves the fleet forward again.
  ASSERT_TRUE(pub->Publish(Signed(TestManifest("p", 4, 4))).ok());
  reply = agent->Heartbeat({});
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->channels(0).current_version(), 4u);
  EXPECT_EQ(reply->channels(0).decision(), wire::DECISION_COMMIT);
}

// A Decider that holds every version until told, to check the seam is what decides.
class ManualDecider : public Decider {
 public:
  DecisionChange OnPublish(const ChannelState&, const wire::VersionEntry& entry) override {
    return {.version = entry.version(), .decision = wire::DECISION_NONE, .abort_reason = {}};
  }
  std::vector<DecisionChange> Decide(const ChannelState& channel,
                                     std::span<const NodeProgress> nodes, net::TimePoint) override {
    // Commit once every live follower has prepared the newest version.
    if (channel.versions.empty() || channel.versions.back().decision() != wire::DECISION_NONE ||
        nodes.empty()) {
      return {};
    }
    for (const NodeProgress& node : nodes) {
      if (node.progress == nullptr || node.progress->phase() != wire::PHASE_PREPARED) return {};
    }
    return {{.version = channel.newest(), .decision = wire::DECISION_COMMIT, .abort_reason = {}}};
  }
};

// A rollback to a version no live agent keeps is refused with what they do keep;
// a version committed once and rolled back past later may be returned to.
TEST(Coordinator, RollbackIsRefusedWhenNoLiveAgentKeepsTheTarget) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  auto pub = h.Connect(7, net::Role::kPublisher);
  for (uint64_t v = 1; v <= 3; ++v) ASSERT_TRUE(pub->Publish(Signed(TestManifest("p", v, v))).ok());
  auto agent = h.Connect(10, net::Role::kAgent);
  ASSERT_TRUE(agent->Register(AgentRegistration(10, "p")).ok());
  auto beat = [&](uint64_t current, std::vector<uint64_t> kept) {
    wire::Heartbeat hb;
    wire::ChannelProgress* p = hb.add_channels();
    p->set_channel("p");
    p->set_version(current);
    p->set_phase(wire::PHASE_COMMITTED);
    p->set_current_version(current);
    for (uint64_t v : kept) p->add_kept_versions(v);
    ASSERT_TRUE(agent->Heartbeat(hb).ok());
  };
  beat(3, {2, 3});
  auto tool = h.Connect(9, net::Role::kTool);
  auto refused = tool->Rollback("p", Version(1));
  ASSERT_EQ(refused.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("kept by none of the 1 live agents"), std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("v2 on 1, v3 on 1"), std::string::npos);
  auto reply = agent->Heartbeat({});
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->channels(0).current_version(), 3u) << "a refused rollback changed nothing";

  ASSERT_EQ(*tool->Rollback("p", Version(2)), Version(2));
  beat(2, {2, 3});
  ASSERT_TRUE(pub->Publish(Signed(TestManifest("p", 4, 4))).ok());
  beat(4, {2, 3, 4});
  // v3 was committed, then rolled back past (it reads ABORT): still a version to return to.
  auto back = tool->Rollback("p", Version(3));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  reply = agent->Heartbeat({});
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->channels(0).current_version(), 3u);
}

TEST(Coordinator, AttestationsAreJudgedAgainstTheVersionsDigest) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  auto pub = h.Connect(7, net::Role::kPublisher);
  const Manifest v1 = TestManifest("p", 1, 1);
  ASSERT_TRUE(pub->Publish(Signed(v1)).ok());
  const std::string good = ExpectedAttestationBytes(v1);
  std::string bad = good;
  bad[3] ^= 1;
  auto agent = h.Connect(10, net::Role::kAgent);
  ASSERT_TRUE(agent->Register(AgentRegistration(10, "p")).ok());
  auto attest = [&](uint64_t version, const std::string& digest) {
    wire::Heartbeat hb;
    wire::ChannelProgress* p = hb.add_channels();
    p->set_channel("p");
    p->set_version(1);
    p->set_phase(wire::PHASE_COMMITTED);
    p->set_current_version(1);
    p->mutable_attestation()->set_version(version);
    p->mutable_attestation()->set_digest(digest);
    // What a node says of the verdict is not taken.
    p->mutable_attestation()->set_verdict(wire::ATTESTATION_MATCH);
    EXPECT_TRUE(agent->Heartbeat(hb).ok());
    auto status = pub->GetStatus("p");
    EXPECT_TRUE(status.ok());
    const wire::NodeStatus* node = FindNode(*status, 10);
    EXPECT_NE(node, nullptr);
    EXPECT_EQ(status->channels(0).versions(0).attestation_digest(), good);
    return node == nullptr ? wire::ATTESTATION_UNCHECKED
                           : node->channels(0).attestation().verdict();
  };
  EXPECT_EQ(attest(1, good), wire::ATTESTATION_MATCH);
  EXPECT_EQ(attest(1, bad), wire::ATTESTATION_MISMATCH);
  EXPECT_EQ(attest(1, bad), wire::ATTESTATION_MISMATCH) << "repeated with every heartbeat";
  EXPECT_EQ(attest(1, good.substr(0, 8)), wire::ATTESTATION_MISMATCH) << "a malformed digest";
  EXPECT_EQ(attest(9, good), wire::ATTESTATION_UNKNOWN_VERSION);

  // A restarted coordinator derives the digests again from the manifests it logged.
  h.Stop();
  ASSERT_TRUE(h.Start().ok());
  pub = h.Connect(7, net::Role::kPublisher);
  agent = h.Connect(10, net::Role::kAgent);
  ASSERT_TRUE(agent->Register(AgentRegistration(10, "p")).ok());
  EXPECT_EQ(attest(1, good), wire::ATTESTATION_MATCH);
  EXPECT_EQ(attest(1, bad), wire::ATTESTATION_MISMATCH);
}

TEST(Coordinator, DecisionsComeFromTheDecider) {
  CoordinatorOptions options;
  options.decider = std::make_shared<ManualDecider>();
  CoordinatorHarness h(options);
  ASSERT_TRUE(h.Start().ok());
  auto pub = h.Connect(7, net::Role::kPublisher);
  ASSERT_TRUE(pub->Publish(Signed(TestManifest("p", 1, 1))).ok());
  auto agent = h.Connect(10, net::Role::kAgent);
  ASSERT_TRUE(agent->Register(AgentRegistration(10, "p")).ok());
  auto reply = agent->Heartbeat({});
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->channels(0).decision(), wire::DECISION_NONE);
  EXPECT_EQ(reply->channels(0).current_version(), 0u);
  wire::Heartbeat prepared;
  prepared.add_channels()->set_channel("p");
  prepared.mutable_channels(0)->set_version(1);
  prepared.mutable_channels(0)->set_phase(wire::PHASE_PREPARED);
  ASSERT_TRUE(agent->Heartbeat(prepared).ok());
  reply = agent->Heartbeat(prepared);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->channels(0).decision(), wire::DECISION_COMMIT);
  EXPECT_EQ(reply->channels(0).current_version(), 1u);
  // The decision is in the log: a restarted coordinator still has it.
  agent.reset();
  pub.reset();
  h.Stop();
  ASSERT_TRUE(h.Start().ok());
  auto tool = h.Connect(9, net::Role::kTool);
  auto status = tool->GetStatus("p");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->channels(0).versions(0).decision(), wire::DECISION_COMMIT);
  EXPECT_EQ(status->channels(0).current_version(), 1u);
}

// A node that sends Leave is gone at once: out of its peers' lists and the commit policy's
// count, and out of status unless include_left asks for it; it is not counted dead.
TEST(Coordinator, LeaveMarksANodeLeftNotDeadAndDropsItAtOnce) {
  CoordinatorOptions options;
  options.decider = std::make_shared<ManualDecider>();
  CoordinatorHarness h(options);
  ASSERT_TRUE(h.Start().ok());
  auto pub = h.Connect(7, net::Role::kPublisher);
  ASSERT_TRUE(pub->Publish(Signed(TestManifest("p", 1, 1))).ok());
  auto a = h.Connect(10, net::Role::kAgent);
  auto b = h.Connect(11, net::Role::kAgent);
  ASSERT_TRUE(a->Register(AgentRegistration(10, "p")).ok());
  ASSERT_TRUE(b->Register(AgentRegistration(11, "p")).ok());
  h.coordinator().Sweep();
  auto reply = a->Heartbeat({});
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(PeerIds(*reply), (std::set<uint64_t>{11}));

  // a prepared v1; b has not: the policy waits for b.
  wire::Heartbeat prepared;
  prepared.add_channels()->set_channel("p");
  prepared.mutable_channels(0)->set_version(1);
  prepared.mutable_channels(0)->set_phase(wire::PHASE_PREPARED);
  reply = a->Heartbeat(prepared);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->channels(0).decision(), wire::DECISION_NONE);

  // b leaves, well within its heartbeat timeout: v1 commits now, a's list loses b.
  ASSERT_TRUE(b->Leave().ok());
  reply = a->Heartbeat(prepared);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->channels(0).decision(), wire::DECISION_COMMIT);
  EXPECT_TRUE(PeerIds(*reply).empty());

  auto status = a->GetStatus();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(FindNode(*status, 11), nullptr);
  ASSERT_NE(FindNode(*status, 10), nullptr);
  EXPECT_FALSE(FindNode(*status, 10)->left());
  status = a->GetStatus("", /*include_left=*/true);
  ASSERT_TRUE(status.ok());
  const wire::NodeStatus* left = FindNode(*status, 11);
  ASSERT_NE(left, nullptr);
  EXPECT_TRUE(left->left());
  EXPECT_FALSE(left->alive());
  EXPECT_EQ(h.coordinator().counters().nodes_left.load(), 1u);
  // Past the heartbeat timeout it is still left, never dead.
  h.Advance(std::chrono::seconds(5));
  ASSERT_TRUE(a->Heartbeat({}).ok());
  h.coordinator().Sweep();
  EXPECT_EQ(h.coordinator().counters().members_dead.load(), 0u);
  EXPECT_EQ(h.coordinator().counters().nodes_died.load(), 0u);
  status = a->GetStatus("", true);
  ASSERT_TRUE(status.ok());
  ASSERT_NE(FindNode(*status, 11), nullptr);
  EXPECT_TRUE(FindNode(*status, 11)->left());

  // Registering again brings it back as a member.
  b.reset();
  b = h.Connect(11, net::Role::kAgent);
  ASSERT_TRUE(b->Register(AgentRegistration(11, "p")).ok());
  status = a->GetStatus();
  ASSERT_TRUE(status.ok());
  ASSERT_NE(FindNode(*status, 11), nullptr);
  EXPECT_TRUE(FindNode(*status, 11)->alive());
  EXPECT_FALSE(FindNode(*status, 11)->left());

  // A node that never sends Leave (an older one) dies at the timeout as before.
  h.Advance(std::chrono::seconds(5));
  ASSERT_TRUE(a->Heartbeat({}).ok());
  h.coordinator().Sweep();
  status = a->GetStatus("", true);
  ASSERT_TRUE(status.ok());
  ASSERT_NE(FindNode(*status, 11), nullptr);
  EXPECT_FALSE(FindNode(*status, 11)->alive());
  EXPECT_FALSE(FindNode(*status, 11)->left());
  EXPECT_EQ(h.coordinator().counters().members_dead.load(), 1u);
  // Leave from a node that never registered is refused.
  auto stranger = h.Connect(99, net::Role::kAgent);
  EXPECT_EQ(stranger->Leave().code(), Code::kFailedPrecondition);
}

// One death changes the lists of the dead node's neighbours, and nobody else's: every other
// agent keeps every connection it has.
TEST(Coordinator, ADeathChangesOnlyTheDeadNodesNeighboursLists) {
  CoordinatorOptions options;
  options.degree = 4;  // 30 nodes at degree 4: far from a complete graph
  CoordinatorHarness h(options);
  ASSERT_TRUE(h.Start().ok());
  std::map<uint64_t, std::unique_ptr<CoordinatorClient>> nodes =
      RegisterAgents(h, 100, 30, /*racks=*/true);
  h.coordinator().Sweep();
  auto lists = [&](uint64_t skip) {
    std::map<uint64_t, std::set<uint64_t>> out;
    for (auto& [id, client] : nodes) {
      if (id == skip) continue;
      auto reply = client->Heartbeat({});
      EXPECT_TRUE(reply.ok());
      if (reply.ok()) out[id] = PeerIds(*reply);
    }
    return out;
  };
  const std::map<uint64_t, std::set<uint64_t>> before = lists(0);
  constexpr uint64_t kDead = 117;
  const std::set<uint64_t> neighbours = before.at(kDead);
  ASSERT_FALSE(neighbours.empty());
  // Registrations spread over several sweeps (a slow machine) splice joiners in: not counted.
  const uint64_t dropped_before = h.coordinator().counters().peer_edges_dropped.load();

  h.Advance(std::chrono::seconds(2));
  lists(kDead);
  h.Advance(std::chrono::milliseconds(1500));  // kDead silent for 3.5 s > 3 s
  h.coordinator().Sweep();
  const std::map<uint64_t, std::set<uint64_t>> after = lists(kDead);

  size_t changed = 0;
  for (const auto& [id, peers] : after) {
    if (peers == before.at(id)) continue;
    ++changed;
    EXPECT_FALSE(peers.contains(kDead));
    if (!neighbours.contains(id)) {
      // Only a splice reaches past the neighbours, and keeps every old peer but one.
      std::vector<uint64_t> lost;
      std::set_difference(before.at(id).begin(), before.at(id).end(), peers.begin(), peers.end(),
                          std::back_inserter(lost));
      EXPECT_LE(lost.size(), 1u) << "node " << id;
    }
  }
  // The dead node's neighbours, plus the two ends of at most one spliced edge.
  EXPECT_LE(changed, neighbours.size() + 2);
  EXPECT_LE(h.coordinator().counters().peer_edges_dropped.load() - dropped_before, 1u);
}

// Agents report the peers they banned for bad data in their heartbeats: the coordinator keeps
// each pair apart and fills the banner from elsewhere; once two live nodes ban the same node it
// is quarantined, out of every list.
TEST(Coordinator, BannedPeersAreKeptApartAndQuarantinedByTwoReports) {
  CoordinatorOptions options;
  options.degree = 4;
  CoordinatorHarness h(options);
  ASSERT_TRUE(h.Start().ok());
  std::map<uint64_t, std::unique_ptr<CoordinatorClient>> nodes = RegisterAgents(h, 100, 30);
  h.coordinator().Sweep();
  // Every heartbeat carries the node's whole ban list, as an agent's does.
  constexpr uint64_t kBad = 117;
  std::set<uint64_t> banning;
  auto peers_of = [&](uint64_t id) {
    wire::Heartbeat hb;
    if (banning.contains(id)) hb.add_banned_peers(kBad);
    auto reply = nodes[id]->Heartbeat(hb);
    EXPECT_TRUE(reply.ok());
    return reply.ok() ? PeerIds(*reply) : std::set<uint64_t>{};
  };
  const std::set<uint64_t> around = peers_of(kBad);
  ASSERT_GE(around.size(), 2u);
  const uint64_t first = *around.begin(), second = *std::next(around.begin());
  auto ban = [&](uint64_t reporter) {
    banning.insert(reporter);
    return peers_of(reporter);
  };
  ban(first);
  h.Advance(std::chrono::milliseconds(200));
  h.coordinator().Sweep();
  EXPECT_FALSE(peers_of(first).contains(kBad));
  EXPECT_EQ(peers_of(first).size(), 4u);
  EXPECT_FALSE(peers_of(kBad).empty()) << "one report does not quarantine";

  ban(second);
  h.Advance(std::chrono::milliseconds(200));
  h.coordinator().Sweep();
  EXPECT_TRUE(peers_of(kBad).empty());
  for (auto& [id, client] : nodes) {
    if (id != kBad) {
      EXPECT_FALSE(peers_of(id).contains(kBad)) << id;
    }
  }
}

// Agents that can read HTTP(S) origins get disjoint shares of an origin version's chunks, at most
// --origin-fetchers of them; the shares are drawn again when a fetcher dies.
TEST(Coordinator, OriginSharesAreDisjointCappedAndRedrawnOnDeath) {
  CoordinatorOptions options;
  options.origin_fetchers = 4;
  CoordinatorHarness h(options);
  ASSERT_TRUE(h.Start().ok());
  std::map<uint64_t, std::unique_ptr<CoordinatorClient>> nodes;
  for (uint64_t id = 100; id < 110; ++id) {
    nodes[id] = h.Connect(id, net::Role::kAgent);
    wire::Register r = AgentRegistration(id, "policy");
    r.set_origin_fetch(id != 101);  // one agent cannot read origins
    ASSERT_TRUE(nodes[id]->Register(r).ok());
  }
  h.coordinator().Sweep();
  auto shares = [&](const std::set<uint64_t>& skip) {
    std::map<uint64_t, std::pair<uint32_t, uint32_t>> out;
    for (auto& [id, client] : nodes) {
      if (skip.contains(id)) continue;
      auto reply = client->Heartbeat(wire::Heartbeat());
      EXPECT_TRUE(reply.ok());
      if (reply.ok() && reply->origin_stripes() != 0) {
        out[id] = {reply->origin_stripe(), reply->origin_stripes()};
      }
    }
    return out;
  };
  auto granted = shares({});
  ASSERT_EQ(granted.size(), 4u);
  EXPECT_FALSE(granted.contains(101));
  std::set<uint32_t> stripes;
  for (const auto& [id, share] : granted) {
    EXPECT_EQ(share.second, 4u);
    stripes.insert(share.first);
  }
  EXPECT_EQ(stripes, (std::set<uint32_t>{0, 1, 2, 3}));

  // A fetcher stops heartbeating: once it is dead, the shares are drawn among the live ones.
  const uint64_t gone = granted.begin()->first;
  for (int i = 0; i < 40; ++i) {
    h.Advance(std::chrono::milliseconds(200));
    shares({gone});
    h.coordinator().Sweep();
  }
  auto after = shares({gone});
  EXPECT_EQ(after.size(), 4u);
  EXPECT_FALSE(after.contains(gone));
  stripes.clear();
  for (const auto& [id, share] : after) stripes.insert(share.first);
  EXPECT_EQ(stripes, (std::set<uint32_t>{0, 1, 2, 3}));
}

// Shares are drawn per channel, and never for a tensor-subset agent (it would leave the chunks of
// its stripe it does not want unfetched).
TEST(Coordinator, OriginSharesArePerChannelAndSkipSubsetAgents) {
  CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  std::map<uint64_t, std::unique_ptr<CoordinatorClient>> nodes;
  auto add = [&](uint64_t id, const std::string& channel, bool subset) {
    nodes[id] = h.Connect(id, net::Role::kAgent);
    wire::Register r = AgentRegistration(id, channel);
    r.set_origin_fetch(true);
    if (subset) r.add_tensor_patterns("model.layers.0.*");
    ASSERT_TRUE(nodes[id]->Register(r).ok());
  };
  for (uint64_t id = 200; id < 204; ++id) add(id, "a", false);
  add(204, "a", true);
  add(300, "b", false);
  add(301, "b", false);
  h.coordinator().Sweep();
  std::map<uint64_t, std::pair<uint32_t, uint32_t>> granted;
  for (auto& [id, client] : nodes) {
    auto reply = client->Heartbeat(wire::Heartbeat());
    ASSERT_TRUE(reply.ok());
    granted[id] = {reply->origin_stripe(), reply->origin_stripes()};
  }
  for (uint64_t id = 200; id < 204; ++id) {
    EXPECT_EQ(granted[id], std::make_pair(uint32_t(id - 200), 4u)) << id;
  }
  EXPECT_EQ(granted[204].second, 0u) << "a subset agent has no share";
  EXPECT_EQ(granted[300], std::make_pair(0u, 2u));
  EXPECT_EQ(granted[301], std::make_pair(1u, 2u));
}

// A coordinator that starts again (or a standby that takes over) meets a fleet that already
// holds its connections. The nodes register again naming the peers they held, in any order and
// across sweeps; the coordinator tells them to keep their lists until every named node is back,
// then draws the graph they held, so no connection is dropped.
TEST(Coordinator, AFleetRegisteringWithANewCoordinatorKeepsItsPeers) {
  CoordinatorOptions options;
  options.degree = 4;
  CoordinatorHarness h(options);
  ASSERT_TRUE(h.Start().ok());
  constexpr uint64_t kFirst = 100, kNodes = 30;
  std::map<uint64_t, std::unique_ptr<CoordinatorClient>> nodes = RegisterAgents(h, kFirst, kNodes);
  h.coordinator().Sweep();
  std::map<uint64_t, std::set<uint64_t>> before;
  for (auto& [id, client] : nodes) {
    auto reply = client->Heartbeat({});
    ASSERT_TRUE(reply.ok());
    EXPECT_FALSE(reply->keep_peers()) << "a fresh fleet names no peers and never waits";
    before[id] = PeerIds(*reply);
  }

  h.Stop();
  ASSERT_TRUE(h.Start().ok());
  for (uint64_t id = kFirst + kNodes - 1; id >= kFirst; --id) {
    nodes[id] = h.Connect(id, net::Role::kAgent);
    wire::Register again = AgentRegistration(id, "policy");
    for (uint64_t peer : before[id]) again.add_held_peers(peer);
    ASSERT_TRUE(nodes[id]->Register(again).ok());
    h.coordinator().Sweep();
    if (id == kFirst) break;
    auto waiting = nodes[id]->Heartbeat({});
    ASSERT_TRUE(waiting.ok());
    EXPECT_TRUE(waiting->keep_peers()) << "node " << id << " answered before the fleet is back";
    EXPECT_EQ(waiting->peers_size(), 0);
  }
  h.Advance(std::chrono::milliseconds(200));
  h.coordinator().Sweep();
  for (auto& [id, client] : nodes) {
    auto reply = client->Heartbeat({});
    ASSERT_TRUE(reply.ok());
    EXPECT_FALSE(reply->keep_peers());
    EXPECT_EQ(PeerIds(*reply), before[id]) << "node " << id;
  }
  EXPECT_EQ(h.coordinator().counters().peer_edges_dropped.load(), 0u);
}

}  // namespace
}  // namespace weightcast::coord

namespace weightcast::coord {
namespace {

TEST(CoordinatorMetrics, PageCountsMembersVersionsAndRequestsByType) {
  testing::CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  metrics::Registry registry;
  ExportCoordinatorMetrics(h.coordinator(), registry);
  auto pub = h.Connect(7, net::Role::kPublisher);
  ASSERT_TRUE(pub->Publish(testing::Signed(testing::TestManifest("p", 1, 1))).ok());
  auto agent = h.Connect(10, net::Role::kAgent);
  ASSERT_TRUE(agent->Register(testing::AgentRegistration(10, "p")).ok());
  ASSERT_TRUE(agent->Heartbeat({}).ok());
  ASSERT_TRUE(agent->Heartbeat({}).ok());
  h.coordinator().Sweep();  // member counts are refreshed by sweeps
  const std::string page = registry.Render();
  EXPECT_NE(page.find("weightcast_coordinator_members_alive 1\n"), std::string::npos) << page;
  EXPECT_NE(page.find("weightcast_coordinator_versions_published_total 1\n"), std::string::npos);
  EXPECT_NE(page.find("weightcast_coordinator_heartbeats_total 2\n"), std::string::npos);
  EXPECT_NE(page.find("weightcast_coordinator_requests_total{type=\"heartbeat\"} 2\n"),
            std::string::npos);
  EXPECT_NE(page.find("weightcast_coordinator_requests_total{type=\"publish\"} 1\n"),
            std::string::npos);
  EXPECT_TRUE(registry.errors().empty());
  RemoveCoordinatorMetrics(registry);
  EXPECT_EQ(registry.Render().find("weightcast_coordinator"), std::string::npos);
}

}  // namespace
}  // namespace weightcast::coord

namespace weightcast::coord {
namespace {

TEST(Coordinator, StopClosesOpenConnectionsAndServeReturns) {
  testing::CoordinatorHarness h;
  ASSERT_TRUE(h.Start().ok());
  auto agent = h.Connect(10, net::Role::kAgent);
  ASSERT_TRUE(agent->Register(testing::AgentRegistration(10)).ok());
  h.Stop();  // joins Serve: it returned although the agent's connection was open
  auto after = agent->Heartbeat({});
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), Code::kUnavailable) << after.status().ToString();
  // A restarted coordinator takes the node back when it registers again.
  ASSERT_TRUE(h.Start().ok());
  agent = h.Connect(10, net::Role::kAgent);
  ASSERT_TRUE(agent->Register(testing::AgentRegistration(10)).ok());
  EXPECT_TRUE(agent->Heartbeat({}).ok());
}

}  // namespace
}  // namespace weightcast::coord

namespace weightcast::coord {
namespace {

// The peer lists a fleet of `n` agents gets from a fresh coordinator, through Handle directly.
std::map<uint64_t, std::vector<uint64_t>> ListsOf(uint64_t n, uint64_t seed) {
  weightcast::testing::TempDir dir;
  net::FakeClock clock;
  CoordinatorOptions options;
  options.state_dir = dir.path() / "state";
  options.secret = testing::kSecret;
  options.clock = &clock;
  options.seed = seed;
  options.log = [](std::string_view) {};
  auto c = Coordinator::Open(std::move(options));
  EXPECT_TRUE(c.ok());
  for (uint64_t id = 1; id <= n; ++id) {
    wire::Envelope e;
    *e.mutable_register_() = testing::AgentRegistration(id, "policy", id % 3 ? "a" : "b");
    EXPECT_FALSE(
        (*c)->Handle(id, {.node_id = PeerId(id), .role = net::Role::kAgent, .address = {}}, e)
            .has_error());
  }
  (*c)->Sweep();
  std::map<uint64_t, std::vector<uint64_t>> lists;
  for (uint64_t id = 1; id <= n; ++id) {
    wire::Envelope e;
    e.mutable_heartbeat();
    wire::Envelope reply =
        (*c)->Handle(id, {.node_id = PeerId(id), .role = net::Role::kAgent, .address = {}}, e);
    for (const wire::PeerEntry& p : reply.heartbeat_reply().peers()) {
      lists[id].push_back(p.node_id());
    }
  }
  return lists;
}

TEST(Coordinator, PeerListsAreAFunctionOfMembershipAndSeed) {
  const auto first = ListsOf(30, 7);
  EXPECT_EQ(first.size(), 30u);
  EXPECT_EQ(ListsOf(30, 7), first);
  EXPECT_NE(ListsOf(30, 8), first);
}

}  // namespace
}  // namespace weightcast::coord
