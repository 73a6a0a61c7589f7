#include "coord/membership.h"

#include <gtest/gtest.h>

#include <set>

namespace weightcast::coord {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const net::TimePoint t0{seconds(100)};

Membership Make(uint32_t degree = 4) {
  MembershipOptions o;
  o.peers.degree = degree;
  o.source_degree = 8;
  return *Membership::Create(o);
}

MemberInfo Follower(std::string rack = "a") {
  return {.channels = {"policy"}, .rack = std::move(rack), .source = false};
}

std::set<PeerId> Set(const std::vector<PeerId>& v) { return {v.begin(), v.end()}; }

TEST(Membership, ASilentNodeDiesAtTheTimeoutAndOnlyItsNeighboursListsChange) {
  Membership m = Make();
  for (uint64_t id = 1; id <= 30; ++id) m.Register(PeerId(id), Follower(), t0);
  ASSERT_EQ(m.UpdatePeerGraphs().size(), 1u);
  std::map<PeerId, std::set<PeerId>> before;
  for (uint64_t id = 1; id <= 30; ++id) before[PeerId(id)] = Set(m.Peers(PeerId(id)));

  const PeerId silent(9);
  for (uint64_t id = 1; id <= 30; ++id) {
    if (PeerId(id) != silent) m.Heard(PeerId(id), t0 + seconds(2));
  }
  auto never = [](PeerId) { return false; };
  EXPECT_TRUE(m.Sweep(t0 + seconds(3), never).empty()) << "3 s silent is not past the timeout";
  const std::vector<Membership::Death> deaths = m.Sweep(t0 + milliseconds(3500), never);
  ASSERT_EQ(deaths.size(), 1u);
  EXPECT_EQ(deaths[0].id, silent);
  EXPECT_EQ(deaths[0].silent, milliseconds(3500));
  EXPECT_FALSE(m.alive(silent));
  EXPECT_TRUE(m.known(silent));

  const auto changes = m.UpdatePeerGraphs();
  ASSERT_EQ(changes.size(), 1u);
  const swarm::PeerGraphChange& change = changes.at("policy");
  EXPECT_EQ(change.detached.size(), before[silent].size());
  EXPECT_TRUE(change.removed.empty());
  for (uint64_t id = 1; id <= 30; ++id) {
    const PeerId node(id);
    if (node == silent) continue;
    if (!before[silent].contains(node)) {
      EXPECT_EQ(Set(m.Peers(node)), before[node]) << "node " << id << " was no neighbour";
    } else {
      EXPECT_FALSE(Set(m.Peers(node)).contains(silent));
    }
  }
  EXPECT_TRUE(m.UpdatePeerGraphs().empty()) << "nothing changed since";

  // It speaks again: alive, and back in the graph.
  EXPECT_TRUE(m.Heard(silent, t0 + seconds(5)));
  EXPECT_FALSE(m.Heard(silent, t0 + seconds(6)));
  m.UpdatePeerGraphs();
  EXPECT_FALSE(m.Peers(silent).empty());
}

TEST(Membership, LeaveAndForget) {
  Membership m = Make();
  for (uint64_t id = 1; id <= 5; ++id) m.Register(PeerId(id), Follower(), t0);
  m.UpdatePeerGraphs();
  EXPECT_TRUE(m.Leave(PeerId(2), t0 + seconds(1)));
  EXPECT_FALSE(m.Leave(PeerId(2), t0 + seconds(1))) << "already left";
  EXPECT_FALSE(m.Leave(PeerId(99), t0)) << "unknown";
  EXPECT_TRUE(m.left(PeerId(2)));
  EXPECT_FALSE(m.alive(PeerId(2)));
  m.UpdatePeerGraphs();
  for (uint64_t id : {1u, 3u, 4u, 5u}) {
    EXPECT_FALSE(Set(m.Peers(PeerId(id))).contains(PeerId(2)));
    m.Heard(PeerId(id), t0 + seconds(11 * 60));
  }
  // Ten minutes after leaving it is forgotten, unless the caller still needs it.
  std::vector<PeerId> forgotten;
  m.Sweep(
      t0 + seconds(11 * 60), [](PeerId) { return false; }, &forgotten);
  EXPECT_TRUE(forgotten.empty());
  EXPECT_TRUE(m.known(PeerId(2)));
  m.Sweep(
      t0 + seconds(11 * 60), [](PeerId) { return true; }, &forgotten);
  EXPECT_EQ(forgotten, std::vector<PeerId>{PeerId(2)});
  EXPECT_FALSE(m.known(PeerId(2)));
}

TEST(Membership, ARackOrRoleChangeIsALeaveAndAJoinAndChannelsAreApart) {
  Membership m = Make();
  for (uint64_t id = 1; id <= 10; ++id) m.Register(PeerId(id), Follower(), t0);
  m.Register(PeerId(50), {.channels = {"other"}, .rack = "a", .source = false}, t0);
  m.Register(PeerId(51), {.channels = {"other"}, .rack = "a", .source = false}, t0);
  m.UpdatePeerGraphs();
  EXPECT_EQ(Set(m.Peers(PeerId(50))), std::set<PeerId>{PeerId(51)});
  for (uint64_t id = 1; id <= 10; ++id) EXPECT_FALSE(Set(m.Peers(PeerId(id))).contains(PeerId(50)));

  // Node 3 registers again as a source: a larger bound, the same id.
  m.Register(PeerId(3), {.channels = {"policy"}, .rack = "a", .source = true}, t0 + seconds(1));
  const auto changes = m.UpdatePeerGraphs();
  ASSERT_TRUE(changes.contains("policy"));
  EXPECT_FALSE(changes.contains("other"));
  EXPECT_GT(m.Peers(PeerId(3)).size(), 4u);
  EXPECT_LE(m.Peers(PeerId(3)).size(), 8u);

  // Nobody follows "other" any more: its edges go with its graph.
  m.Leave(PeerId(50), t0 + seconds(2));
  m.Leave(PeerId(51), t0 + seconds(2));
  const auto gone = m.UpdatePeerGraphs();
  ASSERT_TRUE(gone.contains("other"));
  EXPECT_EQ(gone.at("other").detached.size(), 1u);
}

// A coordinator that takes over from another: the fleet registers again naming the peers it
// held. The graph waits until every named node is back (or a heartbeat timeout passes), then
// comes back as it was; a fresh fleet, naming nobody, never waits.
TEST(Membership, AFleetThatRegistersAgainKeepsItsGraph) {
  Membership old = Make();
  for (uint64_t id = 1; id <= 30; ++id) old.Register(PeerId(id), Follower(), t0);
  EXPECT_FALSE(old.Settling(t0));
  old.UpdatePeerGraphs();
  std::map<PeerId, std::set<PeerId>> before;
  for (uint64_t id = 1; id <= 30; ++id) before[PeerId(id)] = Set(old.Peers(PeerId(id)));

  MembershipOptions other = {};
  other.peers.degree = 4;
  other.peers.seed = 12345;
  Membership taken_over = *Membership::Create(other);
  const net::TimePoint t1 = t0 + seconds(60);
  for (uint64_t id = 30; id >= 1; --id) {
    EXPECT_TRUE(id == 30 || taken_over.Settling(t1)) << id;
    const std::vector<PeerId> held = old.Peers(PeerId(id));
    taken_over.Register(PeerId(id), Follower(), t1, held);
  }
  EXPECT_FALSE(taken_over.Settling(t1)) << "everyone named is back";
  taken_over.UpdatePeerGraphs();
  for (uint64_t id = 1; id <= 30; ++id) {
    EXPECT_EQ(Set(taken_over.Peers(PeerId(id))), before[PeerId(id)]) << id;
  }

  // One node never comes back: settling ends at the settle window, and only its neighbours'
  // lists change.
  Membership partial = *Membership::Create(other);
  for (uint64_t id = 1; id <= 29; ++id) {
    partial.Register(PeerId(id), Follower(), t1, old.Peers(PeerId(id)));
  }
  EXPECT_TRUE(partial.Settling(t1 + milliseconds(4900)));
  EXPECT_FALSE(partial.Settling(t1 + seconds(5)));
  partial.UpdatePeerGraphs();
  for (uint64_t id = 1; id <= 29; ++id) {
    if (before[PeerId(id)].contains(PeerId(30))) continue;
    EXPECT_EQ(Set(partial.Peers(PeerId(id))), before[PeerId(id)]) << id;
  }
  // Drawn once, it never settles again: a node back from the dead joins at once.
  partial.Register(PeerId(30), Follower(), t1 + seconds(4), old.Peers(PeerId(30)));
  EXPECT_FALSE(partial.Settling(t1 + seconds(4)));
}

// A node that bans a peer for bad data says so in its heartbeats: the pair is kept apart and the
// banner gets another peer. One report never quarantines (a compromised node cannot push an
// honest one out); two live reporters do: the node leaves every graph.
TEST(Membership, BansKeepPairsApartAndTwoReportsQuarantine) {
  Membership m = Make();
  for (uint64_t id = 1; id <= 30; ++id) m.Register(PeerId(id), Follower(), t0);
  m.UpdatePeerGraphs();
  const PeerId bad(9);
  const std::vector<PeerId> around = m.Peers(bad);
  ASSERT_GE(around.size(), 2u);
  const PeerId first = around[0], second = around[1];

  EXPECT_TRUE(m.ReportBans(first, {bad}));
  EXPECT_FALSE(m.ReportBans(first, {bad})) << "the same list again is no change";
  EXPECT_FALSE(m.quarantined(bad));
  m.UpdatePeerGraphs();
  EXPECT_FALSE(Set(m.Peers(first)).contains(bad));
  EXPECT_EQ(m.Peers(first).size(), 4u) << "the banner is filled again";
  EXPECT_TRUE(Set(m.Peers(bad)).size() >= 3u) << "still in the graph after one report";

  EXPECT_TRUE(m.ReportBans(second, {bad}));
  EXPECT_TRUE(m.quarantined(bad));
  m.UpdatePeerGraphs();
  EXPECT_TRUE(m.Peers(bad).empty());
  for (uint64_t id = 1; id <= 30; ++id) {
    EXPECT_FALSE(Set(m.Peers(PeerId(id))).contains(bad)) << id;
  }
  // A ban lifted lifts the quarantine; the pair the first report names stays apart.
  EXPECT_TRUE(m.ReportBans(second, {}));
  EXPECT_FALSE(m.quarantined(bad));
  m.UpdatePeerGraphs();
  EXPECT_FALSE(m.Peers(bad).empty()) << "back in the graph";
  EXPECT_FALSE(Set(m.Peers(first)).contains(bad)) << "still apart from the node that bans it";
}

TEST(Membership, RefusesOptionsThePeerGraphRefuses) {
  MembershipOptions o;
  o.peers.degree = 1;
  EXPECT_FALSE(Membership::Create(o).ok());
}

}  // namespace
}  // namespace weightcast::coord
