// Operators' rollback orders: what an operator signs is what a coordinator reads, only an
// operator's certificate of the CA signs one, no byte of it can change, and an agent takes one
// only for the rollback it orders, from a version the agent has not gone past.
#include <gtest/gtest.h>

#include "trust/rollback_order.h"
#include "trust_test_util.h"

namespace weightcast::trust {
namespace {

using testing::AnchorOf;
using testing::Issue;
using testing::NewAuthority;

TEST(RollbackOrder, AnOperatorsOrderReadsBackAsSigned) {
  Authority ca = NewAuthority();
  auto alice = Issue(ca, "alice", "operator");
  Result<RollbackOrder> order = NewRollbackOrder("policy", 14, 12);
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(order->nonce.size(), 32u);
  EXPECT_NE(NewRollbackOrder("policy", 14, 12)->nonce, order->nonce);
  EXPECT_EQ(NewRollbackOrder("policy", 12, 12).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(NewRollbackOrder("policy", 12, 0).status().code(), Code::kInvalidArgument);
  Result<std::vector<uint8_t>> bytes = SignRollbackOrder(*order, *alice);
  ASSERT_TRUE(bytes.ok());
  Result<CheckedRollbackOrder> checked = VerifyRollbackOrder(*bytes, *AnchorOf(ca));
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_EQ(checked->order.channel, "policy");
  EXPECT_EQ(checked->order.from, 14u);
  EXPECT_EQ(checked->order.version, 12u);
  EXPECT_EQ(checked->order.issued_unix_ms, order->issued_unix_ms);
  EXPECT_EQ(checked->order.nonce, order->nonce);
  EXPECT_EQ(checked->signer.name, "alice");
}

TEST(RollbackOrder, OnlyAnOperatorOfTheCaSignsOneAndEveryByteIsCovered) {
  Authority ca = NewAuthority();
  auto anchor = AnchorOf(ca);
  RollbackOrder order = *NewRollbackOrder("policy", 3, 2);
  for (const char* roles : {"agent", "publisher:*", "coordinator"}) {
    auto who = Issue(ca, "not-an-operator", roles);
    Result<CheckedRollbackOrder> r = VerifyRollbackOrder(*SignRollbackOrder(order, *who), *anchor);
    EXPECT_EQ(r.status().code(), Code::kUnauthenticated) << roles;
  }
  Authority other = NewAuthority("other");
  EXPECT_EQ(VerifyRollbackOrder(*SignRollbackOrder(order, *Issue(other, "x", "operator")), *anchor)
                .status()
                .code(),
            Code::kUnauthenticated);
  std::vector<uint8_t> bytes = *SignRollbackOrder(order, *Issue(ca, "alice", "operator"));
  for (size_t at = 0; at < bytes.size(); ++at) {
    std::vector<uint8_t> tampered = bytes;
    tampered[at] ^= 0x01;
    EXPECT_FALSE(VerifyRollbackOrder(tampered, *anchor).ok()) << "byte " << at;
  }
  EXPECT_EQ(VerifyRollbackOrder(std::span(bytes).first(20), *anchor).status().code(),
            Code::kCorrupt);
}

TEST(RollbackOrder, AnAgentTakesOnlyTheRollbackOrderedFromAVersionItHasNotPassed) {
  Authority ca = NewAuthority();
  auto anchor = AnchorOf(ca);
  auto alice = Issue(ca, "alice", "operator");
  const std::vector<uint8_t> v5_to_v3 =
      *SignRollbackOrder(*NewRollbackOrder("policy", 5, 3), *alice);
  auto authorized = [&](std::span<const uint8_t> order, std::string_view channel, uint64_t target,
                        uint64_t current) {
    return RollbackAuthorized(order, *anchor, channel, target, current);
  };
  // Nodes on v5, and a node that was still on v4 when the operator ordered.
  ASSERT_TRUE(authorized(v5_to_v3, "policy", 3, 5).ok());
  EXPECT_EQ(authorized(v5_to_v3, "policy", 3, 4)->name, "alice");
  auto refused = [&](Result<CertificateInfo> r, std::string_view why) {
    EXPECT_EQ(r.status().code(), Code::kUnauthenticated) << r.status().ToString();
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  // No order (a coordinator's word alone), another target, another channel, and the same order
  // replayed to a node that has moved on to v6 since.
  refused(authorized({}, "policy", 3, 5), "without an operator's order");
  refused(authorized(v5_to_v3, "policy", 2, 5), "takes policy from v5 to v3");
  refused(authorized(v5_to_v3, "reward", 3, 5), "takes policy from v5 to v3");
  refused(authorized(v5_to_v3, "policy", 3, 6), "takes policy from v5 to v3");
  // Signed by someone who is not an operator.
  const std::vector<uint8_t> by_agent =
      *SignRollbackOrder(*NewRollbackOrder("policy", 5, 3), *Issue(ca, "sampler", "agent"));
  refused(authorized(by_agent, "policy", 3, 5), "is not an operator");
}

}  // namespace
}  // namespace weightcast::trust
