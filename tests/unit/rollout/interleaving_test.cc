// A coordinator's RolloutTracker and N agents' Participants wired together by a tiny in-test
// world with a model store per node, driven by a seeded random schedule: heartbeats, fetches
// that finish (or fail) after random delays, publications, rollbacks, engine hooks that fail,
// persistence writes that fail, agents and the coordinator killed and restarted at random
// points. Checked at every step and after the world settles:
// - a version becomes current on a node only if the coordinator's durable state says it is
//   committed, and only (for a commit) from a staging whose every chunk was verified;
// - once faults stop and every node is back, all nodes have the fleet's current version.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "rollout/participant.h"
#include "rollout/tracker.h"

namespace weightcast::rollout {
namespace {

using std::chrono::milliseconds;

constexpr uint32_t kChunks = 6;
constexpr Duration kStep = milliseconds(100);
constexpr Duration kHeartbeatTimeout = milliseconds(1000);

// What a node's disk holds; survives a restart of the node.
struct ModelStore {
  std::set<Version> committed;
  Version current;
  std::map<Version, uint32_t> staging;  // version -> chunks verified
};

struct Job {
  ParticipantActionKind kind;
  Version version;
  int64_t ready_step;
};

struct Node {
  PeerId id;
  ModelStore store;
  std::optional<Participant> p;  // nullopt: the process is down
  std::vector<Job> jobs;
  std::optional<Version> bad_version;  // fetches of this version always fail
  bool registered = false;             // the coordinator knows it since its own start
};

// What the runs exercised, so a change that quietly stops the faults fails the test.
struct Coverage {
  uint64_t commits = 0, switches = 0, aborts = 0, node_kills = 0, coordinator_restarts = 0,
           failed_writes = 0;
};

struct World {
  explicit World(uint64_t seed, uint32_t n, CommitPolicy policy, bool faults)
      : rng(seed), faults(faults) {
    options.policy = policy;
    options.prepare_deadline = milliseconds(4000);
    options.recovery_grace = kHeartbeatTimeout;
    tracker = std::move(RolloutTracker::Create(options)).value();
    part.hook = true;
    part.hook_retries = 1;
    part.hook_retry_backoff = milliseconds(200);
    part.retry_backoff = milliseconds(300);
    part.hook_failure = Chance(0.5) ? HookFailure::kRollback : HookFailure::kReport;
    for (uint32_t i = 0; i < n; ++i) {
      Node node;
      node.id = PeerId(i + 1);
      nodes.push_back(std::move(node));
      StartNode(nodes.back());
    }
  }

  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
  int64_t Delay() { return std::uniform_int_distribution<int64_t>(0, 4)(rng); }
  Time Now() const { return Time(kStep * step); }

  void StartNode(Node& node) {
    LocalState s;
    s.current = node.store.current;
    s.kept.assign(node.store.committed.begin(), node.store.committed.end());
    for (auto [v, done] : node.store.staging) s.staging.push_back({v, done == kChunks});
    auto p = Participant::Create(part, s);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    node.p.emplace(std::move(p).value());
    node.jobs.clear();
    node.registered = false;
  }

  // The coordinator's durable state: what a restarted coordinator recovers.
  void Persist(std::span<const TrackerAction> actions) {
    for (const TrackerAction& a : actions) {
      if (faults && Chance(0.05)) {  // the write failed: not acknowledged, retried later
        ++cov.failed_writes;
        return;
      }
      if (a.decision == Decision::kAbort) ++cov.aborts;
      if (a.kind == TrackerActionKind::kPersistDecision) {
        durable_versions[a.version] = VersionRecord{a.version, a.decision, a.reason};
      }
      durable_current = a.current;
      tracker.OnPersisted(a.seq);
    }
  }

  bool DurablyCommitted(Version v) const {
    auto it = durable_versions.find(v);
    return it != durable_versions.end() && it->second.decision == Decision::kCommit;
  }

  void RestartCoordinator() {
    ChannelSnapshot snap;
    for (const auto& [v, r] : durable_versions) snap.versions.push_back(r);
    snap.current = durable_current;
    auto t = RolloutTracker::Recover(options, Now(), snap);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tracker = std::move(t).value();
    ++cov.coordinator_restarts;
    last_heartbeat.clear();
    for (Node& n : nodes) n.registered = false;
    Persist(tracker.OnTimer(Now()));
  }

