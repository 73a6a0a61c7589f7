#include "rollout/participant.h"

#include <gtest/gtest.h>

#include <vector>

namespace weightcast::rollout {
namespace {

using std::chrono::seconds;
using K = ParticipantActionKind;

constexpr Time T(int s) { return Time(seconds(s)); }
Version Ver(uint64_t v) { return Version(v); }

Target Tgt(uint64_t version, Decision d, uint64_t current, std::string reason = {}) {
  return Target{Ver(version), d, Ver(current), std::move(reason)};
}

ParticipantAction A(K kind, uint64_t v, uint64_t to = 0, uint32_t attempt = 0) {
  return ParticipantAction{kind, Ver(v), Ver(to), attempt};
}

// The actions without the kReport hints (tested on their own).
std::vector<ParticipantAction> Work(std::span<const ParticipantAction> s) {
  std::vector<ParticipantAction> out;
  for (const auto& a : s) {
    if (a.kind != K::kReport) out.push_back(a);
  }
  return out;
}

bool HasReport(std::span<const ParticipantAction> s) {
  for (const auto& a : s) {
    if (a.kind == K::kReport) return true;
  }
  return false;
}

Participant Make(LocalState state = {}, ParticipantOptions o = {}) {
  auto p = Participant::Create(o, std::move(state));
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

LocalState At(uint64_t current, std::vector<uint64_t> kept = {}) {
  LocalState s;
  s.current = Ver(current);
  for (uint64_t v : kept) s.kept.push_back(Ver(v));
  if (current != 0 && kept.empty()) s.kept.push_back(Ver(current));
  return s;
}

TEST(Participant, RejectsInconsistentLocalState) {
  LocalState s;
  s.current = Ver(2);
  EXPECT_EQ(Participant::Create({}, s).status().code(), Code::kInvalidArgument);
  s = At(1);
  s.staging.push_back({Ver(1), true});
  EXPECT_FALSE(Participant::Create({}, s).ok());
  s = At(1);
  s.staging = {{Ver(2), true}, {Ver(2), false}};
  EXPECT_FALSE(Participant::Create({}, s).ok());
}

TEST(Participant, FetchPrepareCommitHappyPath) {
  ParticipantOptions o;
  o.hook = true;
  Participant p = Make(At(1), o);
  auto a = p.OnTarget(T(0), Tgt(2, Decision::kNone, 1));
  EXPECT_EQ(Work(a), std::vector{A(K::kFetch, 2)});
  EXPECT_EQ(p.report(), (Report{Ver(2), Phase::kFetching, Ver(1), ""}));
  EXPECT_TRUE(HasReport(a));
  // The same target again: nothing new.
  EXPECT_TRUE(p.OnTarget(T(1), Tgt(2, Decision::kNone, 1)).empty());
  a = p.OnStaged(T(2), Ver(2), Status::Ok());
  EXPECT_TRUE(Work(a).empty());
  EXPECT_TRUE(HasReport(a)) << "PREPARED must reach the coordinator at once";
  EXPECT_EQ(p.report(), (Report{Ver(2), Phase::kPrepared, Ver(1), ""}));
  EXPECT_TRUE(p.settled());  // prepared and waiting is where the target wants it
}

TEST(Participant, CommitsOnlyAfterTheDecisionAndOnlyWhatWasVerified) {
  ParticipantOptions o;
  o.hook = true;
  Participant p = Make(At(1), o);
  p.OnTarget(T(0), Tgt(2, Decision::kNone, 1));
  // The decision arrives while the fetch is still running: no commit of unverified bytes.
  EXPECT_TRUE(Work(p.OnTarget(T(1), Tgt(2, Decision::kCommit, 2))).empty());
  EXPECT_EQ(Work(p.OnStaged(T(2), Ver(2), Status::Ok())), std::vector{A(K::kCommit, 2)});
  auto a = p.OnCommitted(T(3), Ver(2), Status::Ok());
  EXPECT_EQ(Work(a), std::vector{A(K::kRunHook, 2, 0, 1)});
  EXPECT_TRUE(HasReport(a));
  EXPECT_EQ(p.current(), Ver(2));
  EXPECT_EQ(p.report(), (Report{Ver(2), Phase::kCommitted, Ver(2), ""}));
  EXPECT_FALSE(p.settled());  // the hook runs
  EXPECT_TRUE(Work(p.OnHookDone(T(4), Ver(2), Status::Ok())).empty());
  EXPECT_TRUE(p.settled());
}

TEST(Participant, PreparedNodeWaitsForTheDecision) {
  Participant p = Make(At(1));
  p.OnTarget(T(0), Tgt(2, Decision::kNone, 1));
  p.OnStaged(T(1), Ver(2), Status::Ok());
  EXPECT_TRUE(p.settled());
  EXPECT_TRUE(p.OnTarget(T(2), Tgt(2, Decision::kNone, 1)).empty());
  EXPECT_EQ(Work(p.OnTarget(T(3), Tgt(2, Decision::kCommit, 2))), std::vector{A(K::kCommit, 2)});
}

TEST(Participant, AbortDropsTheStagingAndKeepsServingTheOldVersion) {
  Participant p = Make(At(1));
  p.OnTarget(T(0), Tgt(2, Decision::kNone, 1));
  p.OnStaged(T(1), Ver(2), Status::Ok());
  auto a = p.OnTarget(T(2), Tgt(2, Decision::kAbort, 1, "deadline"));
  EXPECT_EQ(Work(a), std::vector{A(K::kAbortStaging, 2)});
  EXPECT_EQ(p.report(), (Report{Ver(1), Phase::kCommitted, Ver(1), ""}));
  EXPECT_TRUE(Work(p.OnAborted(T(3), Ver(2), Status::Ok())).empty());
  EXPECT_EQ(p.current(), Ver(1));
  EXPECT_TRUE(p.settled());
}

TEST(Participant, AbortWhileFetchingStopsTheFetch) {
  Participant p = Make(At(1));
  p.OnTarget(T(0), Tgt(2, Decision::kNone, 1));
  EXPECT_EQ(Work(p.OnTarget(T(1), Tgt(2, Decision::kAbort, 1))),
            std::vector{A(K::kAbortStaging, 2)});
  // A late result of the stopped fetch must not revive it.
  EXPECT_TRUE(Work(p.OnStaged(T(2), Ver(2), Status::Ok())).empty());
  p.OnAborted(T(3), Ver(2), Status::Ok());
  EXPECT_TRUE(p.settled());
}

TEST(Participant, SupersededVersionIsDroppedBeforeTheNewOneIsFetched) {
  Participant p = Make(At(1));
  p.OnTarget(T(0), Tgt(2, Decision::kNone, 1));
  EXPECT_EQ(Work(p.OnTarget(T(1), Tgt(3, Decision::kNone, 1))),
            std::vector{A(K::kAbortStaging, 2)});
  EXPECT_EQ(Work(p.OnAborted(T(2), Ver(2), Status::Ok())), std::vector{A(K::kFetch, 3)});
}

TEST(Participant, DoesNothingBeforeTheFirstTargetButReportsWhatItHolds) {
  LocalState s = At(1);
  s.staging.push_back({Ver(2), true});
  Participant p = Make(s);
  EXPECT_FALSE(p.has_target());
  EXPECT_EQ(p.report(), (Report{Ver(2), Phase::kPrepared, Ver(1), ""}));
  EXPECT_TRUE(Work(p.OnTimer(T(100))).empty());
}

TEST(Participant, RestartedBetweenPreparedAndDecisionFollowsCommit) {
  LocalState s = At(1);
  s.staging.push_back({Ver(2), true});
  Participant p = Make(s);
  EXPECT_TRUE(Work(p.OnTarget(T(0), Tgt(2, Decision::kNone, 1))).empty());
  EXPECT_EQ(p.report().phase, Phase::kPrepared);
  EXPECT_EQ(Work(p.OnTarget(T(1), Tgt(2, Decision::kCommit, 2))), std::vector{A(K::kCommit, 2)});
}

TEST(Participant, RestartedBetweenPreparedAndDecisionFollowsAbort) {
  LocalState s = At(1);
  s.staging.push_back({Ver(2), true});
  Participant p = Make(s);
  EXPECT_EQ(Work(p.OnTarget(T(0), Tgt(2, Decision::kAbort, 1))),
            std::vector{A(K::kAbortStaging, 2)});
}

TEST(Participant, RestartedMidFetchResumes) {
  LocalState s = At(1);
  s.staging.push_back({Ver(2), false});
  Participant p = Make(s);
  EXPECT_EQ(p.report(), (Report{Ver(1), Phase::kCommitted, Ver(1), ""}));
  EXPECT_EQ(Work(p.OnTarget(T(0), Tgt(2, Decision::kNone, 1))), std::vector{A(K::kFetch, 2)});
}

TEST(Participant, NodeThatMissedACommitCatchesUp) {
  Participant p = Make(At(1));
  // While it was away, 3 was committed and 4 is being prepared: 3 comes first.
  EXPECT_EQ(Work(p.OnTarget(T(0), Tgt(4, Decision::kNone, 3))), std::vector{A(K::kFetch, 3)});
  EXPECT_EQ(p.report(), (Report{Ver(3), Phase::kFetching, Ver(1), ""}));
  EXPECT_EQ(Work(p.OnStaged(T(1), Ver(3), Status::Ok())), std::vector{A(K::kCommit, 3)});
  EXPECT_EQ(Work(p.OnCommitted(T(2), Ver(3), Status::Ok())), std::vector{A(K::kFetch, 4)});
  EXPECT_EQ(p.current(), Ver(3));
}

TEST(Participant, NewNodeWithNothingFetchesTheCurrentVersion) {
  Participant p = Make();
  EXPECT_EQ(p.report(), (Report{Ver(0), Phase::kIdle, Ver(0), ""}));
  EXPECT_EQ(Work(p.OnTarget(T(0), Tgt(5, Decision::kCommit, 5))), std::vector{A(K::kFetch, 5)});
  EXPECT_EQ(Work(p.OnStaged(T(1), Ver(5), Status::Ok())), std::vector{A(K::kCommit, 5)});
}

TEST(Participant, RollbackSwitchesToAKeptVersionWithoutFetching) {
  ParticipantOptions o;
  o.hook = true;
  Participant p = Make(At(3, {2, 3}), o);
  auto a = p.OnTarget(T(0), Tgt(3, Decision::kCommit, 2));
  EXPECT_EQ(Work(a), std::vector{A(K::kSwitch, 2)});
  EXPECT_EQ(Work(p.OnSwitched(T(1), Ver(2), Status::Ok())), std::vector{A(K::kRunHook, 2, 0, 1)});
  EXPECT_EQ(p.current(), Ver(2));
  EXPECT_EQ(p.report(), (Report{Ver(2), Phase::kCommitted, Ver(2), ""}));
  p.OnHookDone(T(2), Ver(2), Status::Ok());
  EXPECT_TRUE(p.settled());
}

TEST(Participant, RollbackToAVersionNoLongerKeptFetchesIt) {
  Participant p = Make(At(3, {2, 3}));
  p.OnTarget(T(0), Tgt(3, Decision::kCommit, 2));
  EXPECT_EQ(Work(p.OnSwitched(T(1), Ver(2), NotFound("collected"))), std::vector{A(K::kFetch, 2)});
}

// A current version nobody serves (its fetch fails) must not hold up the next one; the
// commit of the newer version moves the node past it.
TEST(Participant, UnreachableCurrentDoesNotHoldUpANewerVersion) {
  ParticipantOptions o;
  o.retry_backoff = seconds(5);
  Participant p = Make(At(3, {2, 3}), o);
  EXPECT_EQ(Work(p.OnTarget(T(0), Tgt(3, Decision::kAbort, 1, "rolled back to v1"))),
            std::vector{A(K::kFetch, 1)});
  EXPECT_TRUE(Work(p.OnStaged(T(1), Ver(1), NotFound("no peer holds v1"))).empty());
  EXPECT_EQ(p.report().phase, Phase::kFailed);
  // v4 is published: prepared although v1 is not there yet.
  EXPECT_EQ(Work(p.OnTarget(T(2), Tgt(4, Decision::kNone, 1))), std::vector{A(K::kFetch, 4)});
  p.OnStaged(T(3), Ver(4), Status::Ok());
  EXPECT_EQ(p.report(), (Report{Ver(4), Phase::kPrepared, Ver(3), ""}));
  auto a = Work(p.OnTarget(T(4), Tgt(4, Decision::kCommit, 4)));
  EXPECT_EQ(a.front(), A(K::kAbortStaging, 1));
  EXPECT_EQ(Work(p.OnAborted(T(5), Ver(1), Status::Ok())), std::vector{A(K::kCommit, 4)});
  p.OnCommitted(T(6), Ver(4), Status::Ok());
  EXPECT_EQ(p.current(), Ver(4));
  EXPECT_TRUE(p.settled());
}

TEST(Participant, RollbackDropsAPreparedPendingVersion) {
  Participant p = Make(At(3, {2, 3}));
  p.OnTarget(T(0), Tgt(4, Decision::kNone, 3));
  p.OnStaged(T(1), Ver(4), Status::Ok());
  EXPECT_EQ(Work(p.OnTarget(T(2), Tgt(4, Decision::kAbort, 2, "rollback"))),
            std::vector{A(K::kAbortStaging, 4)});
  EXPECT_EQ(Work(p.OnAborted(T(3), Ver(4), Status::Ok())), std::vector{A(K::kSwitch, 2)});
}

TEST(Participant, FailedFetchIsReportedAndRetriedAfterTheBackoff) {
  ParticipantOptions o;
  o.retry_backoff = seconds(5);
  Participant p = Make(At(1), o);
  p.OnTarget(T(0), Tgt(2, Decision::kNone, 1));
  auto a = p.OnStaged(T(1), Ver(2), Corrupt("every peer sent bad bytes"));
  EXPECT_TRUE(Work(a).empty());
  EXPECT_TRUE(HasReport(a));
  Report r = p.report();
  EXPECT_EQ(r.phase, Phase::kFailed);
  EXPECT_EQ(r.version, Ver(2));
  EXPECT_NE(r.error.find("every peer sent bad bytes"), std::string::npos);
  EXPECT_EQ(p.next_deadline(), T(6));
  EXPECT_TRUE(Work(p.OnTimer(T(5))).empty());
  EXPECT_EQ(Work(p.OnTimer(T(6))), std::vector{A(K::kFetch, 2)});
  EXPECT_EQ(p.report().phase, Phase::kFetching);
}

TEST(Participant, FailedCommitIsRetriedThroughAFreshFetch) {
  ParticipantOptions o;
  o.retry_backoff = seconds(1);
  Participant p = Make(At(1), o);
  p.OnTarget(T(0), Tgt(2, Decision::kCommit, 2));
  p.OnStaged(T(1), Ver(2), Status::Ok());
  EXPECT_TRUE(Work(p.OnCommitted(T(2), Ver(2), IoError("fsync"))).empty());
  EXPECT_EQ(p.report().phase, Phase::kFailed);
  EXPECT_EQ(p.current(), Ver(1));
  EXPECT_EQ(Work(p.OnTimer(T(3))), std::vector{A(K::kFetch, 2)});
}

TEST(Participant, HookIsRetriedThenReported) {
  ParticipantOptions o;
  o.hook = true;
  o.hook_retries = 2;
  o.hook_retry_backoff = seconds(1);
  Participant p = Make(At(1), o);
  p.OnTarget(T(0), Tgt(2, Decision::kCommit, 2));
  p.OnStaged(T(0), Ver(2), Status::Ok());
  p.OnCommitted(T(0), Ver(2), Status::Ok());
  EXPECT_TRUE(Work(p.OnHookDone(T(1), Ver(2), Unavailable("engine busy"))).empty());
  EXPECT_NE(p.report().error.find("engine busy"), std::string::npos);
  EXPECT_EQ(Work(p.OnTimer(T(2))), std::vector{A(K::kRunHook, 2, 0, 2)});
  p.OnHookDone(T(2), Ver(2), Unavailable("engine busy"));
  EXPECT_EQ(Work(p.OnTimer(T(3))), std::vector{A(K::kRunHook, 2, 0, 3)});
  // Out of retries with the report policy: reported, nothing else.
  EXPECT_TRUE(Work(p.OnHookDone(T(3), Ver(2), Unavailable("engine busy"))).empty());
  Report r = p.report();
  EXPECT_EQ(r.phase, Phase::kCommitted);
  EXPECT_NE(r.error.find("hook failed after 3 attempts"), std::string::npos) << r.error;
  EXPECT_TRUE(Work(p.OnTimer(T(100))).empty());
  EXPECT_TRUE(p.settled());
}

TEST(Participant, HookFailureCanAskForAFleetRollback) {
  ParticipantOptions o;
  o.hook = true;
  o.hook_retries = 0;
  o.hook_failure = HookFailure::kRollback;
  Participant p = Make(At(1), o);
  p.OnTarget(T(0), Tgt(2, Decision::kCommit, 2));
  p.OnStaged(T(0), Ver(2), Status::Ok());
  p.OnCommitted(T(0), Ver(2), Status::Ok());
  EXPECT_EQ(Work(p.OnHookDone(T(1), Ver(2), Internal("load failed"))),
            std::vector{A(K::kRequestRollback, 2, 1)});
  // The coordinator rolls back: the node switches, the hook runs for 1; its failure does not
  // ask for another rollback.
  EXPECT_EQ(Work(p.OnTarget(T(2), Tgt(2, Decision::kCommit, 1))), std::vector{A(K::kSwitch, 1)});
  EXPECT_EQ(Work(p.OnSwitched(T(3), Ver(1), Status::Ok())), std::vector{A(K::kRunHook, 1, 0, 1)});
  EXPECT_TRUE(Work(p.OnHookDone(T(4), Ver(1), Internal("load failed"))).empty());
}

TEST(Participant, NewerCurrentWhileAHookRunsQueuesOneMoreRun) {
  ParticipantOptions o;
  o.hook = true;
  Participant p = Make(At(1), o);
  p.OnTarget(T(0), Tgt(2, Decision::kCommit, 2));
  p.OnStaged(T(0), Ver(2), Status::Ok());
  p.OnCommitted(T(0), Ver(2), Status::Ok());  // hook(2) running
  p.OnTarget(T(1), Tgt(3, Decision::kCommit, 3));
  p.OnStaged(T(1), Ver(3), Status::Ok());
  EXPECT_TRUE(Work(p.OnCommitted(T(1), Ver(3), Status::Ok())).empty());  // queued
  EXPECT_EQ(Work(p.OnHookDone(T(2), Ver(2), Status::Ok())), std::vector{A(K::kRunHook, 3, 0, 1)});
}

TEST(Participant, OneStoreChangeAtATime) {
  LocalState s = At(1);
  s.staging = {{Ver(2), false}, {Ver(3), true}};
  Participant p = Make(s);
  // Both stagings are unwanted (4 is the pending version): one abort, then the other.
  EXPECT_EQ(Work(p.OnTarget(T(0), Tgt(4, Decision::kNone, 1))),
            std::vector{A(K::kAbortStaging, 2)});
  EXPECT_TRUE(Work(p.OnTarget(T(0), Tgt(4, Decision::kNone, 1))).empty());
  EXPECT_EQ(Work(p.OnAborted(T(1), Ver(2), Status::Ok())), std::vector{A(K::kAbortStaging, 3)});
  EXPECT_EQ(Work(p.OnAborted(T(1), Ver(3), Status::Ok())), std::vector{A(K::kFetch, 4)});
}

TEST(Participant, ParsesHookFailure) {
  EXPECT_EQ(*ParseHookFailure("report"), HookFailure::kReport);
  EXPECT_EQ(*ParseHookFailure("rollback"), HookFailure::kRollback);
  EXPECT_EQ(ParseHookFailure("retry").status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace weightcast::rollout
