#include "swarm/peer_graph.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <set>

namespace weightcast::swarm {
namespace {

std::vector<NodeInfo> Nodes(uint32_t first, uint32_t n, uint32_t rack_size) {
  std::vector<NodeInfo> nodes(n);
  for (uint32_t i = 0; i < n; ++i) {
    nodes[i].id = PeerId(first + i);
    if (rack_size > 0) nodes[i].rack = "rack" + std::to_string((first + i) / rack_size);
  }
  return nodes;
}

std::set<Edge> Edges(const PeerGraph& g) {
  std::set<Edge> out;
  for (PeerId a : g.Members()) {
    for (PeerId b : g.Neighbours(a)) out.insert(a < b ? Edge{a, b} : Edge{b, a});
  }
  return out;
}

// Undirected, simple, within bounds.
void ExpectWellFormed(const PeerGraph& g, uint32_t degree) {
  for (PeerId a : g.Members()) {
    std::vector<PeerId> nb = g.Neighbours(a);
    EXPECT_LE(nb.size(), degree);
    std::sort(nb.begin(), nb.end());
    EXPECT_EQ(std::adjacent_find(nb.begin(), nb.end()), nb.end()) << "repeated edge";
    for (PeerId b : nb) {
      EXPECT_NE(a, b);
      const std::vector<PeerId> back = g.Neighbours(b);
      EXPECT_NE(std::find(back.begin(), back.end(), a), back.end()) << "asymmetric";
    }
  }
  EXPECT_TRUE(g.Connected());
}

size_t Missing(const PeerGraph& g, uint32_t degree) {
  size_t missing = 0;
  for (PeerId a : g.Members()) missing += degree - g.Neighbours(a).size();
  return missing;
}

PeerListOptions Options(uint32_t degree) {
  PeerListOptions o;
  o.degree = degree;
  o.same_rack_fraction = 0.75;
  return o;
}

// The change's lists are exactly the difference between the graph before and after.
void ExpectChangeIsTheDiff(const std::set<Edge>& before, const std::set<Edge>& after,
                           const PeerGraphChange& change) {
  std::set<Edge> gone, made;
  std::set_difference(before.begin(), before.end(), after.begin(), after.end(),
                      std::inserter(gone, gone.end()));
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(),
                      std::inserter(made, made.end()));
  std::set<Edge> reported(change.removed.begin(), change.removed.end());
  reported.insert(change.detached.begin(), change.detached.end());
  EXPECT_EQ(gone, reported);
  EXPECT_EQ(made, std::set<Edge>(change.added.begin(), change.added.end()));
}

TEST(PeerGraph, ADeathDropsOnlyTheDeadNodesEdges) {
  auto g = PeerGraph::Create(Options(24));
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->Update({}, Nodes(1, 1000, 40)).ok());
  ExpectWellFormed(*g, 24);
  for (uint32_t dead = 1; dead <= 1000; dead += 9) {
    const std::set<Edge> before = Edges(*g);
    const size_t own = g->Neighbours(PeerId(dead)).size();
    const PeerId leaving[] = {PeerId(dead)};
    auto change = g->Update(leaving, {});
    ASSERT_TRUE(change.ok());
    EXPECT_EQ(change->detached.size(), own);
    // Its neighbours, one short each, are linked to each other. When the last one short is
    // already linked to every other node with room, it and such a neighbour take over one edge.
    EXPECT_LE(change->removed.size(), 1u);
    EXPECT_EQ(change->added.size(), own / 2 + change->removed.size());
    ExpectChangeIsTheDiff(before, Edges(*g), *change);
    ExpectWellFormed(*g, 24);
    EXPECT_FALSE(g->Contains(PeerId(dead)));
  }
}

TEST(PeerGraph, AJoinIntoAFullGraphCostsHalfItsDegree) {
  auto g = PeerGraph::Create(Options(24));
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->Update({}, Nodes(1, 1000, 40)).ok());
  ASSERT_EQ(Missing(*g, 24), 0u);
  const std::set<Edge> before = Edges(*g);
  const std::vector<NodeInfo> late = Nodes(2000, 1, 40);
  auto change = g->Update({}, late);
  ASSERT_TRUE(change.ok());
  EXPECT_EQ(g->Neighbours(PeerId(2000)).size(), 24u);
  EXPECT_EQ(change->removed.size(), 12u);  // x-y becomes x-new-y, twelve times
  EXPECT_EQ(change->added.size(), 24u);
  ExpectChangeIsTheDiff(before, Edges(*g), *change);
  ExpectWellFormed(*g, 24);
}

