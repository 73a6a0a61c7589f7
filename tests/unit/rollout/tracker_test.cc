#include "rollout/tracker.h"

#include <gtest/gtest.h>

#include <vector>

namespace weightcast::rollout {
namespace {

using std::chrono::seconds;

constexpr Time T(int s) { return Time(seconds(s)); }
PeerId P(uint64_t id) { return PeerId(id); }
Version Ver(uint64_t v) { return Version(v); }

TrackerOptions Opts(CommitPolicy policy, Duration deadline = seconds(60)) {
  TrackerOptions o;
  o.policy = policy;
  o.prepare_deadline = deadline;
  o.recovery_grace = seconds(3);
  return o;
}

CommitPolicy All() { return {PolicyKind::kAll, 1.0}; }
CommitPolicy Each() { return {PolicyKind::kEach, 1.0}; }
CommitPolicy Quorum(double f) { return {PolicyKind::kQuorum, f}; }

RolloutTracker Make(CommitPolicy policy, Duration deadline = seconds(60)) {
  auto t = RolloutTracker::Create(Opts(policy, deadline));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

// Persists (acknowledges) every action, as a synchronous owner does.
std::vector<TrackerAction> Ack(RolloutTracker& t, std::span<const TrackerAction> actions) {
  std::vector<TrackerAction> copy(actions.begin(), actions.end());
  for (const TrackerAction& a : copy) t.OnPersisted(a.seq);
  return copy;
}

std::vector<TrackerAction> Publish(RolloutTracker& t, Time now, Version v) {
  auto r = t.OnPublished(now, v);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return Ack(t, *r);
}

TEST(CommitPolicy, ParsesEveryForm) {
  EXPECT_EQ(*ParseCommitPolicy("all"), All());
  EXPECT_EQ(*ParseCommitPolicy("each"), Each());
  EXPECT_EQ(ParseCommitPolicy("quorum:0.8")->kind, PolicyKind::kQuorum);
  EXPECT_DOUBLE_EQ(ParseCommitPolicy("quorum:0.8")->fraction, 0.8);
  EXPECT_DOUBLE_EQ(ParseCommitPolicy("quorum:75%")->fraction, 0.75);
  EXPECT_DOUBLE_EQ(ParseCommitPolicy("quorum:1")->fraction, 1.0);
  EXPECT_EQ(FormatCommitPolicy(*ParseCommitPolicy("quorum:0.8")), "quorum:0.8");
  EXPECT_EQ(FormatCommitPolicy(Each()), "each");
}

TEST(CommitPolicy, RejectsGarbageWithTheInputInTheMessage) {
  for (const char* bad : {"", "any", "quorum", "quorum:", "quorum:0", "quorum:1.5", "quorum:-1",
                          "quorum:abc", "quorum: 0.5", "quorum:0x1", "quorum:inf", "ALL"}) {
    auto r = ParseCommitPolicy(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("\"") + bad + "\""), std::string::npos)
        << r.status().message();
  }
}

TEST(RolloutTracker, RejectsBadOptions) {
  EXPECT_FALSE(RolloutTracker::Create(Opts(Quorum(0))).ok());
  EXPECT_FALSE(RolloutTracker::Create(Opts(Quorum(1.01))).ok());
  EXPECT_FALSE(RolloutTracker::Create(Opts(All(), seconds(0))).ok());
}

TEST(RolloutTracker, AllCommitsOnlyWhenEveryLiveFollowerPrepared) {
  RolloutTracker t = Make(All());
  t.OnMemberJoined(T(0), P(1));
  t.OnMemberJoined(T(0), P(2));
  EXPECT_TRUE(Publish(t, T(1), Ver(1)).empty());
  EXPECT_EQ(t.target(), (Target{Ver(1), Decision::kNone, Ver(0), ""}));
  EXPECT_TRUE(t.OnProgress(T(2), P(1), Ver(1), Phase::kPrepared).empty());
  EXPECT_TRUE(t.OnProgress(T(2), P(2), Ver(1), Phase::kFetching).empty());
  auto a = Ack(t, t.OnProgress(T(3), P(2), Ver(1), Phase::kPrepared));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, TrackerActionKind::kPersistDecision);
  EXPECT_EQ(a[0].version, Ver(1));
  EXPECT_EQ(a[0].decision, Decision::kCommit);
  EXPECT_EQ(a[0].current, Ver(1));
  EXPECT_EQ(t.target(), (Target{Ver(1), Decision::kCommit, Ver(1), ""}));
  EXPECT_EQ(t.decision(Ver(1)), Decision::kCommit);
  EXPECT_FALSE(t.pending().has_value());
}

TEST(RolloutTracker, ASourceThatCannotServeThePendingVersionAbortsIt) {
  RolloutTracker t = Make(All());
  t.OnMemberJoined(T(0), P(1));
  EXPECT_TRUE(Publish(t, T(1), Ver(1)).empty());
  // About another version: nothing changes.
  EXPECT_TRUE(t.OnSourceFailed(T(2), Ver(7), "gone").empty());
  auto a = Ack(t, t.OnSourceFailed(T(3), Ver(1), "the origin changed"));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].decision, Decision::kAbort);
  EXPECT_EQ(a[0].reason, "the source cannot serve it: the origin changed");
  EXPECT_EQ(t.decision(Ver(1)), Decision::kAbort);
  EXPECT_FALSE(t.pending().has_value());
  // Once decided, a later report changes nothing.
  EXPECT_TRUE(t.OnSourceFailed(T(4), Ver(1), "again").empty());
}

