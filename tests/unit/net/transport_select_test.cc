#include "net/transport_select.h"

#include <gtest/gtest.h>

#include "net_test_util.h"

namespace weightcast::net {
namespace {

using namespace std::chrono_literals;
using testing::TestOptions;

TEST(TransportSelect, ParsesTheThreeKinds) {
  EXPECT_EQ(*ParseTransportKind("auto"), TransportKind::kAuto);
  EXPECT_EQ(*ParseTransportKind("ucx"), TransportKind::kUcx);
  EXPECT_EQ(*ParseTransportKind("tcp"), TransportKind::kTcp);
  auto bad = ParseTransportKind("rdma");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("auto, ucx, tcp"), std::string::npos);
  EXPECT_EQ(TransportKindName(TransportKind::kUcx), "ucx");
}

TEST(TransportSelect, SplitsTheUcxOfferOffAnAddress) {
  auto plain = SplitTransportAddress("127.0.0.1:7000");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->first, "127.0.0.1:7000");
  EXPECT_EQ(plain->second, "");
  auto both = SplitTransportAddress("198.18.0.2:7000,ucx=7001");
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->first, "198.18.0.2:7000");
  EXPECT_EQ(both->second, "198.18.0.2:7001");
  auto v6 = SplitTransportAddress("[::1]:7000,ucx=0");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->second, "[::1]:0");
  for (const char* bad : {"1.2.3.4:7000,ucx=", "1.2.3.4:7000,ucx=x", "1.2.3.4:7000,ucx=70000",
                          "1.2.3.4:7000,ucx=7001 ", "nohost,ucx=7001"}) {
    EXPECT_EQ(SplitTransportAddress(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(TransportSelect, TcpKindIgnoresAUcxOffer) {
  auto server = CreateTransport(TestOptions(2, nullptr), {.kind = TransportKind::kTcp});
  auto client = CreateTransport(TestOptions(1, nullptr), {.kind = TransportKind::kTcp});
  ASSERT_TRUE(server.ok() && client.ok());
  EXPECT_EQ((*server)->capabilities().name, "tcp");
  auto l = (*server)->Listen("127.0.0.1:0");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ((*l)->address().find(",ucx="), std::string::npos);
  // An offer in the peer's address (as from a UCX node) is ignored by a TCP-only node.
  auto c = (*client)->Connect((*l)->address() + ",ucx=1", 5s);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->peer().transport, "tcp");
  ASSERT_EQ(StatsByTransport(**client).size(), 1u);
  EXPECT_EQ(StatsByTransport(**client)[0].first, "tcp");
}

TEST(TransportSelect, UcxKindNeedsUcxInTheBuild) {
  if (UcxTransport::Built()) GTEST_SKIP() << "this build has UCX";
  auto t = CreateTransport(TestOptions(1, nullptr), {.kind = TransportKind::kUcx});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kFailedPrecondition);
  auto fallback = CreateTransport(TestOptions(1, nullptr), {.kind = TransportKind::kAuto});
  ASSERT_TRUE(fallback.ok());
  EXPECT_EQ((*fallback)->capabilities().name, "tcp");
}

}  // namespace
}  // namespace weightcast::net