TEST(PeerGraph, JoinersFillFromNodesWithRoomFirst) {
  // The neighbours of a node that left have room: a joiner takes it without dropping an edge.
  auto g = PeerGraph::Create(Options(4));
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->Update({}, Nodes(1, 30, 0)).ok());
  const std::vector<NodeInfo> fresh = Nodes(100, 2, 0);
  auto change = g->Update({}, fresh);
  ASSERT_TRUE(change.ok());
  ExpectWellFormed(*g, 4);
  EXPECT_EQ(Missing(*g, 4), 0u);
  // Two joiners of degree 4 link to each other once, then splice: 3 each.
  EXPECT_LE(change->removed.size(), 4u);
}

// A new coordinator builds its graph from registrations that name the edges each node held: the
// same graph comes back, whatever its own seed; a node that did not come back takes only its own
// edges with it. Without the edges, the graph is another one.
TEST(PeerGraph, NodesThatJoinWithTheEdgesTheyHeldGetThemBack) {
  auto old = PeerGraph::Create(Options(4));
  ASSERT_TRUE(old.ok());
  ASSERT_TRUE(old->Update({}, Nodes(1, 30, 0)).ok());
  const std::set<Edge> held = Edges(*old);
  const std::vector<Edge> keep(held.begin(), held.end());

  PeerListOptions other_seed = Options(4);
  other_seed.seed = 99;
  auto again = PeerGraph::Create(other_seed);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(again->Update({}, Nodes(1, 30, 0), keep).ok());
  EXPECT_EQ(Edges(*again), held);
  ExpectWellFormed(*again, 4);

  auto fresh = PeerGraph::Create(other_seed);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(fresh->Update({}, Nodes(1, 30, 0)).ok());
  const std::set<Edge> drawn = Edges(*fresh);
  std::vector<Edge> shared;
  std::set_intersection(held.begin(), held.end(), drawn.begin(), drawn.end(),
                        std::back_inserter(shared));
  EXPECT_LT(shared.size(), held.size() / 2);

  // Node 7 does not register again: every edge between the others stays, its neighbours are
  // linked to each other.
  std::vector<NodeInfo> without_7 = Nodes(1, 30, 0);
  without_7.erase(without_7.begin() + 6);
  auto partial = PeerGraph::Create(other_seed);
  ASSERT_TRUE(partial.ok());
  ASSERT_TRUE(partial->Update({}, without_7, keep).ok());
  ExpectWellFormed(*partial, 4);
  const std::set<Edge> now = Edges(*partial);
  for (const Edge& e : held) {
    if (e.a != PeerId(7) && e.b != PeerId(7)) {
      EXPECT_TRUE(now.contains(e));
    }
  }
  EXPECT_EQ(Missing(*partial, 4), 0u);

  // Kept edges are only those that touch a joiner: an edge between two nodes already in the
  // graph is not made (or kept) because a joiner's registration names it.
  auto full = PeerGraph::Create(Options(4));
  ASSERT_TRUE(full.ok());
  ASSERT_TRUE(full->Update({}, Nodes(1, 30, 0)).ok());
  const Edge not_held = {PeerId(1), PeerId(2)};
  const bool linked = Edges(*full).contains(not_held);
  const std::vector<NodeInfo> late = Nodes(50, 1, 0);
  const Edge claims[] = {{PeerId(1), PeerId(2)}, {PeerId(3), PeerId(50)}};
  ASSERT_TRUE(full->Update({}, late, claims).ok());
  EXPECT_EQ(Edges(*full).contains(not_held), linked);
  ExpectWellFormed(*full, 4);
}