TEST(RolloutTracker, DecisionIsInvisibleUntilPersisted) {
  RolloutTracker t = Make(All());
  t.OnMemberJoined(T(0), P(1));
  Publish(t, T(0), Ver(1));
  auto a = t.OnProgress(T(1), P(1), Ver(1), Phase::kPrepared);
  ASSERT_EQ(a.size(), 1u);
  uint64_t seq = a[0].seq;
  EXPECT_EQ(t.target().decision, Decision::kNone);
  EXPECT_EQ(t.target().current, Ver(0));
  EXPECT_EQ(t.unpersisted(), 1u);
  // The write failed: the owner does not acknowledge; the timer hands the record out again.
  auto again = t.OnTimer(T(2));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].seq, seq);
  t.OnPersisted(seq);
  EXPECT_EQ(t.target().decision, Decision::kCommit);
  EXPECT_EQ(t.unpersisted(), 0u);
  EXPECT_TRUE(t.OnTimer(T(3)).empty());
}

TEST(RolloutTracker, NoFollowersMeansNoCommitAndADeadlineAbort) {
  RolloutTracker t = Make(All(), seconds(10));
  Publish(t, T(0), Ver(1));
  EXPECT_TRUE(t.OnTimer(T(9)).empty());
  auto a = Ack(t, t.OnTimer(T(10)));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].decision, Decision::kAbort);
  EXPECT_NE(a[0].reason.find("deadline"), std::string::npos) << a[0].reason;
  EXPECT_EQ(t.target().abort_reason, a[0].reason);
  EXPECT_EQ(t.target().current, Ver(0));
}

TEST(RolloutTracker, DeadlineAbortNamesTheCounts) {
  RolloutTracker t = Make(All(), seconds(10));
  for (uint64_t i = 1; i <= 3; ++i) t.OnMemberJoined(T(0), P(i));
  Publish(t, T(0), Ver(1));
  t.OnProgress(T(1), P(1), Ver(1), Phase::kPrepared);
  t.OnProgress(T(1), P(2), Ver(1), Phase::kPrepared);
  auto a = Ack(t, t.OnTimer(T(11)));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].decision, Decision::kAbort);
  EXPECT_NE(a[0].reason.find("2 of 3"), std::string::npos) << a[0].reason;
  EXPECT_EQ(t.decision(Ver(1)), Decision::kAbort);
}

TEST(RolloutTracker, DeadMemberIsExcludedFromAll) {
  RolloutTracker t = Make(All());
  for (uint64_t i = 1; i <= 3; ++i) t.OnMemberJoined(T(0), P(i));
  Publish(t, T(0), Ver(1));
  t.OnProgress(T(1), P(1), Ver(1), Phase::kPrepared);
  t.OnProgress(T(1), P(2), Ver(1), Phase::kPrepared);
  EXPECT_EQ(t.pending()->needed, 3u);
  auto a = Ack(t, t.OnMemberDead(T(2), P(3)));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].decision, Decision::kCommit);
  EXPECT_NE(a[0].reason.find("2 of 2"), std::string::npos) << a[0].reason;
}

TEST(RolloutTracker, RejoinedMemberMustReportAgain) {
  RolloutTracker t = Make(All());
  t.OnMemberJoined(T(0), P(1));
  t.OnMemberJoined(T(0), P(2));
  Publish(t, T(0), Ver(1));
  t.OnProgress(T(1), P(1), Ver(1), Phase::kPrepared);
  // Node 1 restarts (registers again): its earlier PREPARED no longer counts.
  t.OnMemberJoined(T(2), P(1));
  EXPECT_TRUE(t.OnProgress(T(3), P(2), Ver(1), Phase::kPrepared).empty());
  EXPECT_EQ(t.pending()->prepared, 1u);
  EXPECT_EQ(Ack(t, t.OnProgress(T(4), P(1), Ver(1), Phase::kPrepared)).size(), 1u);
}

