// The fleet's peer graph, kept up to date one membership change at a time. The coordinator
// holds one per channel and the simulator drives the same object, so what the simulator measures
// is the graph the fleet runs.
//
// A change touches only the edges it must: a node that leaves takes its own edges with it and
// the neighbours it leaves short are linked to each other (or to other short nodes); a node that
// joins links to nodes with room, and only when there are none splices itself into existing
// edges (x-y becomes x-a-y, one edge dropped for every two it gains). Every other edge stays,
// so agents keep their connections through deaths and joins elsewhere in the fleet.
//
// Pure: no I/O, no clock; seeded, so the same sequence of changes gives the same graph.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "swarm/peer_lists.h"

namespace weightcast::swarm {

struct Edge {
  PeerId a, b;  // a < b
  friend bool operator==(const Edge&, const Edge&) = default;
  friend auto operator<=>(const Edge&, const Edge&) = default;
};

// What one Update did, each list sorted. `detached` are the leaving nodes' own edges; `removed`
// are edges between nodes that stay, dropped to make room (a splice): the connections a change
// costs the rest of the fleet.
struct PeerGraphChange {
  std::vector<Edge> added;
  std::vector<Edge> removed;
  std::vector<Edge> detached;
};

class PeerGraph {
 public:
  // Fails on degree < 2 or a same_rack_fraction outside [0, 1].
  static Result<PeerGraph> Create(const PeerListOptions& options);

  // One membership change: `leaving` leave (ids not in the graph are ignored), then `joining`
  // join. A node whose rack or degree bound changed leaves and joins again. Fails, changing
  // nothing, on a joining id already in the graph (and not leaving) or listed twice, or on a
  // degree bound of 1. Keeps the graph undirected, simple, connected and within every node's
  // bound (NodeInfo::degree, else the options' degree); fills nodes up to their bound as far as
  // the graph allows, but never drops an edge to fill a node that this change did not touch.
  //
  // `keep`: edges a joiner held before this graph knew it (a coordinator that took over from
  // another learns them from its agents' registrations). Each one between a joiner and a node in
  // the graph after the change, within both bounds, is made before any other edge, so a fleet
  // that registers again with a new coordinator keeps its connections. Others are ignored.
  Result<PeerGraphChange> Update(std::span<const PeerId> leaving, std::span<const NodeInfo> joining,
                                 std::span<const Edge> keep = {});

  // Pairs kept apart (a node that banned a peer for bad data; the coordinator learns it from the
  // node's heartbeats): replaces the set. An edge between a pair now apart is dropped and both
  // ends are filled again as after a death's; no later change links such a pair. Pairs with a
  // node not in the graph stay in the set and apply once it joins.
  PeerGraphChange SetApart(std::span<const Edge> apart);

  bool Contains(PeerId node) const { return index_.contains(node); }
  size_t size() const { return index_.size(); }
  // A node's neighbours, in the order their edges were made; empty for a node not in the graph.
  std::vector<PeerId> Neighbours(PeerId node) const;
  // Every node, by id.
  std::vector<PeerId> Members() const;
  bool Connected() const;

 private:
  struct Slot {
    PeerId id;
    std::string rack;
    uint32_t bound = 0;
    std::vector<uint32_t> adj;  // slot indexes
    bool live = false;
  };
  // What the running Update has done so far, net: an edge made and dropped again is neither.
  struct Pending {
    std::set<std::pair<uint32_t, uint32_t>> added, removed;  // slot pairs, low first
    std::vector<Edge> detached;
  };

  explicit PeerGraph(const PeerListOptions& options) : options_(options), rng_(options.seed) {}

  Status CheckJoining(std::span<const PeerId> leaving, std::span<const NodeInfo> joining) const;
  void Remove(uint32_t s, Pending& pending, std::vector<uint32_t>& touched);
  uint32_t Insert(const NodeInfo& node);
  // Makes the `keep` edges that touch a joiner and fit; returns the joiners that got one.
  std::unordered_set<uint32_t> Keep(std::span<const Edge> keep, std::span<const uint32_t> joined,
                                    Pending& pending);
  void LayRing(std::span<const uint32_t> joined, Pending& pending);
  void LinkAtRandom(std::span<const uint32_t> joined, Pending& pending);
  // Joiners of a graph that exists, by slot (empty: none): how many of each other's free slots
  // each may take (0: not a joiner), and how many it took.
  struct Newcomers {
    std::vector<uint32_t> quota, links;
  };
  // Fills the free slots of `touched`, joiners within their quota of each other; `returning`
  // nodes (joiners that kept edges) only from nodes with room, never by splicing.
  void FillShort(std::vector<uint32_t> touched, Newcomers& newcomers,
                 const std::unordered_set<uint32_t>& returning, Pending& pending);
  void Reconnect(Pending& pending);
  PeerGraphChange Finish(Pending& pending) const;

  bool Linked(uint32_t a, uint32_t b) const;
  // Linked, or a pair kept apart: not a candidate for a new edge.
  bool Blocked(uint32_t a, uint32_t b) const;
  void Link(uint32_t a, uint32_t b, Pending& pending);
  void Unlink(uint32_t a, uint32_t b, Pending& pending);
  uint32_t Room(uint32_t s) const {
    return slots_[s].bound > slots_[s].adj.size()
               ? slots_[s].bound - static_cast<uint32_t>(slots_[s].adj.size())
               : 0;
  }
  // A candidate partner for `s`: from its own rack with the options' same_rack_fraction (when
  // racks are known), else from anywhere.
  uint32_t DrawPartner(uint32_t s);
  // x-y becomes a-x and b-y (a == b: x-a-y). Tries bounded random edges; false when none fits.
  bool Splice(uint32_t a, uint32_t b, Pending& pending);

  PeerListOptions options_;
  std::mt19937_64 rng_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::unordered_map<PeerId, uint32_t> index_;
  std::vector<uint32_t> members_;  // live slots, in no particular order
  std::map<std::string, std::vector<uint32_t>> racks_;
  std::set<Edge> apart_;
};

}  // namespace weightcast::swarm
