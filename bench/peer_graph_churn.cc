// What one membership change costs the rest of the fleet's connections: a fleet's peer graph
// through deaths and late joins, two ways side by side on the same membership sequence.
//   incremental: swarm::PeerGraph, what the coordinator and the simulator run;
//   rebuild:     a whole new graph over the new membership (swarm::BuildPeerLists with the same
//                seed), which is what a coordinator that rebuilds on every change hands out.
// "dropped" counts edges between nodes that stay which the change removed (each one a
// connection an agent closes, "no longer listed"); a leaving node's own edges are counted
// apart. Usage: bench_peer_graph_churn [nodes degree racks deaths joins]...
// (default: 1000 24 40 10 50, 30 4 0 1 0, 16 4 0 1 0). Last line: one JSON object.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "swarm/peer_graph.h"

namespace {

using weightcast::PeerId;
using weightcast::swarm::BuildPeerLists;
using weightcast::swarm::Edge;
using weightcast::swarm::NodeInfo;
using weightcast::swarm::PeerGraph;
using weightcast::swarm::PeerListOptions;

struct Scenario {
  uint32_t nodes, degree, rack_size, deaths, joins;
};

struct Tally {
  uint64_t events = 0, dropped = 0, max_dropped = 0, own = 0, changed_lists = 0;
  void Add(uint64_t d, uint64_t o, uint64_t lists) {
    ++events;
    dropped += d;
    max_dropped = std::max(max_dropped, d);
    own += o;
    changed_lists += lists;
  }
  std::string Json() const {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "{\"events\":%llu,\"dropped_per_event\":%.2f,\"max_dropped\":%llu,"
                  "\"own_edges_per_event\":%.2f,\"changed_lists_per_event\":%.2f}",
                  static_cast<unsigned long long>(events), double(dropped) / double(events),
                  static_cast<unsigned long long>(max_dropped), double(own) / double(events),
                  double(changed_lists) / double(events));
    return buf;
  }
};

using Lists = std::map<PeerId, std::set<PeerId>>;

std::set<Edge> EdgesOf(const Lists& lists) {
  std::set<Edge> out;
  for (const auto& [a, peers] : lists) {
    for (PeerId b : peers) out.insert(a < b ? Edge{a, b} : Edge{b, a});
  }
  return out;
}

// Edges between staying nodes that `after` lacks, the leaving node's own edges, and the number
// of staying nodes whose list changed.
void Compare(const Lists& before, const Lists& after, uint64_t& dropped, uint64_t& own,
             uint64_t& changed) {
  dropped = own = changed = 0;
  for (const Edge& e : EdgesOf(before)) {
    const bool a_stays = after.contains(e.a), b_stays = after.contains(e.b);
    if (!a_stays || !b_stays) {
      ++own;
    } else if (!after.at(e.a).contains(e.b)) {
      ++dropped;
    }
  }
  for (const auto& [id, peers] : after) {
    auto it = before.find(id);
    if (it != before.end() && it->second != peers) ++changed;
  }
}

Lists ListsOf(const PeerGraph& g) {
  Lists out;
  for (PeerId id : g.Members()) {
    const std::vector<PeerId> nb = g.Neighbours(id);
    out[id] = std::set<PeerId>(nb.begin(), nb.end());
  }
  return out;
}

Lists Rebuilt(const std::vector<NodeInfo>& members, const PeerListOptions& o) {
  auto lists = BuildPeerLists(members, o);
  if (!lists.ok()) {
    std::fprintf(stderr, "%s\n", lists.status().ToString().c_str());
    std::exit(1);
  }
  Lists out;
  for (size_t i = 0; i < members.size(); ++i) {
    out[members[i].id] = std::set<PeerId>((*lists)[i].begin(), (*lists)[i].end());
  }
  return out;
}

