// A certified coordinator's version log (docs/security.md, "Decisions"): every decision it
// records carries the coordinator's signed statement with the record's sequence, and a log whose
// decisions were changed, stripped, signed by another role or moved to another record does not
// open.
#include <gtest/gtest.h>

#include "coord/version_log.h"
#include "coord_test_util.h"
#include "trust/decision_statement.h"
#include "trust/signed_manifest.h"
#include "unit/trust/trust_test_util.h"

namespace weightcast::coord {
namespace {

using testing::kSecret;
using testing::TestManifest;

// The log's records and manifests in memory, shared by the logs opened on it.
struct MemoryState {
  std::vector<std::string> records;
  std::map<std::pair<std::string, uint64_t>, std::string> manifests;
};

class MemoryLogStore final : public LogStore {
 public:
  explicit MemoryLogStore(MemoryState& state) : state_(state) {}
  Result<Loaded> Load() override { return Loaded{state_.records, 0}; }
  Status Append(uint64_t sequence, std::string_view record) override {
    if (sequence != state_.records.size() + 1) return Internal("out of sequence");
    state_.records.emplace_back(record);
    return Status::Ok();
  }
  Status PutManifest(std::string_view channel, uint64_t version,
                     std::span<const uint8_t> bytes) override {
    state_.manifests[{std::string(channel), version}] = std::string(bytes.begin(), bytes.end());
    return Status::Ok();
  }
  Result<std::string> GetManifest(std::string_view channel, uint64_t version) override {
    auto it = state_.manifests.find({std::string(channel), version});
    if (it == state_.manifests.end()) return NotFound("no manifest");
    return it->second;
  }
  std::string Health() const override { return ""; }
  std::string Describe() const override { return "memory"; }

 private:
  MemoryState& state_;
};

class SignedDecisions : public ::testing::Test {
 protected:
  Result<std::unique_ptr<VersionLog>> Open() {
    return VersionLog::Open(std::make_unique<MemoryLogStore>(state_), kSecret, anchor_);
  }

  // v1 committed, v2 aborted, v3 published undecided.
  void RecordThreeVersions(VersionLog& log) {
    auto trainer = weightcast::testing::Issue(ca_, "trainer", "publisher:p");
    for (uint64_t v = 1; v <= 3; ++v) {
      auto verified =
          log.VerifyPublish(*SignManifest(TestManifest("p", v, v), {kSecret, trainer.get()}));
      ASSERT_TRUE(verified.ok()) << verified.status().ToString();
      ASSERT_TRUE(log.RecordPublish(*verified, PeerId(7), 0, wire::DECISION_NONE, "").ok());
    }
    ASSERT_TRUE(log.RecordDecision("p", 1, wire::DECISION_COMMIT, "").ok());
    ASSERT_TRUE(log.RecordDecision("p", 2, wire::DECISION_ABORT, "node 4 failed").ok());
  }

  state::LogRecord Record(size_t sequence) const {
    state::LogRecord record;
    EXPECT_TRUE(record.ParseFromString(state_.records.at(sequence - 1)));
    return record;
  }
  void Replace(size_t sequence, const state::LogRecord& record) {
    state_.records.at(sequence - 1) = record.SerializeAsString();
  }

