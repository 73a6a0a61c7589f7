// Certificate mode's flags (docs/security.md): what a connection's peer check refuses (a role
// its certificate does not hold, an id it is not bound to, a revoked certificate), and which
// node id a bound certificate gives.
#include <gtest/gtest.h>

#include "cli/node_flags.h"
#include "testing/temp_dir.h"
#include "trust/authority.h"
#include "util/file.h"

namespace weightcast::cli {
namespace {

class CertificateFlags : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ca_.WriteNew(dir_.path() / "ca").ok());
    flags_.ca_file = (dir_.path() / "ca" / trust::kCaCertificateFile).string();
  }

  // Writes NAME.pem and NAME.key for `roles` (and a bound `node_id`); returns the DER.
  std::vector<uint8_t> Issue(const std::string& name, const std::string& roles,
                             std::optional<uint64_t> node_id = {}) {
    Result<trust::IssuedCertificate> issued =
        ca_.Issue({.name = name, .roles = *trust::ParseRolesFlag(roles), .node_id = node_id});
    EXPECT_TRUE(issued.ok());
    const auto cert = dir_.path() / (name + ".pem");
    EXPECT_TRUE(WriteFileAtomic(cert, issued->certificate_pem).ok());
    EXPECT_TRUE(WritePrivateFile(dir_.path() / (name + ".key"), issued->key_pem, true).ok());
    auto identity = trust::SigningIdentity::Load(cert, dir_.path() / (name + ".key"));
    EXPECT_TRUE(identity.ok());
    const auto der = (*identity)->certificate_der();
    return {der.begin(), der.end()};
  }

  NodeFlags As(const std::string& name) {
    NodeFlags f = flags_;
    f.cert_file = (dir_.path() / (name + ".pem")).string();
    f.key_file = (dir_.path() / (name + ".key")).string();
    return f;
  }

  testing::TempDir dir_;
  trust::Authority ca_ = *trust::Authority::Create("flags test CA");
  NodeFlags flags_;
};

TEST_F(CertificateFlags, APeerMayClaimOnlyItsCertificatesRoleAndId) {
  Issue("self", "agent");
  auto anchor = LoadTrustAnchor(flags_, nullptr);
  ASSERT_TRUE(anchor.ok()) << anchor.status().ToString();
  Result<net::TlsOptions> tls = CertificateModeTls(As("self"), *anchor);
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  ASSERT_TRUE(tls->enabled && tls->check_peer);
  auto check = [&](const std::vector<uint8_t>& der, uint64_t id, net::Role role) {
    return tls->check_peer(der, net::PeerInfo{.node_id = PeerId(id), .role = role, .address = ""});
  };
  const auto agent = Issue("agent-7", "agent", 7);
  const auto trainer = Issue("trainer", "publisher:policy");
  const auto coordinator = Issue("coordinator", "coordinator");
  EXPECT_TRUE(check(agent, 7, net::Role::kAgent).ok());
  EXPECT_TRUE(check(agent, 7, net::Role::kTool).ok());
  EXPECT_TRUE(check(trainer, 99, net::Role::kPublisher).ok());
  EXPECT_TRUE(check(coordinator, 1, net::Role::kCoordinator).ok());

  Status as_publisher = check(agent, 7, net::Role::kPublisher);
  EXPECT_EQ(as_publisher.code(), Code::kUnauthenticated);
  EXPECT_NE(as_publisher.message().find("does not hold the publisher role"), std::string::npos);
  EXPECT_EQ(check(trainer, 99, net::Role::kCoordinator).code(), Code::kUnauthenticated);
  EXPECT_EQ(check(agent, 7, net::Role::kCoordinator).code(), Code::kUnauthenticated);
  Status other_id = check(agent, 8, net::Role::kAgent);
  EXPECT_EQ(other_id.code(), Code::kUnauthenticated);
  EXPECT_NE(other_id.message().find("belongs to node 7, not to node 8"), std::string::npos);

  // Revoked after the transport was set up: refused at the next connection.
  ASSERT_TRUE(ca_.Revoke(*ReadFileToString(dir_.path() / "trainer.pem")).ok());
  ASSERT_TRUE(ca_.WriteCrl(dir_.path() / "ca").ok());
  std::this_thread::sleep_for(trust::TrustAnchor::kCrlRecheck + std::chrono::milliseconds(100));
  Status revoked = check(trainer, 99, net::Role::kPublisher);
  EXPECT_NE(revoked.message().find("revoked"), std::string::npos) << revoked.message();
}

TEST_F(CertificateFlags, ABoundCertificateGivesItsNodeIdAndRefusesAnother) {
  Issue("bound", "agent", 4242);
  Issue("free", "agent");
  EXPECT_EQ(*NodeIdOf(As("bound")), PeerId(4242));
  EXPECT_EQ(*NodeIdOf(As("free")), PeerId(0));
  NodeFlags other = As("bound");
  other.node_id = 17;
  EXPECT_EQ(NodeIdOf(other).status().code(), Code::kInvalidArgument);
  other.node_id = 4242;
  EXPECT_EQ(*NodeIdOf(other), PeerId(4242));
}

TEST_F(CertificateFlags, CertificateModeNeedsTheNodesOwnCertificate) {
  auto anchor = LoadTrustAnchor(flags_, nullptr);
  ASSERT_TRUE(anchor.ok());
  Result<net::TlsOptions> tls = CertificateModeTls(flags_, *anchor);
  EXPECT_EQ(tls.status().code(), Code::kInvalidArgument);
  EXPECT_NE(tls.status().message().find("give --cert and --key"), std::string::npos);
  NodeFlags no_ca;
  no_ca.crl_file = "crl.pem";
  EXPECT_EQ(LoadTrustAnchor(no_ca, nullptr).status().code(), Code::kInvalidArgument);
  std::string warned;
  EXPECT_EQ(*LoadTrustAnchor(NodeFlags{}, [&](std::string_view w) { warned = w; }), nullptr);
  EXPECT_NE(warned.find("development mode"), std::string::npos);
}

}  // namespace
}  // namespace weightcast::cli