  void Publish() {
    Version v(++newest);
    durable_versions[v] = VersionRecord{v, Decision::kNone, ""};  // the owner writes it first
    auto r = tracker.OnPublished(Now(), v);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Persist(*r);
    // Now and then one node cannot prepare this version (corrupt disk, no space).
    if (faults && Chance(0.2)) {
      nodes[std::uniform_int_distribution<size_t>(0, nodes.size() - 1)(rng)].bad_version = v;
    }
  }

  void RequestRollback(Version to, std::string_view who) {
    auto r = tracker.OnRollback(Now(), to, who);
    if (r.ok()) Persist(*r);
  }

  void Heartbeat(Node& node) {
    if (!node.p) return;
    if (!node.registered) {
      Persist(tracker.OnMemberJoined(Now(), node.id));
      node.registered = true;
    }
    last_heartbeat[node.id] = step;
    Report r = node.p->report();
    Persist(tracker.OnProgress(Now(), node.id, r.version, r.phase, r.error));
    Apply(node, node.p->OnTarget(Now(), tracker.target()));
  }

  void Apply(Node& node, std::span<const ParticipantAction> actions) {
    std::vector<ParticipantAction> copy(actions.begin(), actions.end());
    for (const ParticipantAction& a : copy) {
      switch (a.kind) {
        case ParticipantActionKind::kReport:
          pending_reports.insert(node.id);
          break;
        case ParticipantActionKind::kRequestRollback:
          RequestRollback(a.to, "hook");
          break;
        case ParticipantActionKind::kAbortStaging:
          // Stopping a fetch cancels its job; the abort itself is a job.
          std::erase_if(node.jobs, [&](const Job& j) {
            return j.kind == ParticipantActionKind::kFetch && j.version == a.version;
          });
          node.jobs.push_back(Job{a.kind, a.version, step + Delay()});
          break;
        default:
          node.jobs.push_back(Job{a.kind, a.version, step + Delay()});
      }
    }
  }

  // Carries out one finished job on the model store and reports it.
  void Finish(Node& node, Job job) {
    Participant& p = *node.p;
    ModelStore& s = node.store;
    switch (job.kind) {
      case ParticipantActionKind::kFetch: {
        ASSERT_FALSE(s.committed.contains(job.version))
            << "fetching committed version " << job.version.value();
        uint32_t& done = s.staging[job.version];
        if (node.bad_version == job.version || (faults && Chance(0.1))) {
          if (done < kChunks) ++done;  // some progress persists
          Apply(node, p.OnStaged(Now(), job.version, Corrupt("bad chunk")));
          return;
        }
        done = kChunks;
        Apply(node, p.OnStaged(Now(), job.version, Status::Ok()));
        return;
      }
      case ParticipantActionKind::kCommit: {
        auto it = s.staging.find(job.version);
        ASSERT_TRUE(it != s.staging.end()) << "commit of unstaged " << job.version.value();
        // The invariant: never current unless fully verified and decided durably.
        ASSERT_EQ(it->second, kChunks) << "commit of unverified " << job.version.value();
        ASSERT_TRUE(DurablyCommitted(job.version))
            << "node " << node.id.value() << " commits undecided " << job.version.value();
        if (faults && Chance(0.05)) {
          Apply(node, p.OnCommitted(Now(), job.version, IoError("fsync")));
          return;
        }
        s.staging.erase(it);
        s.committed.insert(job.version);
        s.current = job.version;
        ++cov.commits;
        Collect(s);
        Apply(node, p.OnCommitted(Now(), job.version, Status::Ok()));
        return;
      }
      case ParticipantActionKind::kSwitch: {
        if (!s.committed.contains(job.version)) {
          Apply(node, p.OnSwitched(Now(), job.version, NotFound("not kept")));
          return;
        }
        ASSERT_TRUE(DurablyCommitted(job.version))
            << "node " << node.id.value() << " switches to undecided " << job.version.value();
        s.current = job.version;
        ++cov.switches;
        Apply(node, p.OnSwitched(Now(), job.version, Status::Ok()));
        return;
      }
      case ParticipantActionKind::kAbortStaging:
        s.staging.erase(job.version);
        Apply(node, p.OnAborted(Now(), job.version, Status::Ok()));
        return;
      case ParticipantActionKind::kRunHook:
        Apply(node, p.OnHookDone(Now(), job.version,
                                 faults && Chance(0.2) ? Internal("engine") : Status::Ok()));
        return;
      default:
        FAIL() << "unexpected job";
    }
  }