std::string Run(const Scenario& s) {
  PeerListOptions o;
  o.degree = s.degree;
  o.seed = 7;
  auto info = [&](uint32_t i) {
    NodeInfo n;
    n.id = PeerId(i + 1);
    if (s.rack_size > 0) n.rack = "r" + std::to_string(i / s.rack_size);
    return n;
  };
  std::vector<NodeInfo> members;
  for (uint32_t i = 0; i < s.nodes; ++i) members.push_back(info(i));
  auto made = PeerGraph::Create(o);
  PeerGraph graph = *made;
  if (!graph.Update({}, members).ok()) std::exit(1);
  Lists incremental = ListsOf(graph);
  Lists rebuilt = Rebuilt(members, o);
  // The membership sequence: deaths and joins interleaved, drawn from a fixed seed.
  std::mt19937_64 rng(11);
  std::vector<char> events(s.deaths, 'd');
  events.insert(events.end(), s.joins, 'j');
  std::shuffle(events.begin(), events.end(), rng);
  uint32_t next = s.nodes;
  // Per kind of event: deaths and joins cost differently.
  std::map<char, Tally> inc, reb;
  for (char kind : events) {
    std::vector<PeerId> leaving;
    std::vector<NodeInfo> joining;
    if (kind == 'd') {
      const size_t k = rng() % members.size();
      leaving.push_back(members[k].id);
      members.erase(members.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      joining.push_back(info(next++));
      members.push_back(joining.back());
    }
    if (!graph.Update(leaving, joining).ok()) std::exit(1);
    const Lists inc_after = ListsOf(graph);
    const Lists reb_after = Rebuilt(members, o);
    uint64_t d, own, changed;
    Compare(incremental, inc_after, d, own, changed);
    inc[kind].Add(d, own, changed);
    Compare(rebuilt, reb_after, d, own, changed);
    reb[kind].Add(d, own, changed);
    incremental = inc_after;
    rebuilt = reb_after;
  }
  std::string json;
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "{\"nodes\":%u,\"degree\":%u,\"rack_size\":%u,\"deaths\":%u,\"joins\":%u", s.nodes,
                s.degree, s.rack_size, s.deaths, s.joins);
  json = buf;
  for (const auto& [kind, name] : {std::pair{'d', "death"}, std::pair{'j', "join"}}) {
    if (!inc.contains(kind)) continue;
    const Tally& a = inc[kind];
    const Tally& b = reb[kind];
    std::fprintf(
        stderr,
        "%u nodes, degree %u, racks of %u: per %s, edges dropped %.2f (max %llu) "
        "incremental vs %.2f (max %llu) rebuilt; lists changed %.2f vs %.2f; the "
        "leaving node's own edges %.2f\n",
        s.nodes, s.degree, s.rack_size, name, double(a.dropped) / double(a.events),
        static_cast<unsigned long long>(a.max_dropped), double(b.dropped) / double(b.events),
        static_cast<unsigned long long>(b.max_dropped), double(a.changed_lists) / double(a.events),
        double(b.changed_lists) / double(b.events), double(a.own) / double(a.events));
    json += std::string(",\"") + name + "\":{\"incremental\":" + a.Json() +
            ",\"rebuild\":" + b.Json() + "}";
  }
  return json + "}";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Scenario> scenarios;
  if (argc == 1) {
    scenarios = {{1000, 24, 40, 10, 50}, {30, 4, 0, 1, 0}, {16, 4, 0, 1, 0}};
  } else if ((argc - 1) % 5 != 0) {
    std::fprintf(stderr, "usage: %s [nodes degree rack_size deaths joins]...\n", argv[0]);
    return 2;
  } else {
    for (int i = 1; i + 4 < argc; i += 5) {
      auto n = [&](int k) { return static_cast<uint32_t>(std::strtoul(argv[i + k], nullptr, 10)); };
      const Scenario s{n(0), n(1), n(2), n(3), n(4)};
      if (s.nodes < 3 || s.degree < 2 || s.deaths >= s.nodes || s.deaths + s.joins == 0) {
        std::fprintf(stderr,
                     "bad scenario: need nodes >= 3, degree >= 2, deaths < nodes, "
                     "and at least one event\n");
        return 2;
      }
      scenarios.push_back(s);
    }
  }
  // Scenarios keyed "<nodes>x<degree>" (the first of a repeated key wins in most readers).
  std::string out = "{\"bench\":\"peer_graph_churn\",\"scenarios\":{";
  for (size_t i = 0; i < scenarios.size(); ++i) {
    const Scenario& s = scenarios[i];
    out += std::string(i ? "," : "") + "\"" + std::to_string(s.nodes) + "x" +
           std::to_string(s.degree) + "\":" + Run(s);
  }
  std::printf("%s}}\n", out.c_str());
  return 0;
}
