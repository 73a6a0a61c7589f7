#include "swarm/peer_lists.h"

#include <algorithm>
#include <map>
#include <random>
#include <unordered_set>

namespace weightcast::swarm {

Result<std::vector<std::vector<PeerId>>> BuildPeerLists(std::span<const NodeInfo> nodes,
                                                        const PeerListOptions& options) {
  const size_t n = nodes.size();
  if (options.degree < 2) return InvalidArgument("peer lists: degree must be at least 2");
  for (const NodeInfo& node : nodes) {
    if (node.degree == 1) return InvalidArgument("peer lists: degree must be at least 2");
  }
  if (options.same_rack_fraction < 0 || options.same_rack_fraction > 1) {
    return InvalidArgument("peer lists: same_rack_fraction must be in [0, 1]");
  }
  {
    std::unordered_set<PeerId> seen;
    for (const NodeInfo& node : nodes) {
      if (!seen.insert(node.id).second) {
        return InvalidArgument("peer lists: duplicate node id " + std::to_string(node.id.value()));
      }
    }
  }
  std::vector<std::vector<uint32_t>> adj(n);
  std::vector<std::vector<PeerId>> out(n);
  if (n < 2) return out;
  std::mt19937_64 rng(options.seed);

  // Racks in a shuffled order, nodes shuffled inside each rack.
  std::map<std::string, std::vector<uint32_t>> by_rack;
  for (uint32_t i = 0; i < n; ++i) by_rack[nodes[i].rack].push_back(i);
  std::vector<std::vector<uint32_t>*> racks;
  for (auto& [name, members] : by_rack) {
    std::shuffle(members.begin(), members.end(), rng);
    racks.push_back(&members);
  }
  std::shuffle(racks.begin(), racks.end(), rng);
  std::vector<uint32_t> order;
  order.reserve(n);
  for (auto* members : racks) order.insert(order.end(), members->begin(), members->end());

  auto connected = [&](uint32_t a, uint32_t b) {
    return std::find(adj[a].begin(), adj[a].end(), b) != adj[a].end();
  };
  auto link = [&](uint32_t a, uint32_t b) {
    adj[a].push_back(b);
    adj[b].push_back(a);
  };
  // The ring keeps the graph connected; grouped by rack, it crosses each rack boundary once.
  if (n == 2) {
    link(order[0], order[1]);
  } else {
    for (size_t k = 0; k < n; ++k) link(order[k], order[(k + 1) % n]);
  }

  auto bound = [&](uint32_t i) { return nodes[i].degree != 0 ? nodes[i].degree : options.degree; };
  std::vector<uint32_t> visit(order);
  std::shuffle(visit.begin(), visit.end(), rng);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (uint32_t a : visit) {
    const std::vector<uint32_t>& own_rack = by_rack[nodes[a].rack];
    const bool racks_known = !nodes[a].rack.empty() && by_rack.size() > 1;
    // Bounded tries: late in the pass most candidates are full, and a node left short of the
    // degree is fine (the bound is a maximum).
    const uint32_t degree = bound(a);
    for (int tries = 0; adj[a].size() < degree && tries < 8 * static_cast<int>(degree); ++tries) {
      uint32_t b;
      if (racks_known && unit(rng) < options.same_rack_fraction) {
        b = own_rack[rng() % own_rack.size()];
      } else {
        b = static_cast<uint32_t>(rng() % n);
      }
      if (b == a || adj[b].size() >= bound(b) || connected(a, b)) continue;
      link(a, b);
    }
  }
  // Repair: a node left two or more short (its candidates filled up first) splices itself into
  // an existing edge x-y, becoming x-a-y. x and y keep their degree and stay connected via a.
  auto unlink = [&](uint32_t a, uint32_t b) {
    adj[a].erase(std::find(adj[a].begin(), adj[a].end(), b));
    adj[b].erase(std::find(adj[b].begin(), adj[b].end(), a));
  };
  for (uint32_t a : visit) {
    const std::vector<uint32_t>& own_rack = by_rack[nodes[a].rack];
    const bool racks_known = !nodes[a].rack.empty() && by_rack.size() > 1;
    for (int tries = 0; adj[a].size() + 2 <= bound(a) && tries < 64; ++tries) {
      const bool local = racks_known && unit(rng) < options.same_rack_fraction;
      const uint32_t x =
          local ? own_rack[rng() % own_rack.size()] : static_cast<uint32_t>(rng() % n);
      if (x == a || connected(a, x) || adj[x].empty()) continue;
      const uint32_t y = adj[x][rng() % adj[x].size()];
      if (y == a || connected(a, y)) continue;
      unlink(x, y);
      link(a, x);
      link(a, y);
    }
  }
  // Top-up: nodes still one short (splicing needs two free slots; the random pass fills a node's
  // last slot only by chance). A receiver's completion time is S/B plus the time its download
  // was not full, and one peer fewer of 24 measurably slows it (docs/bench/sim.md), so every free
  // slot is filled while two remain: two short nodes link; a short node whose only short partner
  // is itself or already its neighbour takes over an edge x-y of two others (a-x, b-y), which
  // keeps x and y at their degree and the graph connected (x-a-b-y or x-a-y). Only the parity of
  // the degree sum can leave one slot free.
  {
    std::vector<uint32_t> open;  // one entry per free slot
    for (uint32_t a : visit) {
      for (size_t k = adj[a].size(); k < bound(a); ++k) open.push_back(a);
    }
    while (open.size() >= 2) {
      const uint32_t a = open.back();
      open.pop_back();
      bool done = false;
      for (size_t k = open.size(); k-- > 0;) {
        const uint32_t b = open[k];
        if (b == a || connected(a, b)) continue;
        link(a, b);
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(k));
        done = true;
        break;
      }
      if (done) continue;
      const uint32_t b = open.back();  // a itself, or a neighbour of a
      const std::vector<uint32_t>& own_rack = by_rack[nodes[a].rack];
      const bool racks_known = !nodes[a].rack.empty() && by_rack.size() > 1;
      for (int tries = 0; tries < 256 && !done; ++tries) {
        const bool local = racks_known && unit(rng) < options.same_rack_fraction;
        const uint32_t x =
            local ? own_rack[rng() % own_rack.size()] : static_cast<uint32_t>(rng() % n);
        if (x == a || x == b || adj[x].empty() || connected(a, x)) continue;
        const uint32_t y = adj[x][rng() % adj[x].size()];
        if (y == a || y == b || connected(b, y)) continue;
        unlink(x, y);
        link(a, x);
        link(b, y);
        done = true;
      }
      if (done) open.pop_back();  // else a stays short: the bound is a maximum
    }
  }
  for (size_t i = 0; i < n; ++i) {
    out[i].reserve(adj[i].size());
    for (uint32_t j : adj[i]) out[i].push_back(nodes[j].id);
  }
  return out;
}

}  // namespace weightcast::swarm
