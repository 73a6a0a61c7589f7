#include "coord/membership.h"

#include <algorithm>
#include <set>

namespace weightcast::coord {
namespace {

// Each channel's graph is seeded apart, so two channels followed by the same nodes do not get
// the same edges.
uint64_t Fnv1a(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// The net change of two changes made one after the other: an edge the first made and the second
// dropped (or the reverse) is in neither list.
swarm::PeerGraphChange Combine(const swarm::PeerGraphChange& first,
                               const swarm::PeerGraphChange& second) {
  using Edges = std::set<swarm::Edge>;
  const Edges a1(first.added.begin(), first.added.end());
  const Edges r1(first.removed.begin(), first.removed.end());
  const Edges a2(second.added.begin(), second.added.end());
  const Edges r2(second.removed.begin(), second.removed.end());
  const Edges d2(second.detached.begin(), second.detached.end());
  swarm::PeerGraphChange out;
  for (const swarm::Edge& e : a1) {
    if (!r2.contains(e) && !d2.contains(e)) out.added.push_back(e);
  }
  for (const swarm::Edge& e : a2) {
    if (!r1.contains(e)) out.added.push_back(e);
  }
  for (const swarm::Edge& e : r1) {
    if (!a2.contains(e)) out.removed.push_back(e);
  }
  for (const swarm::Edge& e : r2) {
    if (!a1.contains(e)) out.removed.push_back(e);
  }
  for (const swarm::Edge& e : d2) {
    if (!a1.contains(e)) out.detached.push_back(e);
  }
  std::sort(out.added.begin(), out.added.end());
  std::sort(out.removed.begin(), out.removed.end());
  return out;
}

}  // namespace

Result<Membership> Membership::Create(const MembershipOptions& options) {
  WC_RETURN_IF_ERROR(swarm::PeerGraph::Create(options.peers).status());
  return Membership(options);
}

void Membership::Register(PeerId id, MemberInfo info, net::TimePoint now,
                          std::vector<PeerId> held) {
  Member& m = nodes_[id];
  m.info = std::move(info);
  if (!held.empty() && !first_held_.has_value()) first_held_ = now;
  m.held = std::move(held);
  quarantine_stale_ = true;
  m.alive = true;
  m.left = false;
  m.last_seen = now;
}

bool Membership::ReportBans(PeerId reporter, std::vector<PeerId> banned) {
  auto it = nodes_.find(reporter);
  if (it == nodes_.end()) return false;
  std::sort(banned.begin(), banned.end());
  banned.erase(std::unique(banned.begin(), banned.end()), banned.end());
  std::erase(banned, reporter);
  if (banned == it->second.banned) return false;
  it->second.banned = std::move(banned);
  quarantine_stale_ = true;
  return true;
}

bool Membership::quarantined(PeerId id) const {
  // Asked for every node of every decision: counted once per change of bans or liveness.
  if (quarantine_stale_) {
    std::map<PeerId, uint32_t> reports;
    for (const auto& [reporter, m] : nodes_) {
      if (!m.alive) continue;
      for (PeerId banned : m.banned) ++reports[banned];
    }
    quarantined_.clear();
    for (const auto& [banned, count] : reports) {
      if (count >= options_.quarantine_reports) quarantined_.insert(banned);
    }
    quarantine_stale_ = false;
  }
  return quarantined_.contains(id);
}

std::vector<PeerId> Membership::bans(PeerId reporter) const {
  auto it = nodes_.find(reporter);
  return it == nodes_.end() ? std::vector<PeerId>{} : it->second.banned;
}

std::vector<swarm::Edge> Membership::ApartEdges() const {
  std::vector<swarm::Edge> edges;
  for (const auto& [reporter, m] : nodes_) {
    if (!m.alive) continue;
    for (PeerId banned : m.banned) {
      edges.push_back(reporter < banned ? swarm::Edge{reporter, banned}
                                        : swarm::Edge{banned, reporter});
    }
  }
  return edges;
}

bool Membership::Settling(net::TimePoint now) const {
  if (drawn_ || !first_held_.has_value() || now - *first_held_ >= options_.settle_window) {
    return false;
  }
  for (const auto& [id, m] : nodes_) {
    if (!m.alive) continue;
    for (PeerId peer : m.held) {
      if (!alive(peer)) return true;
    }
  }
  return false;
}

std::vector<swarm::Edge> Membership::HeldEdges(
    const std::map<PeerId, swarm::NodeInfo>& members) const {
  std::vector<swarm::Edge> edges;
  for (const auto& [id, info] : members) {
    const Member& m = nodes_.at(id);
    for (PeerId peer : m.held) {
      if (!(id < peer) || !members.contains(peer)) continue;
      const std::vector<PeerId>& back = nodes_.at(peer).held;
      if (std::find(back.begin(), back.end(), id) != back.end()) edges.push_back({id, peer});
    }
  }
  return edges;
}

bool Membership::Heard(PeerId id, net::TimePoint now) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return false;
  Member& m = it->second;
  m.last_seen = now;
  if (m.alive) return false;
  m.alive = true;
  m.left = false;
  quarantine_stale_ = true;
  return true;
}

bool Membership::Leave(PeerId id, net::TimePoint now) {
  auto it = nodes_.find(id);
  if (it == nodes_.end() || it->second.left) return false;
  Member& m = it->second;
  m.left = true;
  m.alive = false;
  quarantine_stale_ = true;
  m.last_seen = now;
  return true;
}

std::vector<Membership::Death> Membership::Sweep(net::TimePoint now,
                                                 const std::function<bool(PeerId)>& may_forget,
                                                 std::vector<PeerId>* forgotten) {
  std::vector<Death> deaths;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    Member& m = it->second;
    const net::Duration silent = now - m.last_seen;
    if (m.alive && silent > options_.heartbeat_timeout) {
      m.alive = false;
      quarantine_stale_ = true;
      deaths.push_back({it->first, silent});
    }
    if (!m.alive && silent > options_.forget_after && may_forget(it->first)) {
      if (forgotten != nullptr) forgotten->push_back(it->first);
      it = nodes_.erase(it);
      quarantine_stale_ = true;
      continue;
    }
    ++it;
  }
  return deaths;
}

