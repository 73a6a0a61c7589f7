// Certificate mode over UCX (docs/security.md, "UCX"): with no TLS, each node proves the key of
// its certificate in the handshake (node::KeyProofOf), with real certificates of a CA made here.
// Shared memory and TCP inside UCX; skipped in builds without UCX.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>

#include "net/ucx_transport.h"
#include "node/certificate_mode.h"
#include "unit/net/net_test_util.h"
#include "unit/trust/trust_test_util.h"

namespace weightcast::node {
namespace {

using namespace std::chrono_literals;
using net::testing::LogCapture;
using net::testing::TestOptions;

class CertifiedUcx : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!net::UcxTransport::Built()) GTEST_SKIP() << "built without UCX";
    ::setenv("UCX_TLS", "posix,cma,tcp", 1);
  }
  void TearDown() override { ::unsetenv("UCX_TLS"); }

  // Options of a node in certificate mode with `identity`, checking peers against `anchor`.
  net::Options Certified(uint64_t id, LogCapture* log, net::Role role,
                         const std::shared_ptr<const trust::SigningIdentity>& identity,
                         std::shared_ptr<const trust::TrustAnchor> anchor) {
    net::Options o = TestOptions(id, log, role);
    o.tls.enabled = true;
    o.tls.check_peer = PeerCheck(anchor);
    o.tls.key_proof = KeyProofOf(identity, anchor);
    return o;
  }
  std::unique_ptr<net::Transport> Make(net::Options options) {
    auto t = net::UcxTransport::Create(std::move(options));
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  }
  // Connects `client` to `server`; the client's result.
  Result<std::unique_ptr<net::Connection>> Dial(net::Transport& server, net::Transport& client,
                                                std::unique_ptr<net::Listener>& listener) {
    auto l = server.Listen("127.0.0.1:0");
    EXPECT_TRUE(l.ok());
    listener = std::move(*l);
    return client.Connect(listener->address(), 5s);
  }

  trust::Authority ca_ = weightcast::testing::NewAuthority();
  std::shared_ptr<const trust::TrustAnchor> anchor_ = weightcast::testing::AnchorOf(ca_);
};

TEST_F(CertifiedUcx, NodesProveTheirCertificatesKeysAndTalk) {
  LogCapture log;
  auto server = Make(Certified(2, &log, net::Role::kPublisher,
                               weightcast::testing::Issue(ca_, "trainer", "publisher:p"), anchor_));
  auto client = Make(Certified(1, &log, net::Role::kAgent,
                               weightcast::testing::Issue(ca_, "sampler", "agent"), anchor_));
  ASSERT_TRUE(server && client);
  std::unique_ptr<net::Listener> listener;
  auto c = Dial(*server, *client, listener);
  ASSERT_TRUE(c.ok()) << c.status().ToString() << log.All();
  auto s = listener->Accept(5s);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*c)->peer().transport, "ucx");
  EXPECT_EQ((*c)->peer().role, net::Role::kPublisher);
  ASSERT_TRUE((*c)->SendControl(net::testing::Pattern(100, 3)).ok());
  auto got = (*s)->Receive(5s);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->body.size(), 100u);
}

TEST_F(CertifiedUcx, NodesThatCannotProveACertificateOfTheCaAreRefused) {
  LogCapture log;
  auto server = Make(Certified(2, &log, net::Role::kAgent,
                               weightcast::testing::Issue(ca_, "a2", "agent"), anchor_));
  ASSERT_TRUE(server);
  auto refused = [&](net::Options client_options, std::string_view why) {
    auto client = Make(std::move(client_options));
    ASSERT_TRUE(client);
    std::unique_ptr<net::Listener> listener;
    auto c = Dial(*server, *client, listener);
    // Refused by the server (kAborted, its reason told) or by the client itself.
    EXPECT_TRUE(c.status().code() == Code::kAborted || c.status().code() == Code::kUnauthenticated)
        << c.status().ToString();
    EXPECT_NE(c.status().message().find(why), std::string::npos) << c.status().ToString();
    EXPECT_EQ(listener->Accept(300ms).status().code(), Code::kDeadlineExceeded);
    EXPECT_TRUE(log.Contains(std::string(why))) << why << "\n" << log.All();
  };
  // No certificate at all (development mode's handshake).
  refused(TestOptions(1, &log), "proved no certificate's key");
  // A certificate of another CA, with its own key (the intruder itself trusts the cluster's CA).
  trust::Authority other = weightcast::testing::NewAuthority("other");
  auto intruder = weightcast::testing::Issue(other, "intruder", "agent");
  refused(Certified(3, &log, net::Role::kAgent, intruder, anchor_), "intruder");
  // A certificate of the CA that does not hold the role its node claims.
  refused(Certified(4, &log, net::Role::kCoordinator,
                    weightcast::testing::Issue(ca_, "sampler", "agent"), anchor_),
          "coordinator");
  // The CA's certificate of another node, presented with the intruder's own key: the signature
  // is checked with the certificate's key.
  net::Options stolen = Certified(5, &log, net::Role::kAgent, intruder, anchor_);
  auto victim = weightcast::testing::Issue(ca_, "victim", "agent");
  auto forged = std::make_shared<net::KeyProof>(*stolen.tls.key_proof);
  forged->certificate_der.assign(victim->certificate_der().begin(),
                                 victim->certificate_der().end());
  stolen.tls.key_proof = forged;
  refused(std::move(stolen), "signature");
}

TEST_F(CertifiedUcx, AConnectionWhoseCertificateStopsPassingIsClosed) {
  LogCapture log;
  auto revoked = std::make_shared<std::atomic<bool>>(false);
  net::Options server_options = Certified(2, &log, net::Role::kAgent,
                                          weightcast::testing::Issue(ca_, "a2", "agent"), anchor_);
  server_options.tls.recheck_every = 200ms;
  server_options.tls.check_peer = [revoked, check = PeerCheck(anchor_)](
                                      std::span<const uint8_t> der,
                                      const net::PeerInfo& claimed) -> Status {
    if (revoked->load()) return Unauthenticated("certificate revoked (test)");
    return check(der, claimed);
  };
  auto server = Make(std::move(server_options));
  auto client = Make(Certified(1, &log, net::Role::kAgent,
                               weightcast::testing::Issue(ca_, "a1", "agent"), anchor_));
  ASSERT_TRUE(server && client);
  std::unique_ptr<net::Listener> listener;
  auto c = Dial(*server, *client, listener);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto s = listener->Accept(5s);
  ASSERT_TRUE(s.ok());
  revoked->store(true);
  auto ended = (*c)->Receive(5s);
  ASSERT_FALSE(ended.ok());
  EXPECT_NE(ended.status().code(), Code::kDeadlineExceeded) << ended.status().ToString();
  EXPECT_TRUE(log.Contains("no longer passes")) << log.All();
}

}  // namespace
}  // namespace weightcast::node
