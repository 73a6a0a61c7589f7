#include "swarm/peer_graph.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <unordered_set>

namespace weightcast::swarm {
namespace {

std::pair<uint32_t, uint32_t> Key(uint32_t a, uint32_t b) { return std::minmax(a, b); }

Edge MakeEdge(PeerId x, PeerId y) { return x < y ? Edge{x, y} : Edge{y, x}; }

// Tries for a random edge to splice: enough that a fitting one is found whenever a few percent
// of the graph's edges fit, few enough that a hopeless search stays cheap.
constexpr int kSpliceTries = 256;

}  // namespace

Result<PeerGraph> PeerGraph::Create(const PeerListOptions& options) {
  if (options.degree < 2) return InvalidArgument("peer lists: degree must be at least 2");
  if (options.same_rack_fraction < 0 || options.same_rack_fraction > 1) {
    return InvalidArgument("peer lists: same_rack_fraction must be in [0, 1]");
  }
  return PeerGraph(options);
}

Status PeerGraph::CheckJoining(std::span<const PeerId> leaving,
                               std::span<const NodeInfo> joining) const {
  const std::unordered_set<PeerId> gone(leaving.begin(), leaving.end());
  std::unordered_set<PeerId> seen;
  for (const NodeInfo& node : joining) {
    if (node.degree == 1) return InvalidArgument("peer lists: degree must be at least 2");
    if (!seen.insert(node.id).second || (index_.contains(node.id) && !gone.contains(node.id))) {
      return InvalidArgument("peer lists: duplicate node id " + std::to_string(node.id.value()));
    }
  }
  return Status::Ok();
}

Result<PeerGraphChange> PeerGraph::Update(std::span<const PeerId> leaving,
                                          std::span<const NodeInfo> joining,
                                          std::span<const Edge> keep) {
  WC_RETURN_IF_ERROR(CheckJoining(leaving, joining));
  Pending pending;
  std::vector<uint32_t> touched;  // nodes this change left short or added
  std::vector<uint32_t> freed;    // reused only after this change, so slot pairs stay unambiguous
  for (PeerId id : leaving) {
    auto it = index_.find(id);
    if (it == index_.end()) continue;
    const uint32_t s = it->second;
    Remove(s, pending, touched);
    freed.push_back(s);
  }
  const bool was_empty = members_.empty();
  std::vector<uint32_t> joined;
  joined.reserve(joining.size());
  for (const NodeInfo& node : joining) joined.push_back(Insert(node));
  free_slots_.insert(free_slots_.end(), freed.begin(), freed.end());
  const std::unordered_set<uint32_t> returning = Keep(keep, joined, pending);

  // A first graph starts from a ring over rack-grouped nodes: connected from the start, and it
  // crosses each rack boundary once; then random edges among its nodes. Nodes joining a graph
  // that exists get no such pass: linked to each other first, a batch of joiners would form a
  // cluster of its own behind a few edges (50 joining 950 at degree 24 took 1.5x as long as
  // lone joiners do). They take free slots of the nodes already in, and of each other only up to
  // their share of a random graph (J joining N: J / (N + J) of their degree), then splice into
  // edges drawn across the whole graph (FillShort).
  // A first graph that kept edges from before gets no ring: the kept edges are most of it, and
  // Reconnect joins whatever parts they leave.
  Newcomers newcomers;
  if (was_empty) {
    if (returning.empty()) LayRing(joined, pending);
    LinkAtRandom(joined, pending);
  } else if (!joined.empty()) {
    newcomers.quota.assign(slots_.size(), 0);
    newcomers.links.assign(slots_.size(), 0);
    const double share = double(joined.size()) / double(members_.size());
    for (uint32_t s : joined) {
      newcomers.quota[s] = static_cast<uint32_t>(std::ceil(share * slots_[s].bound));
    }
  }
  touched.insert(touched.end(), joined.begin(), joined.end());
  FillShort(std::move(touched), newcomers, returning, pending);
  Reconnect(pending);
  return Finish(pending);
}

void PeerGraph::Remove(uint32_t s, Pending& pending, std::vector<uint32_t>& touched) {
  Slot& slot = slots_[s];
  for (uint32_t b : slot.adj) {
    std::vector<uint32_t>& back = slots_[b].adj;
    back.erase(std::find(back.begin(), back.end(), s));
    pending.detached.push_back(MakeEdge(slot.id, slots_[b].id));
    touched.push_back(b);
  }
  slot.adj.clear();
  slot.live = false;
  index_.erase(slot.id);
  members_.erase(std::find(members_.begin(), members_.end(), s));
  std::vector<uint32_t>& rack = racks_[slot.rack];
  rack.erase(std::find(rack.begin(), rack.end(), s));
  if (rack.empty()) racks_.erase(slot.rack);
}

uint32_t PeerGraph::Insert(const NodeInfo& node) {
  uint32_t s;
  if (!free_slots_.empty()) {
    s = free_slots_.back();
    free_slots_.pop_back();
  } else {
    s = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& slot = slots_[s];
  slot.id = node.id;
  slot.rack = node.rack;
  slot.bound = node.degree != 0 ? node.degree : options_.degree;
  slot.live = true;
  index_[node.id] = s;
  members_.push_back(s);
  racks_[node.rack].push_back(s);
  return s;
}

std::unordered_set<uint32_t> PeerGraph::Keep(std::span<const Edge> keep,
                                             std::span<const uint32_t> joined, Pending& pending) {
  std::unordered_set<uint32_t> returning;
  if (keep.empty() || joined.empty()) return returning;
  const std::unordered_set<uint32_t> joiners(joined.begin(), joined.end());
  for (const Edge& e : keep) {
    auto a = index_.find(e.a);
    auto b = index_.find(e.b);
    if (a == index_.end() || b == index_.end() || a->second == b->second) continue;
    const uint32_t x = a->second;
    const uint32_t y = b->second;
    if (!joiners.contains(x) && !joiners.contains(y)) continue;
    if (Room(x) == 0 || Room(y) == 0 || Blocked(x, y)) continue;
    Link(x, y, pending);
    if (joiners.contains(x)) returning.insert(x);
    if (joiners.contains(y)) returning.insert(y);
  }
  return returning;
}

void PeerGraph::LayRing(std::span<const uint32_t> joined, Pending& pending) {
  // Racks in a shuffled order, nodes shuffled inside each rack.
  std::map<std::string, std::vector<uint32_t>> by_rack;
  for (uint32_t s : joined) by_rack[slots_[s].rack].push_back(s);
  std::vector<std::vector<uint32_t>*> racks;
  for (auto& [name, members] : by_rack) {
    std::shuffle(members.begin(), members.end(), rng_);
    racks.push_back(&members);
  }
  std::shuffle(racks.begin(), racks.end(), rng_);
  std::vector<uint32_t> order;
  order.reserve(joined.size());
  for (auto* members : racks) order.insert(order.end(), members->begin(), members->end());
  const size_t n = order.size();
  if (n == 2) {
    Link(order[0], order[1], pending);
  } else if (n > 2) {
    for (size_t k = 0; k < n; ++k) Link(order[k], order[(k + 1) % n], pending);
  }
}

void PeerGraph::LinkAtRandom(std::span<const uint32_t> joined, Pending& pending) {
  std::vector<uint32_t> visit(joined.begin(), joined.end());
  std::shuffle(visit.begin(), visit.end(), rng_);
  for (uint32_t a : visit) {
    // Bounded tries: late in the pass most candidates are full; FillShort finishes the job.
    const int tries_left = 8 * static_cast<int>(slots_[a].bound);
    for (int tries = 0; Room(a) > 0 && tries < tries_left; ++tries) {
      const uint32_t b = DrawPartner(a);
      if (b == a || Room(b) == 0 || Blocked(a, b)) continue;
      Link(a, b, pending);
    }
  }
}

// A receiver's completion time is S/B plus the time its download was not full, and one peer
// fewer of 24 measurably slows it (docs/bench/sim.md), so every free slot of a touched node is
// filled while the graph allows: first from nodes with room (no edge lost), then by splicing.
// Only the parity of the degree sum, or a graph too small, leaves a slot free.
void PeerGraph::FillShort(std::vector<uint32_t> touched, Newcomers& newcomers,
                          const std::unordered_set<uint32_t>& returning, Pending& pending) {
  // Two joiners of this change may link by free slots while both are under their quota.
  auto allowed = [&](uint32_t a, uint32_t b) {
    if (newcomers.quota.empty() || newcomers.quota[a] == 0 || newcomers.quota[b] == 0) {
      return true;
    }
    return newcomers.links[a] < newcomers.quota[a] && newcomers.links[b] < newcomers.quota[b];
  };
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  std::shuffle(touched.begin(), touched.end(), rng_);
  std::vector<uint32_t> open;  // every live node with room, in a seeded order
  for (uint32_t s : members_) {
    if (Room(s) > 0) open.push_back(s);
  }
  std::sort(open.begin(), open.end());
  std::shuffle(open.begin(), open.end(), rng_);
  auto drop_full = [&](uint32_t s) {
    if (Room(s) > 0) return;
    auto it = std::find(open.begin(), open.end(), s);
    if (it != open.end()) open.erase(it);
  };
  for (uint32_t a : touched) {
    if (!slots_[a].live) continue;
    while (Room(a) > 0) {
      auto partner = std::find_if(open.begin(), open.end(), [&](uint32_t b) {
        return b != a && Room(b) > 0 && !Blocked(a, b) && allowed(a, b);
      });
      if (partner != open.end()) {
        const uint32_t b = *partner;
        Link(a, b, pending);
        if (!newcomers.quota.empty() && newcomers.quota[a] != 0 && newcomers.quota[b] != 0) {
          ++newcomers.links[a];
          ++newcomers.links[b];
        }
        drop_full(b);
        continue;
      }
      // A node back with its old edges is as full as it was: no edge of others is dropped
      // to fill it further.
      if (returning.contains(a)) break;
      if (Room(a) >= 2) {
        if (!Splice(a, a, pending)) break;
        continue;
      }
      // One slot left and every node with room is a already linked: such a neighbour b and a
      // take over one edge x-y of two others (a-x, b-y), which keeps x and y at their degree.
      auto neighbour =
          std::find_if(open.begin(), open.end(), [&](uint32_t b) { return b != a && Room(b) > 0; });
      if (neighbour == open.end()) break;
      const uint32_t b = *neighbour;
      if (!Splice(a, b, pending)) break;
      drop_full(b);
    }
    drop_full(a);
  }
}

bool PeerGraph::Splice(uint32_t a, uint32_t b, Pending& pending) {
  // Edges are drawn across the whole graph, those this change made included, and none preferred:
  // preferring the new ones would splice a batch of joiners into each other's edges.
  for (int tries = 0; tries < kSpliceTries; ++tries) {
    const uint32_t x = DrawPartner(a);
    if (x == a || x == b || slots_[x].adj.empty() || Blocked(a, x)) continue;
    const uint32_t y = slots_[x].adj[rng_() % slots_[x].adj.size()];
    if (y == a || y == b || Blocked(b, y)) continue;
    Unlink(x, y, pending);
    Link(a, x, pending);
    Link(b, y, pending);
    return true;
  }
  return false;
}

// A change can split the graph (a leaving cut vertex, joiners that found room only among
// themselves). Each smaller component is joined to the largest by trading one edge of each,
// a-b and x-y, for a-x and b-y: nobody's degree changes.
void PeerGraph::Reconnect(Pending& pending) {
  for (int round = 0; round < 64; ++round) {
    std::unordered_map<uint32_t, uint32_t> component;
    std::vector<std::vector<uint32_t>> parts;
    std::vector<uint32_t> sorted(members_);
    std::sort(sorted.begin(), sorted.end());
    for (uint32_t start : sorted) {
      if (component.contains(start)) continue;
      const uint32_t label = static_cast<uint32_t>(parts.size());
      std::vector<uint32_t>& part = parts.emplace_back();
      std::queue<uint32_t> bfs;
      bfs.push(start);
      component[start] = label;
      while (!bfs.empty()) {
        const uint32_t s = bfs.front();
        bfs.pop();
        part.push_back(s);
        for (uint32_t t : slots_[s].adj) {
          if (component.emplace(t, label).second) bfs.push(t);
        }
      }
    }
    if (parts.size() <= 1) return;
    const size_t main = static_cast<size_t>(
        std::max_element(parts.begin(), parts.end(),
                         [](const auto& l, const auto& r) { return l.size() < r.size(); }) -
        parts.begin());
    for (size_t k = 0; k < parts.size(); ++k) {
      if (k == main) continue;
      const uint32_t a = parts[k].front();
      const std::vector<uint32_t>& big = parts[main];
      const uint32_t x = big[rng_() % big.size()];
      if (slots_[x].adj.empty()) {  // the largest part is one node: so is every part
        if (Room(a) > 0 && Room(x) > 0) Link(a, x, pending);
        continue;
      }
      const uint32_t y = slots_[x].adj[rng_() % slots_[x].adj.size()];
      if (slots_[a].adj.empty()) {
        if (Room(a) < 2) continue;  // a bound of 1 cannot happen (Create, CheckJoining)
        Unlink(x, y, pending);
        Link(a, x, pending);
        Link(a, y, pending);
        continue;
      }
      const uint32_t b = slots_[a].adj.front();
      Unlink(a, b, pending);
      Unlink(x, y, pending);
      Link(a, x, pending);
      Link(b, y, pending);
    }
  }
}

PeerGraphChange PeerGraph::Finish(Pending& pending) const {
  PeerGraphChange change;
  for (const auto& [a, b] : pending.added)
    change.added.push_back(MakeEdge(slots_[a].id, slots_[b].id));
  for (const auto& [a, b] : pending.removed) {
    change.removed.push_back(MakeEdge(slots_[a].id, slots_[b].id));
  }
  change.detached = std::move(pending.detached);
  std::sort(change.added.begin(), change.added.end());
  std::sort(change.removed.begin(), change.removed.end());
  std::sort(change.detached.begin(), change.detached.end());
  return change;
}

bool PeerGraph::Blocked(uint32_t a, uint32_t b) const {
  return Linked(a, b) || (!apart_.empty() && apart_.contains(MakeEdge(slots_[a].id, slots_[b].id)));
}

PeerGraphChange PeerGraph::SetApart(std::span<const Edge> apart) {
  apart_.clear();
  for (const Edge& e : apart) {
    if (e.a != e.b) apart_.insert(MakeEdge(e.a, e.b));
  }
  Pending pending;
  std::vector<uint32_t> touched;
  for (const Edge& e : apart_) {
    auto a = index_.find(e.a);
    auto b = index_.find(e.b);
    if (a == index_.end() || b == index_.end() || !Linked(a->second, b->second)) continue;
    Unlink(a->second, b->second, pending);
    touched.push_back(a->second);
    touched.push_back(b->second);
  }
  if (touched.empty()) return {};
  Newcomers none;
  FillShort(std::move(touched), none, {}, pending);
  Reconnect(pending);
  return Finish(pending);
}

bool PeerGraph::Linked(uint32_t a, uint32_t b) const {
  const std::vector<uint32_t>& adj = slots_[a].adj;
  return std::find(adj.begin(), adj.end(), b) != adj.end();
}

void PeerGraph::Link(uint32_t a, uint32_t b, Pending& pending) {
  slots_[a].adj.push_back(b);
  slots_[b].adj.push_back(a);
  if (pending.removed.erase(Key(a, b)) == 0) pending.added.insert(Key(a, b));
}

void PeerGraph::Unlink(uint32_t a, uint32_t b, Pending& pending) {
  std::vector<uint32_t>& from_a = slots_[a].adj;
  from_a.erase(std::find(from_a.begin(), from_a.end(), b));
  std::vector<uint32_t>& from_b = slots_[b].adj;
  from_b.erase(std::find(from_b.begin(), from_b.end(), a));
  if (pending.added.erase(Key(a, b)) == 0) pending.removed.insert(Key(a, b));
}

uint32_t PeerGraph::DrawPartner(uint32_t s) {
  const Slot& slot = slots_[s];
  const bool racks_known = !slot.rack.empty() && racks_.size() > 1;
  if (racks_known &&
      std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < options_.same_rack_fraction) {
    const std::vector<uint32_t>& rack = racks_.at(slot.rack);
    return rack[rng_() % rack.size()];
  }
  return members_[rng_() % members_.size()];
}

std::vector<PeerId> PeerGraph::Neighbours(PeerId node) const {
  std::vector<PeerId> out;
  auto it = index_.find(node);
  if (it == index_.end()) return out;
  out.reserve(slots_[it->second].adj.size());
  for (uint32_t t : slots_[it->second].adj) out.push_back(slots_[t].id);
  return out;
}

std::vector<PeerId> PeerGraph::Members() const {
  std::vector<PeerId> out;
  out.reserve(index_.size());
  for (const auto& [id, slot] : index_) out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

bool PeerGraph::Connected() const {
  if (members_.empty()) return true;
  std::unordered_set<uint32_t> seen{members_.front()};
  std::queue<uint32_t> bfs;
  bfs.push(members_.front());
  while (!bfs.empty()) {
    const uint32_t s = bfs.front();
    bfs.pop();
    for (uint32_t t : slots_[s].adj) {
      if (seen.insert(t).second) bfs.push(t);
    }
  }
  return seen.size() == members_.size();
}

}  // namespace weightcast::swarm
