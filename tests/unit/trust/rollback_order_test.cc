// Operators' rollback orders: what an operator signs is what a coordinator reads, only an
// operator's certificate of the CA signs one, and no byte of it can change.
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
  Result<RollbackOrder> order = NewRollbackOrder("policy", 12);
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(order->nonce.size(), 32u);
  EXPECT_NE(NewRollbackOrder("policy", 12)->nonce, order->nonce);
  Result<std::vector<uint8_t>> bytes = SignRollbackOrder(*order, *alice);
  ASSERT_TRUE(bytes.ok());
  Result<CheckedRollbackOrder> checked = VerifyRollbackOrder(*bytes, *AnchorOf(ca));
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_EQ(checked->order.channel, "policy");
  EXPECT_EQ(checked->order.version, 12u);
  EXPECT_EQ(checked->order.issued_unix_ms, order->issued_unix_ms);
  EXPECT_EQ(checked->order.nonce, order->nonce);
  EXPECT_EQ(checked->signer.name, "alice");
}

TEST(RollbackOrder, OnlyAnOperatorOfTheCaSignsOneAndEveryByteIsCovered) {
  Authority ca = NewAuthority();
  auto anchor = AnchorOf(ca);
  RollbackOrder order = *NewRollbackOrder("policy", 0);
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

}  // namespace
}  // namespace weightcast::trust