  // Like Store: keep the two highest committed versions and the current one.
  static void Collect(ModelStore& s) {
    std::set<Version> keep{s.current};
    for (auto it = s.committed.rbegin(); it != s.committed.rend() && keep.size() < 3; ++it) {
      if (std::distance(s.committed.rbegin(), it) < 2) keep.insert(*it);
    }
    std::erase_if(s.committed, [&](Version v) { return !keep.contains(v); });
  }

  void CheckCurrents() {
    for (const Node& n : nodes) {
      if (n.store.current.value() == 0) continue;
      ASSERT_TRUE(DurablyCommitted(n.store.current))
          << "node " << n.id.value() << " has undecided current " << n.store.current.value();
    }
  }

  // One step of the world.
  void Step(bool allow_faults) {
    ++step;
    bool f = allow_faults && faults;
    if (f && Chance(0.06)) Publish();
    if (f && Chance(0.01)) RequestRollback(Version(), "cli");
    if (f && Chance(0.01)) RestartCoordinator();
    for (Node& n : nodes) {
      if (f && n.p && Chance(0.01)) {  // SIGKILL: jobs die with the process
        n.p.reset();
        ++cov.node_kills;
      }
      if (!n.p && (!f || Chance(0.05))) StartNode(n);
    }
    for (Node& n : nodes) {
      if (!n.p) continue;
      std::vector<Job> ready;
      std::erase_if(n.jobs, [&](const Job& j) {
        if (j.ready_step > step) return false;
        ready.push_back(j);
        return true;
      });
      for (const Job& j : ready) {
        if (!n.p) break;
        Finish(n, j);
        if (::testing::Test::HasFatalFailure()) return;
      }
      Apply(n, n.p->OnTimer(Now()));
      if (pending_reports.contains(n.id) || step % 3 == static_cast<int64_t>(n.id.value() % 3)) {
        pending_reports.erase(n.id);
        Heartbeat(n);
      }
    }
    for (auto it = last_heartbeat.begin(); it != last_heartbeat.end();) {
      if (Now() - Time(kStep * it->second) > kHeartbeatTimeout) {
        Persist(tracker.OnMemberDead(Now(), it->first));
        for (Node& n : nodes) {
          if (n.id == it->first) n.registered = false;
        }
        it = last_heartbeat.erase(it);
      } else {
        ++it;
      }
    }
    Persist(tracker.OnTimer(Now()));
    CheckCurrents();
  }

  bool Settled() const {
    if (tracker.pending().has_value() || tracker.unpersisted() != 0) return false;
    for (const Node& n : nodes) {
      if (!n.p || !n.p->settled() || !n.jobs.empty()) return false;
      // A participant is settled relative to the last target it saw; the world is settled
      // when that is also the coordinator's.
      if (n.store.current != tracker.target().current || !n.store.staging.empty()) return false;
    }
    return true;
  }