swarm::NodeInfo Membership::GraphInfo(PeerId id, const MemberInfo& info) const {
  swarm::NodeInfo node;
  node.id = id;
  node.rack = info.rack;
  if (info.source) node.degree = options_.source_degree;
  return node;
}

std::map<std::string, swarm::PeerGraphChange> Membership::UpdatePeerGraphs() {
  std::map<std::string, std::map<PeerId, swarm::NodeInfo>> followers;
  for (const auto& [id, m] : nodes_) {
    if (!m.alive || quarantined(id)) continue;
    for (const std::string& channel : m.info.channels)
      followers[channel][id] = GraphInfo(id, m.info);
  }
  std::map<std::string, swarm::PeerGraphChange> changes;
  for (auto it = graphs_.begin(); it != graphs_.end();) {
    if (followers.contains(it->first)) {
      ++it;
      continue;
    }
    // Nobody follows the channel any more: every edge goes with its graph.
    swarm::PeerGraphChange& gone = changes[it->first];
    for (const auto& [id, info] : it->second.members) {
      for (PeerId peer : it->second.graph.Neighbours(id)) {
        if (id < peer) gone.detached.push_back({id, peer});
      }
    }
    it = graphs_.erase(it);
  }
  for (const auto& [channel, members] : followers) {
    Result<swarm::PeerGraphChange> change = UpdateChannel(channel, members);
    // Ids are unique map keys and the options were checked by Create: a failure is a bug.
    if (change.ok() &&
        !(change->added.empty() && change->removed.empty() && change->detached.empty())) {
      changes[channel] = std::move(*change);
    }
  }
  return changes;
}

Result<swarm::PeerGraphChange> Membership::UpdateChannel(
    const std::string& channel, const std::map<PeerId, swarm::NodeInfo>& members) {
  auto it = graphs_.find(channel);
  if (it == graphs_.end()) {
    swarm::PeerListOptions o = options_.peers;
    o.seed = options_.peers.seed ^ Fnv1a(channel);
    WC_ASSIGN_OR_RETURN(swarm::PeerGraph graph, swarm::PeerGraph::Create(o));
    it = graphs_.emplace(channel, ChannelGraph{std::move(graph), {}}).first;
  }
  ChannelGraph& g = it->second;
  auto same = [](const swarm::NodeInfo& a, const swarm::NodeInfo& b) {
    return a.rack == b.rack && a.degree == b.degree;
  };
  std::vector<PeerId> leaving;
  std::vector<swarm::NodeInfo> joining;
  for (const auto& [id, info] : g.members) {
    auto now = members.find(id);
    if (now == members.end() || !same(now->second, info)) leaving.push_back(id);
  }
  for (const auto& [id, info] : members) {
    auto before = g.members.find(id);
    if (before == g.members.end() || !same(before->second, info)) joining.push_back(info);
  }
  // Bans first: a pair kept apart is never linked by the joins that follow.
  swarm::PeerGraphChange change = g.graph.SetApart(ApartEdges());
  if (leaving.empty() && joining.empty()) return change;
  const std::vector<swarm::Edge> keep = HeldEdges(members);
  WC_ASSIGN_OR_RETURN(swarm::PeerGraphChange joined, g.graph.Update(leaving, joining, keep));
  g.members = members;
  if (!members.empty()) drawn_ = true;
  return Combine(change, joined);
}

std::vector<PeerId> Membership::Peers(PeerId id) const {
  std::vector<PeerId> out;
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return out;
  for (const std::string& channel : it->second.info.channels) {
    auto g = graphs_.find(channel);
    if (g == graphs_.end()) continue;
    for (PeerId peer : g->second.graph.Neighbours(id)) {
      if (std::find(out.begin(), out.end(), peer) == out.end()) out.push_back(peer);
    }
  }
  return out;
}

bool Membership::alive(PeerId id) const {
  auto it = nodes_.find(id);
  return it != nodes_.end() && it->second.alive;
}

bool Membership::left(PeerId id) const {
  auto it = nodes_.find(id);
  return it != nodes_.end() && it->second.left;
}

net::TimePoint Membership::last_seen(PeerId id) const {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? net::TimePoint{} : it->second.last_seen;
}

}  // namespace weightcast::coord