  trust::Authority ca_ = weightcast::testing::NewAuthority();
  std::shared_ptr<const trust::TrustAnchor> anchor_ = weightcast::testing::AnchorOf(ca_);
  std::shared_ptr<const trust::SigningIdentity> coordinator_ =
      weightcast::testing::Issue(ca_, "coordinator", "coordinator");
  MemoryState state_;
};

TEST_F(SignedDecisions, EachDecisionIsLoggedWithTheCoordinatorsStatementAndReplays) {
  {
    auto log = Open();
    ASSERT_TRUE(log.ok());
    (*log)->set_decision_signer(coordinator_);
    RecordThreeVersions(**log);
    EXPECT_TRUE((*log)->channel("p")->newest_decision.empty());  // v3 is undecided
    ASSERT_TRUE((*log)->RecordDecision("p", 3, wire::DECISION_COMMIT, "").ok());
    ASSERT_TRUE((*log)->RecordRollback("p", 1).ok());
  }
  ASSERT_EQ(state_.records.size(), 7u);  // 3 published, 3 decisions, 1 rollback
  for (size_t sequence : {4, 5, 6, 7}) {
    const state::LogRecord record = Record(sequence);
    auto checked = trust::VerifyDecision(
        std::span(reinterpret_cast<const uint8_t*>(record.signed_decision().data()),
                  record.signed_decision().size()),
        *anchor_);
    ASSERT_TRUE(checked.ok()) << sequence << ": " << checked.status().ToString();
    EXPECT_EQ(checked->decision.sequence, sequence);
    EXPECT_EQ(checked->signer.name, "coordinator");
  }
  auto reopened = Open();
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  const ChannelState* p = (*reopened)->channel("p");
  EXPECT_EQ(p->current_version, 1u);
  // The newest's decision is the rollback's abort of v3: record 7.
  auto newest =
      trust::VerifyDecision(std::span(reinterpret_cast<const uint8_t*>(p->newest_decision.data()),
                                      p->newest_decision.size()),
                            *anchor_);
  ASSERT_TRUE(newest.ok());
  EXPECT_EQ(trust::DecisionName(newest->decision), "abort of p v3");
  EXPECT_EQ(newest->decision.reason, "rolled back to v1");
  EXPECT_EQ(newest->decision.sequence, 7u);
}

TEST_F(SignedDecisions, ACoordinatorWithACaButNoIdentityRecordsNoDecision) {
  auto log = Open();
  ASSERT_TRUE(log.ok());
  auto trainer = weightcast::testing::Issue(ca_, "trainer", "publisher:p");
  auto verified =
      (*log)->VerifyPublish(*SignManifest(TestManifest("p", 1, 1), {kSecret, trainer.get()}));
  ASSERT_TRUE((*log)->RecordPublish(*verified, PeerId(7), 0, wire::DECISION_NONE, "").ok());
  Status st = (*log)->RecordDecision("p", 1, wire::DECISION_COMMIT, "");
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_EQ(state_.records.size(), 1u);
}

TEST_F(SignedDecisions, ALogWithAChangedDecisionDoesNotOpen) {
  {
    auto log = Open();
    ASSERT_TRUE(log.ok());
    (*log)->set_decision_signer(coordinator_);
    RecordThreeVersions(**log);
  }
  const std::vector<std::string> good = state_.records;
  auto refused = [&](std::string_view why) {
    auto log = Open();
    EXPECT_EQ(log.status().code(), Code::kUnauthenticated) << log.status().ToString();
    EXPECT_NE(log.status().message().find(why), std::string::npos) << log.status().message();
    state_.records = good;
  };
  // The abort of v2 (record 5) turned into a commit, its statement kept.
  state::LogRecord flipped = Record(5);
  flipped.mutable_decision()->set_decision(wire::DECISION_COMMIT);
  Replace(5, flipped);
  refused("carries the coordinator's abort of p v2 of record 5 instead");
  // Its statement stripped.
  state::LogRecord stripped = Record(5);
  stripped.clear_signed_decision();
  Replace(5, stripped);
  refused("carries no coordinator's signature");
  // The commit of v1 (record 4) moved to record 5 as v1's decision again.
  state::LogRecord moved = Record(5);
  moved.mutable_decision()->set_version(1);
  moved.mutable_decision()->set_decision(wire::DECISION_COMMIT);
  moved.mutable_decision()->clear_abort_reason();
  moved.set_signed_decision(Record(4).signed_decision());
  Replace(5, moved);
  refused("of record 4 instead");
  // Re-signed by a node that is not a coordinator.
  auto agent = weightcast::testing::Issue(ca_, "sampler", "agent");
  state::LogRecord forged = Record(5);
  trust::DecisionStatement d;
  d.channel = "p";
  d.version = 2;
  d.sequence = 5;
  d.reason = "node 4 failed";
  auto bytes = trust::SignDecision(d, *agent);
  forged.set_signed_decision(std::string(bytes->begin(), bytes->end()));
  Replace(5, forged);
  refused("is not a coordinator");
  auto reopened = Open();
  EXPECT_TRUE(reopened.ok()) << reopened.status().ToString();
}

}  // namespace
}  // namespace weightcast::coord