// A node that banned a peer for bad data is kept apart from it: the edge goes, both ends are
// filled again from elsewhere, no other edge of the graph moves beyond that refill, and no later
// change links the pair again.
TEST(PeerGraph, APairKeptApartLosesItsEdgeAndNeverGetsItBack) {
  auto g = PeerGraph::Create(Options(4));
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->Update({}, Nodes(1, 30, 0)).ok());
  const PeerId banner(5);
  const PeerId bad = g->Neighbours(banner).front();
  const std::set<Edge> before = Edges(*g);
  const Edge apart[] = {{std::min(banner, bad), std::max(banner, bad)}};
  const PeerGraphChange change = g->SetApart(apart);
  ExpectChangeIsTheDiff(before, Edges(*g), change);
  ExpectWellFormed(*g, 4);
  EXPECT_FALSE(Edges(*g).contains(apart[0]));
  EXPECT_EQ(g->Neighbours(banner).size(), 4u) << "the banner is filled again";
  EXPECT_LE(change.removed.size(), 3u);  // the banned edge, and at most a splice for each end
  EXPECT_TRUE(g->SetApart(apart).added.empty()) << "setting the same pairs again changes nothing";

  // Churn around them never links the pair again.
  for (uint32_t round = 0; round < 20; ++round) {
    const PeerId leaving[] = {PeerId(10 + round)};
    ASSERT_TRUE(g->Update(leaving, {}).ok());
    ASSERT_TRUE(g->Update({}, Nodes(100 + round, 1, 0)).ok());
    EXPECT_FALSE(Edges(*g).contains(apart[0])) << round;
  }
  // Lifted, the pair may meet again (nothing forces it).
  EXPECT_TRUE(g->SetApart({}).added.empty());
  ExpectWellFormed(*g, 4);
}

TEST(PeerGraph, ChurnKeepsTheGraphWholeAndFull) {
  auto g = PeerGraph::Create(Options(8));
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->Update({}, Nodes(1, 200, 20)).ok());
  uint32_t next = 1000;
  for (uint32_t round = 0; round < 50; ++round) {
    const std::set<Edge> before = Edges(*g);
    const std::vector<PeerId> members = g->Members();
    const PeerId leaving[] = {members[(round * 37) % members.size()],
                              members[(round * 53 + 11) % members.size()]};
    const std::vector<NodeInfo> joining = Nodes(next, 1 + round % 3, 20);
    next += 3;
    auto change = g->Update(leaving, joining);
    ASSERT_TRUE(change.ok());
    ExpectChangeIsTheDiff(before, Edges(*g), *change);
    ExpectWellFormed(*g, 8);
    // Two leaving of degree 8 and up to three joining at 4 dropped edges each.
    EXPECT_LE(change->removed.size(), 3u * 4u + 2u);
    EXPECT_LE(Missing(*g, 8), 1u);
  }
}

TEST(PeerGraph, SameChangesSameGraph) {
  auto run = [](uint64_t seed) {
    PeerListOptions o = Options(6);
    o.seed = seed;
    PeerGraph g = *PeerGraph::Create(o);
    EXPECT_TRUE(g.Update({}, Nodes(1, 60, 10)).ok());
    const PeerId leaving[] = {PeerId(5), PeerId(17)};
    EXPECT_TRUE(g.Update(leaving, Nodes(100, 4, 10)).ok());
    return Edges(g);
  };
  EXPECT_EQ(run(1), run(1));
  EXPECT_NE(run(1), run(2));
}

TEST(PeerGraph, ACutVertexLeavingIsRepaired) {
  // A ring of degree 2: every node is a cut vertex of the path that remains.
  auto g = PeerGraph::Create(Options(2));
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->Update({}, Nodes(1, 10, 0)).ok());
  const PeerId leaving[] = {PeerId(3), PeerId(7)};
  ASSERT_TRUE(g->Update(leaving, {}).ok());
  ExpectWellFormed(*g, 2);
  EXPECT_EQ(Missing(*g, 2), 0u);
}

TEST(PeerGraph, RefusesBadChangesAndChangesNothing) {
  auto g = PeerGraph::Create(Options(4));
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->Update({}, Nodes(1, 10, 0)).ok());
  const std::set<Edge> before = Edges(*g);
  EXPECT_FALSE(g->Update({}, Nodes(5, 1, 0)).ok());  // already in
  std::vector<NodeInfo> twice = Nodes(50, 2, 0);
  twice[1].id = twice[0].id;
  EXPECT_FALSE(g->Update({}, twice).ok());
  std::vector<NodeInfo> tiny = Nodes(60, 1, 0);
  tiny[0].degree = 1;
  EXPECT_FALSE(g->Update({}, tiny).ok());
  EXPECT_EQ(Edges(*g), before);
  // Leaving and joining again in one change is a rack or degree change.
  std::vector<NodeInfo> moved = Nodes(5, 1, 0);
  moved[0].rack = "elsewhere";
  const PeerId leaving[] = {PeerId(5)};
  EXPECT_TRUE(g->Update(leaving, moved).ok());
  EXPECT_TRUE(g->Contains(PeerId(5)));
  EXPECT_FALSE(PeerGraph::Create(Options(1)).ok());
}

}  // namespace
}  // namespace weightcast::swarm