  std::mt19937_64 rng;
  bool faults;
  TrackerOptions options;
  ParticipantOptions part;
  RolloutTracker tracker = std::move(RolloutTracker::Create({})).value();
  std::map<Version, VersionRecord> durable_versions;
  Version durable_current;
  std::vector<Node> nodes;
  std::map<PeerId, int64_t> last_heartbeat;
  std::set<PeerId> pending_reports;
  uint64_t newest = 0;
  int64_t step = 0;
  Coverage cov;
};

void RunOne(uint64_t seed, CommitPolicy policy, Coverage& total) {
  SCOPED_TRACE("seed " + std::to_string(seed) + " policy " + FormatCommitPolicy(policy));
  std::mt19937_64 pick(seed);
  uint32_t n = 1 + static_cast<uint32_t>(pick() % 5);
  World w(seed, n, policy, /*faults=*/true);
  struct AddUp {
    Coverage& total;
    World& w;
    ~AddUp() {
      total.commits += w.cov.commits;
      total.switches += w.cov.switches;
      total.aborts += w.cov.aborts;
      total.node_kills += w.cov.node_kills;
      total.coordinator_restarts += w.cov.coordinator_restarts;
      total.failed_writes += w.cov.failed_writes;
    }
  } add_up{total, w};
  w.Publish();
  for (int i = 0; i < 300; ++i) {
    w.Step(true);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Faults stop; every node comes back. Bad versions stay bad (their rollouts abort, or under
  // `each` the node keeps failing them): publish one last good version so everyone converges.
  w.faults = false;
  for (Node& node : w.nodes) node.bad_version.reset();
  w.Publish();
  int settle = 0;
  for (; settle < 2000 && !w.Settled(); ++settle) {
    w.Step(false);
    if (::testing::Test::HasFatalFailure()) return;
  }
  ASSERT_TRUE(w.Settled()) << "did not settle";
  Target t = w.tracker.target();
  ASSERT_NE(t.current.value(), 0u) << "the last version must commit once faults stop";
  EXPECT_EQ(t.current, Version(w.newest));
  for (const Node& node : w.nodes) {
    EXPECT_EQ(node.store.current, t.current) << "node " << node.id.value();
    EXPECT_TRUE(node.store.staging.empty()) << "node " << node.id.value() << " left staging";
  }
}

void ExpectCovered(const Coverage& c, bool aborts = true) {
  EXPECT_GT(c.commits, 500u);
  EXPECT_GT(c.switches, 20u);
  if (aborts) {  // `each` never aborts
    EXPECT_GT(c.aborts, 20u);
  }
  EXPECT_GT(c.node_kills, 100u);
  EXPECT_GT(c.coordinator_restarts, 50u);
  EXPECT_GT(c.failed_writes, 50u);
  std::printf(
      "commits %lu switches %lu aborts %lu node kills %lu coordinator restarts %lu "
      "failed writes %lu\n",
      static_cast<unsigned long>(c.commits), static_cast<unsigned long>(c.switches),
      static_cast<unsigned long>(c.aborts), static_cast<unsigned long>(c.node_kills),
      static_cast<unsigned long>(c.coordinator_restarts),
      static_cast<unsigned long>(c.failed_writes));
}

TEST(RolloutInterleaving, AllPolicyKeepsTheInvariantUnderFaults) {
  Coverage c;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    RunOne(seed, CommitPolicy{PolicyKind::kAll, 1.0}, c);
    if (HasFatalFailure()) return;
  }
  ExpectCovered(c);
}

TEST(RolloutInterleaving, QuorumPolicyKeepsTheInvariantUnderFaults) {
  Coverage c;
  for (uint64_t seed = 1001; seed <= 1150; ++seed) {
    RunOne(seed, CommitPolicy{PolicyKind::kQuorum, 0.6}, c);
    if (HasFatalFailure()) return;
  }
  ExpectCovered(c);
}

TEST(RolloutInterleaving, EachPolicyKeepsTheInvariantUnderFaults) {
  Coverage c;
  for (uint64_t seed = 2001; seed <= 2150; ++seed) {
    RunOne(seed, CommitPolicy{PolicyKind::kEach, 1.0}, c);
    if (HasFatalFailure()) return;
  }
  ExpectCovered(c, /*aborts=*/false);
}

// Without faults, `all` commits every version everywhere, in order.
TEST(RolloutInterleaving, FaultFreeRunsCommitEveryVersion) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    World w(seed, 4, CommitPolicy{PolicyKind::kAll, 1.0}, /*faults=*/false);
    for (int v = 1; v <= 3; ++v) {
      w.Publish();
      int i = 0;
      for (; i < 500 && !w.Settled(); ++i) w.Step(false);
      ASSERT_TRUE(w.Settled());
      ASSERT_EQ(w.tracker.decision(Version(v)), Decision::kCommit);
      for (const Node& node : w.nodes) ASSERT_EQ(node.store.current, Version(v));
    }
  }
}

}  // namespace
}  // namespace weightcast::rollout
