// Coordinators' signed decisions: what a coordinator signs reads back as signed, only a
// coordinator's certificate of the CA signs one, no byte of it can change, and no other signed
// statement reads as one.
#include <gtest/gtest.h>

#include "trust/decision_statement.h"
#include "trust/rollback_order.h"
#include "trust_test_util.h"

namespace weightcast::trust {
namespace {

using testing::AnchorOf;
using testing::Issue;
using testing::NewAuthority;

DecisionStatement Commit() {
  DecisionStatement d;
  d.channel = "policy";
  d.version = 7;
  for (size_t i = 0; i < d.root.size(); ++i) d.root[i] = static_cast<uint8_t>(i * 7);
  d.commit = true;
  d.sequence = 41;
  return d;
}

std::span<const uint8_t> Bytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

TEST(DecisionStatement, ACoordinatorsDecisionReadsBackAsSigned) {
  Authority ca = NewAuthority();
  auto coordinator = Issue(ca, "coordinator-a", "coordinator");
  DecisionStatement abort = Commit();
  abort.commit = false;
  abort.reason = "node 12 failed its hook";
  for (const DecisionStatement& d : {Commit(), abort}) {
    Result<std::vector<uint8_t>> bytes = SignDecision(d, *coordinator);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    Result<CheckedDecision> checked = VerifyDecision(*bytes, *AnchorOf(ca));
    ASSERT_TRUE(checked.ok()) << checked.status().ToString();
    EXPECT_EQ(checked->decision, d);
    EXPECT_EQ(checked->signer.name, "coordinator-a");
  }
  EXPECT_EQ(DecisionName(abort), "abort of policy v7");
}

TEST(DecisionStatement, AReasonIsSignedAsOneBoundedLine) {
  Authority ca = NewAuthority();
  auto coordinator = Issue(ca, "coordinator", "coordinator");
  DecisionStatement d = Commit();
  d.commit = false;
  d.reason = "first line\nsecond line" + std::string(2000, 'x');
  Result<CheckedDecision> checked = VerifyDecision(*SignDecision(d, *coordinator), *AnchorOf(ca));
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_EQ(checked->decision.reason, DecisionReason(d.reason));
  EXPECT_EQ(checked->decision.reason.size(), kMaxDecisionReason);
  EXPECT_TRUE(checked->decision.reason.starts_with("first line second line"));
}

TEST(DecisionStatement, OnlyACoordinatorOfTheCaSignsOneAndEveryByteIsCovered) {
  Authority ca = NewAuthority();
  auto anchor = AnchorOf(ca);
  for (const char* roles : {"agent", "publisher:*", "operator"}) {
    Result<CheckedDecision> r =
        VerifyDecision(*SignDecision(Commit(), *Issue(ca, "n", roles)), *anchor);
    EXPECT_EQ(r.status().code(), Code::kUnauthenticated) << roles;
    EXPECT_NE(r.status().message().find("is not a coordinator"), std::string::npos) << roles;
  }
  Authority other = NewAuthority("other");
  EXPECT_EQ(VerifyDecision(*SignDecision(Commit(), *Issue(other, "x", "coordinator")), *anchor)
                .status()
                .code(),
            Code::kUnauthenticated);
  std::vector<uint8_t> bytes = *SignDecision(Commit(), *Issue(ca, "coordinator", "coordinator"));
  for (size_t at = 0; at < bytes.size(); ++at) {
    std::vector<uint8_t> tampered = bytes;
    tampered[at] ^= 0x01;
    EXPECT_FALSE(VerifyDecision(tampered, *anchor).ok()) << "byte " << at;
  }
  EXPECT_EQ(VerifyDecision(std::span(bytes).first(20), *anchor).status().code(), Code::kCorrupt);
}

TEST(DecisionStatement, AnotherSignedStatementIsNotADecision) {
  Authority ca = NewAuthority();
  auto both = Issue(ca, "both", "operator,coordinator");
  std::vector<uint8_t> order = *SignRollbackOrder(*NewRollbackOrder("policy", 3, 2), *both);
  EXPECT_EQ(VerifyDecision(order, *AnchorOf(ca)).status().code(), Code::kCorrupt);
  std::vector<uint8_t> decision = *SignDecision(Commit(), *both);
  EXPECT_EQ(VerifyRollbackOrder(decision, *AnchorOf(ca)).status().code(), Code::kCorrupt);
}

TEST(DecisionStatement, AnAgentTakesOnlyTheDecisionItIsGivenAndNoneOlderThanOneItTook) {
  Authority ca = NewAuthority();
  auto anchor = AnchorOf(ca);
  auto coordinator = Issue(ca, "coordinator", "coordinator");
  const DecisionStatement commit = Commit();  // policy v7, record 41
  const std::vector<uint8_t> bytes = *SignDecision(commit, *coordinator);
  const Digest staged = commit.root;
  Result<CheckedDecision> taken =
      DecisionAuthorized(bytes, *anchor, "policy", 7, true, &staged, 40);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(taken->decision, commit);
  EXPECT_EQ(taken->signer.name, "coordinator");
  EXPECT_TRUE(DecisionAuthorized(bytes, *anchor, "policy", 7, true, nullptr, 41).ok());

  auto refused = [&](const Result<CheckedDecision>& r, std::string_view why) {
    EXPECT_EQ(r.status().code(), Code::kUnauthenticated) << r.status().ToString();
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  refused(DecisionAuthorized({}, *anchor, "policy", 7, true, nullptr, 0),
          "without the coordinator's signature");
  refused(DecisionAuthorized(bytes, *anchor, "policy", 8, true, nullptr, 0),
          "the signed statement is the commit of policy v7");
  refused(DecisionAuthorized(bytes, *anchor, "other", 7, true, nullptr, 0), "commit of policy v7");
  refused(DecisionAuthorized(bytes, *anchor, "policy", 7, false, nullptr, 0),
          "commit of policy v7");
  Digest other_root = staged;
  other_root[0] ^= 1;
  refused(DecisionAuthorized(bytes, *anchor, "policy", 7, true, &other_root, 0),
          "other bytes than the manifest staged");
  refused(DecisionAuthorized(bytes, *anchor, "policy", 7, true, &staged, 42), "a replay");
  refused(DecisionAuthorized(*SignDecision(commit, *Issue(ca, "sampler", "agent")), *anchor,
                             "policy", 7, true, nullptr, 0),
          "is not a coordinator");
}

TEST(DecisionStatement, ABodyIsReadExactly) {
  const std::string root(64, 'a');
  const std::string good = "weightcast decision v1\nchannel policy\nversion 3\nroot " + root +
                           "\ndecision abort\nsequence 9\nreason \n";
  Result<DecisionStatement> d = ParseDecisionBody(Bytes(good));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->commit);
  EXPECT_EQ(d->sequence, 9u);
  EXPECT_EQ(d->reason, "");
  for (const std::string& bad : std::vector<std::string>{
           "weightcast decision v2\n",
           "weightcast decision v1\nchannel ../x\n",
           "weightcast decision v1\nchannel policy\nversion 0\n",
           "weightcast decision v1\nchannel policy\nversion 3\nroot abc\n",
           "weightcast decision v1\nchannel policy\nversion 3\nroot " + root + "\ndecision maybe\n",
           "weightcast decision v1\nchannel policy\nversion 3\nroot " + root +
               "\ndecision commit\nsequence -1\nreason \n",
           "weightcast decision v1\nchannel policy\nversion 3\nroot " + root +
               "\ndecision commit\nsequence 1\nreason a\nmore\n",
           "weightcast decision v1\nchannel policy\nversion 3\nroot " + root +
               "\ndecision commit\nsequence 1\nreason a",
           "weightcast decision v1\nchannel policy\nversion 3\nroot " + root +
               "\ndecision commit\nsequence 1\n",
       }) {
    EXPECT_EQ(ParseDecisionBody(Bytes(bad)).status().code(), Code::kCorrupt) << bad;
  }
}

}  // namespace
}  // namespace weightcast::trust