TEST(RolloutTracker, AllAbortsOnAFailedFollower) {
  RolloutTracker t = Make(All());
  t.OnMemberJoined(T(0), P(7));
  t.OnMemberJoined(T(0), P(3));
  Publish(t, T(0), Ver(1));
  auto a = Ack(t, t.OnProgress(T(1), P(7), Ver(1), Phase::kFailed, "disk full"));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].decision, Decision::kAbort);
  EXPECT_NE(a[0].reason.find("node 7: disk full"), std::string::npos) << a[0].reason;
  EXPECT_EQ(t.target().decision, Decision::kAbort);
  // A late PREPARED changes nothing: the decision is final.
  EXPECT_TRUE(t.OnProgress(T(2), P(3), Ver(1), Phase::kPrepared).empty());
  EXPECT_EQ(t.decision(Ver(1)), Decision::kAbort);
}

TEST(RolloutTracker, QuorumCommitsAtTheFraction) {
  RolloutTracker t = Make(Quorum(0.8));
  for (uint64_t i = 1; i <= 5; ++i) t.OnMemberJoined(T(0), P(i));
  Publish(t, T(0), Ver(1));
  EXPECT_EQ(t.pending()->needed, 4u);
  for (uint64_t i = 1; i <= 3; ++i) {
    EXPECT_TRUE(t.OnProgress(T(1), P(i), Ver(1), Phase::kPrepared).empty());
  }
  auto a = Ack(t, t.OnProgress(T(1), P(4), Ver(1), Phase::kPrepared));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].decision, Decision::kCommit);
  EXPECT_NE(a[0].reason.find("quorum:0.8"), std::string::npos) << a[0].reason;
}

TEST(RolloutTracker, QuorumToleratesFailuresUntilUnreachable) {
  RolloutTracker t = Make(Quorum(0.6));
  for (uint64_t i = 1; i <= 5; ++i) t.OnMemberJoined(T(0), P(i));
  Publish(t, T(0), Ver(1));
  EXPECT_EQ(t.pending()->needed, 3u);
  EXPECT_TRUE(t.OnProgress(T(1), P(1), Ver(1), Phase::kFailed, "bad").empty());
  EXPECT_TRUE(t.OnProgress(T(1), P(2), Ver(1), Phase::kFailed, "bad").empty());
  auto a = Ack(t, t.OnProgress(T(1), P(3), Ver(1), Phase::kFailed, "bad"));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].decision, Decision::kAbort);
  EXPECT_NE(a[0].reason.find("3 of 5 live followers failed"), std::string::npos) << a[0].reason;
}

TEST(RolloutTracker, EachCommitsAtPublication) {
  RolloutTracker t = Make(Each());
  auto a = Publish(t, T(0), Ver(1));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].decision, Decision::kCommit);
  EXPECT_EQ(t.target(), (Target{Ver(1), Decision::kCommit, Ver(1), ""}));
  a = Publish(t, T(1), Ver(2));
  EXPECT_EQ(t.target(), (Target{Ver(2), Decision::kCommit, Ver(2), ""}));
  // A failure never aborts under `each`: nodes that can, move on.
  EXPECT_TRUE(t.OnProgress(T(2), P(1), Ver(2), Phase::kFailed, "x").empty());
  EXPECT_FALSE(t.pending().has_value());
}

TEST(RolloutTracker, NewerPublicationSupersedesThePendingOne) {
  RolloutTracker t = Make(All());
  t.OnMemberJoined(T(0), P(1));
  Publish(t, T(0), Ver(1));
  auto a = Publish(t, T(1), Ver(3));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].version, Ver(1));
  EXPECT_EQ(a[0].decision, Decision::kAbort);
  EXPECT_NE(a[0].reason.find("superseded by version 3"), std::string::npos);
  EXPECT_EQ(t.target(), (Target{Ver(3), Decision::kNone, Ver(0), ""}));
  // Progress about the superseded version counts for nothing.
  EXPECT_TRUE(t.OnProgress(T(2), P(1), Ver(1), Phase::kPrepared).empty());
  EXPECT_EQ(Ack(t, t.OnProgress(T(2), P(1), Ver(3), Phase::kPrepared)).size(), 1u);
  EXPECT_EQ(t.target().current, Ver(3));
}

