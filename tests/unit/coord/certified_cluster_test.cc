// A coordinator with a CA (docs/security.md): it logs a version only when its publisher signed it
// for its channel, and takes a rollback only with a fresh operator's order, once.
#include <gtest/gtest.h>

#include "coord/coordinator.h"
#include "coord_test_util.h"
#include "trust/rollback_order.h"
#include "trust/signed_manifest.h"
#include "unit/trust/trust_test_util.h"

namespace weightcast::coord {
namespace {

using testing::AgentRegistration;
using testing::CoordinatorHarness;
using testing::kSecret;
using testing::TestManifest;

constexpr uint64_t kNow = 1'700'000'000'000;

class CertifiedCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions base;
    base.trust_anchor = weightcast::testing::AnchorOf(ca_);
    base.identity = weightcast::testing::Issue(ca_, "coordinator", "coordinator");
    harness_ = std::make_unique<CoordinatorHarness>(base);
    ASSERT_TRUE(harness_->Start().ok());
    harness_->SetUnixMs(kNow);
  }

  std::vector<uint8_t> SignedBy(const Manifest& m,
                                const std::shared_ptr<const trust::SigningIdentity>& who) {
    return *SignManifest(m, {kSecret, who.get()});
  }

  std::vector<uint8_t> Order(const std::shared_ptr<const trust::SigningIdentity>& who,
                             uint64_t from, uint64_t version, int64_t issued = kNow,
                             std::string nonce = "") {
    trust::RollbackOrder order{"p", from, version, issued,
                               nonce.empty() ? std::string(32, 'a') : std::move(nonce)};
    return *trust::SignRollbackOrder(order, *who);
  }

  trust::Authority ca_ = weightcast::testing::NewAuthority();
  std::unique_ptr<CoordinatorHarness> harness_;
};

TEST_F(CertifiedCluster, OnlyAPublisherOfTheChannelPublishes) {
  auto pub = harness_->Connect(7, net::Role::kPublisher);
  auto trainer = weightcast::testing::Issue(ca_, "trainer", "publisher:p");
  auto sampler = weightcast::testing::Issue(ca_, "sampler", "agent");
  EXPECT_EQ(pub->Publish(SignedBy(TestManifest("p", 1, 1), sampler)).status().code(),
            Code::kUnauthenticated);
  EXPECT_EQ(pub->Publish(SignManifestWithSecret(TestManifest("p", 1, 1), kSecret)).status().code(),
            Code::kUnauthenticated);
  ASSERT_TRUE(pub->Publish(SignedBy(TestManifest("p", 1, 1), trainer)).ok());
  auto status = pub->GetStatus("p");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->channels(0).versions_size(), 1);
}

TEST_F(CertifiedCluster, ARollbackNeedsAFreshOperatorsOrderTakenOnce) {
  auto pub = harness_->Connect(7, net::Role::kPublisher);
  auto trainer = weightcast::testing::Issue(ca_, "trainer", "publisher:p");
  for (uint64_t v = 1; v <= 3; ++v) {
    ASSERT_TRUE(pub->Publish(SignedBy(TestManifest("p", v, v), trainer)).ok());
  }
  auto tool = harness_->Connect(9, net::Role::kTool);
  auto refused = [&](Result<Version> r, std::string_view why) {
    EXPECT_EQ(r.status().code(), Code::kUnauthenticated) << r.status().ToString();
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  auto alice = weightcast::testing::Issue(ca_, "alice", "operator");
  auto sampler = weightcast::testing::Issue(ca_, "sampler", "agent");
  trust::Authority other = weightcast::testing::NewAuthority("other");
  auto mallory = weightcast::testing::Issue(other, "mallory", "operator");

  refused(tool->Rollback("p", Version(0)), "needs an order signed by an operator");
  refused(tool->Rollback("p", Version(2), Order(sampler, 3, 2)), "is not an operator");
  refused(tool->Rollback("p", Version(2), Order(mallory, 3, 2)), "'mallory'");
  refused(tool->Rollback("p", Version(1), Order(alice, 3, 2)), "is for p v2, not this rollback");
  refused(tool->Rollback("p", Version(0), Order(alice, 3, 2)), "is for p v2, not this rollback");
  refused(tool->Rollback("p", Version(1), Order(alice, 2, 1)),
          "takes p from v2, and v3 is current");
  refused(tool->Rollback("p", Version(2), Order(alice, 3, 2, kNow - 10 * 60 * 1000)),
          "issued 600 s from now");
  // An agent's own rollback (--hook-failure rollback) needs an order too.
  auto agent = harness_->Connect(10, net::Role::kAgent);
  ASSERT_TRUE(agent->Register(AgentRegistration(10, "p")).ok());
  refused(agent->Rollback("p", Version(0)), "needs an order signed by an operator");

  const std::vector<uint8_t> order = Order(alice, 3, 2);
  auto back = tool->Rollback("p", Version(2), order);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, Version(2));
  // Agents get the order with the rollback: without it they would not switch back.
  auto targets = agent->Heartbeat({});
  ASSERT_TRUE(targets.ok()) << targets.status().ToString();
  ASSERT_EQ(targets->channels_size(), 1);
  EXPECT_EQ(targets->channels(0).current_version(), 2u);
  EXPECT_EQ(targets->channels(0).rollback_order(), std::string(order.begin(), order.end()));
  // Replayed, the order no longer names the current version; an order reusing its nonce is
  // refused as well.
  refused(tool->Rollback("p", Version(2), order), "takes p from v3, and v2 is current now");
  refused(tool->Rollback("p", Version(1), Order(alice, 2, 1)), "taken already (a replay)");
  // A new order (its own nonce), from the version current now, is taken.
  back = tool->Rollback("p", Version(1), Order(alice, 2, 1, kNow, std::string(32, 'b')));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, Version(1));
  // A version committed after a rollback is current without an order.
  ASSERT_TRUE(pub->Publish(SignedBy(TestManifest("p", 4, 4), trainer)).ok());
  wire::Heartbeat prepared;
  prepared.add_channels()->set_channel("p");
  prepared.mutable_channels(0)->set_version(4);
  prepared.mutable_channels(0)->set_phase(wire::PHASE_PREPARED);
  ASSERT_TRUE(agent->Heartbeat(prepared).ok());
  targets = agent->Heartbeat(prepared);
  ASSERT_TRUE(targets.ok());
  EXPECT_EQ(targets->channels(0).current_version(), 4u);
  EXPECT_TRUE(targets->channels(0).rollback_order().empty());
}

}  // namespace
}  // namespace weightcast::coord