TEST(RolloutTracker, RefusesAPublicationThatIsNotNewer) {
  RolloutTracker t = Make(All());
  Publish(t, T(0), Ver(2));
  for (uint64_t v : {0, 1, 2}) {
    auto r = t.OnPublished(T(1), Ver(v));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
  EXPECT_EQ(t.target().version, Ver(2));
  EXPECT_EQ(t.unpersisted(), 0u);
}

// Versions 1, 2 and 3 each committed by the one member.
RolloutTracker ThreeCommitted(CommitPolicy policy) {
  RolloutTracker t = Make(policy);
  t.OnMemberJoined(T(0), P(1));
  for (uint64_t v = 1; v <= 3; ++v) {
    Publish(t, T(static_cast<int>(v)), Ver(v));
    Ack(t, t.OnProgress(T(static_cast<int>(v)), P(1), Ver(v), Phase::kPrepared));
    EXPECT_EQ(t.target().current, Ver(v));
  }
  return t;
}

TEST(RolloutTracker, RollbackToThePreviousCommittedVersion) {
  RolloutTracker t = ThreeCommitted(All());
  auto r = t.OnRollback(T(10), Ver(0), "cli");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto a = Ack(t, *r);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, TrackerActionKind::kPersistRollback);
  EXPECT_EQ(a[0].current, Ver(2));
  EXPECT_NE(a[0].reason.find("from version 3 to version 2 requested by cli"), std::string::npos)
      << a[0].reason;
  EXPECT_EQ(t.rolled_to(), Ver(2));
  EXPECT_EQ(t.target(), (Target{Ver(3), Decision::kCommit, Ver(2), ""}));
  // Again: to 1. Then forward to 3 by name.
  Ack(t, *t.OnRollback(T(11), Ver(0)));
  EXPECT_EQ(t.target().current, Ver(1));
  Ack(t, *t.OnRollback(T(12), Ver(3)));
  EXPECT_EQ(t.target().current, Ver(3));
}

TEST(RolloutTracker, RollbackSkipsAbortedVersionsAndAbortsThePendingOne) {
  RolloutTracker t = ThreeCommitted(All());
  Publish(t, T(20), Ver(4));
  Ack(t, t.OnProgress(T(21), P(1), Ver(4), Phase::kFailed, "bad"));
  ASSERT_EQ(t.decision(Ver(4)), Decision::kAbort);
  Publish(t, T(22), Ver(5));
  Ack(t, t.OnProgress(T(23), P(1), Ver(5), Phase::kPrepared));
  ASSERT_EQ(t.target().current, Ver(5));
  Publish(t, T(24), Ver(6));  // pending
  auto r = t.OnRollback(T(25), Ver(0));
  ASSERT_TRUE(r.ok());
  auto a = Ack(t, *r);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].version, Ver(6));
  EXPECT_EQ(a[0].decision, Decision::kAbort);
  EXPECT_EQ(a[1].current, Ver(3));  // 4 was aborted
  EXPECT_EQ(t.target(), (Target{Ver(6), Decision::kAbort, Ver(3), a[0].reason}));
}

TEST(RolloutTracker, RollbackRefusesWhatCannotBecomeCurrent) {
  RolloutTracker fresh = Make(All());
  EXPECT_EQ(fresh.OnRollback(T(0), Ver(0)).status().code(), Code::kFailedPrecondition);

  RolloutTracker t = ThreeCommitted(All());
  Publish(t, T(20), Ver(4));
  Ack(t, t.OnProgress(T(21), P(1), Ver(4), Phase::kFailed, "bad"));
  Publish(t, T(22), Ver(5));  // pending
  EXPECT_EQ(t.OnRollback(T(23), Ver(9)).status().code(), Code::kNotFound);
  EXPECT_EQ(t.OnRollback(T(23), Ver(4)).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(t.OnRollback(T(23), Ver(5)).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(t.OnRollback(T(23), Ver(3)).status().code(), Code::kFailedPrecondition);
  // Nothing changed: 5 is still pending, 3 still current.
  EXPECT_EQ(t.target(), (Target{Ver(5), Decision::kNone, Ver(3), ""}));
  EXPECT_EQ(t.unpersisted(), 0u);

  RolloutTracker one = Make(Each());
  Publish(one, T(0), Ver(1));
  auto r = one.OnRollback(T(1), Ver(0));
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("below the current version 1"), std::string::npos);
}

TEST(RolloutTracker, AdoptsAnExternalRollbackOfThePendingVersion) {
  RolloutTracker t = ThreeCommitted(All());
  Publish(t, T(20), Ver(4));
  t.OnMemberJoined(T(20), P(2));
  t.OnProgress(T(21), P(1), Ver(4), Phase::kPrepared);
  // A decision on its way to the disk when the owner's own rollback aborted 4 and moved the
  // fleet to 2: the owner's durable state wins, the stale record is dropped.
  auto a = t.OnProgress(T(21), P(2), Ver(4), Phase::kPrepared);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(a[0].decision, Decision::kCommit);
  ChannelSnapshot durable;
  durable.versions = {{Ver(1), Decision::kCommit, ""},
                      {Ver(2), Decision::kCommit, ""},
                      {Ver(3), Decision::kAbort, "rolled back"},
                      {Ver(4), Decision::kAbort, "rolled back"}};
  durable.current = Ver(2);
  EXPECT_TRUE(t.OnExternalChange(T(22), durable).empty());
  EXPECT_EQ(t.unpersisted(), 0u);
  EXPECT_FALSE(t.pending().has_value());
  EXPECT_EQ(t.target(), (Target{Ver(4), Decision::kAbort, Ver(2), "rolled back"}));
  // The next publication is decided normally on top of it.
  Publish(t, T(23), Ver(5));
  t.OnProgress(T(24), P(1), Ver(5), Phase::kPrepared);
  EXPECT_EQ(Ack(t, t.OnProgress(T(24), P(2), Ver(5), Phase::kPrepared)).size(), 1u);
  EXPECT_EQ(t.target().current, Ver(5));
}

TEST(RolloutTracker, RecoverRestoresDecisionsAndWaitsForMembers) {
  ChannelSnapshot snap;
  snap.versions = {{Ver(1), Decision::kCommit, "ok"},
                   {Ver(2), Decision::kAbort, "deadline"},
                   {Ver(3), Decision::kNone, ""},
                   {Ver(4), Decision::kNone, ""}};
  snap.current = Ver(1);
  auto r = RolloutTracker::Recover(Opts(All(), seconds(30)), T(100), snap);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  RolloutTracker t = std::move(r).value();
  EXPECT_EQ(t.decision(Ver(2)), Decision::kAbort);
  EXPECT_EQ(t.reason(Ver(2)), "deadline");
  EXPECT_EQ(t.target(), (Target{Ver(4), Decision::kNone, Ver(1), ""}));
  // Version 3 was superseded before the crash wrote it down: its abort comes out of the timer.
  auto a = Ack(t, t.OnTimer(T(100)));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].version, Ver(3));
  EXPECT_EQ(a[0].decision, Decision::kAbort);
  EXPECT_EQ(t.decision(Ver(3)), Decision::kAbort);
  // During the grace no decision: one member prepared must not commit for `all`.
  t.OnMemberJoined(T(101), P(1));
  EXPECT_TRUE(t.OnProgress(T(101), P(1), Ver(4), Phase::kPrepared).empty());
  t.OnMemberJoined(T(102), P(2));
  EXPECT_TRUE(t.OnProgress(T(102), P(2), Ver(4), Phase::kFetching).empty());
  EXPECT_EQ(t.next_deadline(), T(103));
  EXPECT_TRUE(t.OnTimer(T(103)).empty());  // node 2 still fetching
  EXPECT_EQ(t.next_deadline(), T(130));    // a fresh deadline from the restart
  EXPECT_EQ(Ack(t, t.OnProgress(T(104), P(2), Ver(4), Phase::kPrepared)).size(), 1u);
  EXPECT_EQ(t.target().current, Ver(4));
}

TEST(RolloutTracker, RecoverUnderEachCommitsTheUndecidedNewest) {
  ChannelSnapshot snap;
  snap.versions = {{Ver(1), Decision::kNone, ""}};
  auto t = RolloutTracker::Recover(Opts(Each()), T(0), snap);
  ASSERT_TRUE(t.ok());
  auto a = Ack(*t, t->OnTimer(T(0)));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(t->target(), (Target{Ver(1), Decision::kCommit, Ver(1), ""}));
}

TEST(RolloutTracker, RecoverRefusesAnInconsistentSnapshot) {
  ChannelSnapshot snap;
  snap.versions = {{Ver(1), Decision::kAbort, "x"}};
  snap.current = Ver(1);
  EXPECT_EQ(RolloutTracker::Recover(Opts(All()), T(0), snap).status().code(),
            Code::kInvalidArgument);
  snap.versions = {{Ver(1), Decision::kCommit, ""}, {Ver(1), Decision::kCommit, ""}};
  EXPECT_FALSE(RolloutTracker::Recover(Opts(All()), T(0), snap).ok());
  snap.versions = {{Ver(0), Decision::kCommit, ""}};
  snap.current = Ver(0);
  EXPECT_FALSE(RolloutTracker::Recover(Opts(All()), T(0), snap).ok());
}

}  // namespace
}  // namespace weightcast::rollout
