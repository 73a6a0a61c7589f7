// The coordinator's side of membership (docs/coordinator.md, "Membership and liveness", "Bans",
// "Peer lists"): sweeps that find deaths, the peer lists the membership core draws and which
// nodes are told, and the bans nodes report. Members of Coordinator (coordinator.h), kept apart
// from coordinator.cc; every function here but Sweep runs with mu_ held.
#include <algorithm>
#include <chrono>
#include <map>
#include <utility>
#include <vector>

#include "coord/coordinator.h"
#include "coord/coordinator_node.h"
#include "coord/writer_text.h"

namespace weightcast::coord {
namespace {

bool SamePeers(const std::vector<wire::PeerEntry>& a, const std::vector<wire::PeerEntry>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const wire::PeerEntry& x, const wire::PeerEntry& y) {
                      return x.node_id() == y.node_id() && x.address() == y.address() &&
                             x.rack() == y.rack() && x.source() == y.source();
                    });
}

}  // namespace

void Coordinator::Sweep() {
  const net::TimePoint now = clock_.Now();
  std::lock_guard lock(mu_);
  // Every channel gets a chance: a Decider may act on time alone (a rollout deadline).
  for (const auto& [name, channel] : log_->channels()) channels_to_decide_.insert(name);
  SweepLocked(now);
}

void Coordinator::MaybeSweepLocked(net::TimePoint now) {
  if (now - last_sweep_ >= sweep_period_) SweepLocked(now);
}

void Coordinator::SweepLocked(net::TimePoint now) {
  last_sweep_ = now;
  ExpirePartsLocked(now);
  // A node whose connection is still open is kept, however long dead: it may speak again.
  std::vector<PeerId> forgotten;
  const std::vector<Membership::Death> deaths = membership_.Sweep(
      now, [&](PeerId id) { return !nodes_.at(id)->connected; }, &forgotten);
  for (const Membership::Death& death : deaths) {
    membership_changed_ = true;
    ++counters_.nodes_died;
    options_.log("" + NodeName(death.id) + " (" + nodes_.at(death.id)->registration.peer_address() +
                 ") sent nothing for " +
                 std::to_string(
                     std::chrono::duration_cast<std::chrono::milliseconds>(death.silent).count()) +
                 " ms: dead");
  }
  for (PeerId id : forgotten) nodes_.erase(id);
  const bool was_settling = settling_;
  settling_ = membership_.Settling(now);
  if (was_settling && !settling_) {
    options_.log(
        "the fleet registered again: drawing the peer graphs, keeping the edges both "
        "ends held");
  }
  if (membership_changed_ && !settling_) {
    UpdatePeerListsLocked();
    for (const auto& [name, channel] : log_->channels()) channels_to_decide_.insert(name);
  }
  if (was_settling && !settling_) {
    // Every node was told to keep its list: each hears that it may drop it, even one whose new
    // list is the empty one it was served.
    const uint64_t generation = ++generation_;
    for (auto& [id, node] : nodes_) node->peers_generation = generation;
    push_pending_ = true;
    push_cv_.notify_one();
  }
  for (const std::string& name : channels_to_decide_) DecideLocked(name, now);
  channels_to_decide_.clear();
  CountMembersLocked();
}

void Coordinator::UpdatePeerListsLocked() {
  membership_changed_ = false;
  ++counters_.peer_list_builds;
  for (const auto& [channel, change] : membership_.UpdatePeerGraphs()) {
    counters_.peer_edges_added += change.added.size();
    counters_.peer_edges_dropped += change.removed.size();
  }
  // A node's list: its neighbours in every channel it follows, with what it needs to dial them
  // (addresses are re-read here, so a node that moved is dialled where it is now).
  std::map<PeerId, std::vector<wire::PeerEntry>> previous;
  previous.swap(peer_lists_);
  for (const auto& [id, node] : nodes_) {
    if (!membership_.alive(id)) continue;
    const std::vector<PeerId> peers = membership_.Peers(id);
    if (peers.empty()) continue;
    std::vector<wire::PeerEntry>& out = peer_lists_[id];
    for (PeerId peer : peers) {
      const Node& other = *nodes_.at(peer);
      wire::PeerEntry& entry = out.emplace_back();
      entry.set_node_id(peer.value());
      entry.set_address(other.registration.peer_address());
      entry.set_rack(other.registration.rack());
      entry.set_source(other.registration.source());
    }
  }
  std::map<PeerId, OriginGrant> previous_grants = std::move(origin_grants_);
  origin_grants_ = OriginGrantsLocked();
  // Only nodes whose list or grant changed are told (a long poll parked by each of them is
  // answered).
  static const std::vector<wire::PeerEntry> kNone;
  uint64_t generation = 0;
  for (auto& [id, node] : nodes_) {
    auto before = previous.find(id);
    auto after = peer_lists_.find(id);
    auto grant_before = previous_grants.find(id);
    auto grant_after = origin_grants_.find(id);
    const bool same_grant =
        (grant_before == previous_grants.end()) == (grant_after == origin_grants_.end()) &&
        (grant_after == origin_grants_.end() || grant_before->second == grant_after->second);
    if (same_grant && SamePeers(before == previous.end() ? kNone : before->second,
                                after == peer_lists_.end() ? kNone : after->second)) {
      continue;
    }
    if (generation == 0) generation = ++generation_;
    node->peers_generation = generation;
  }
  if (generation != 0) {
    push_pending_ = true;
    push_cv_.notify_one();
  }
}

// The origin shares (docs/origin.md), per channel: among the live, unquarantined agents of a
// channel that registered origin_fetch and want every tensor (a tensor-subset agent would leave
// the chunks of its stripe it does not want unfetched), at most options_.origin_fetchers picked
// evenly over their ids, each the stripe of its rank among them. An agent that follows several
// channels takes part in its first one's.
std::map<PeerId, Coordinator::OriginGrant> Coordinator::OriginGrantsLocked() const {
  std::map<std::string, std::vector<PeerId>> capable;  // by channel, ids ascending (nodes_ order)
  for (const auto& [id, node] : nodes_) {
    const wire::Register& r = node->registration;
    if (r.origin_fetch() && !r.source() && r.tensor_patterns_size() == 0 && r.channels_size() > 0 &&
        membership_.alive(id) && !membership_.quarantined(id)) {
      capable[r.channels(0)].push_back(id);
    }
  }
  std::map<PeerId, OriginGrant> grants;
  for (const auto& [channel, ids] : capable) {
    const size_t count =
        std::min<size_t>(ids.size(), std::max<uint32_t>(options_.origin_fetchers, 1));
    for (size_t j = 0; j < count; ++j) {
      grants[ids[j * ids.size() / count]] =
          OriginGrant{static_cast<uint32_t>(j), static_cast<uint32_t>(count)};
    }
  }
  return grants;
}

void Coordinator::NoteBansLocked(PeerId reporter, const wire::Heartbeat& request) {
  std::vector<PeerId> banned;
  // A node bans only peers it was connected to: its degree's worth within a ban's two minutes.
  // Past kMaxReportedBans the list is cut, so that a node cannot make the coordinator keep an
  // unbounded one.
  constexpr int kMaxReportedBans = 1024;
  for (int i = 0; i < std::min(request.banned_peers_size(), kMaxReportedBans); ++i) {
    banned.push_back(PeerId(request.banned_peers(i)));
  }
  const std::vector<PeerId> before = membership_.bans(reporter);
  std::map<PeerId, bool> was_quarantined;
  for (PeerId id : before) was_quarantined[id] = membership_.quarantined(id);
  for (PeerId id : banned) was_quarantined.try_emplace(id, membership_.quarantined(id));
  if (!membership_.ReportBans(reporter, banned)) return;
  membership_changed_ = true;
  for (const auto& [id, was] : was_quarantined) {
    if (!std::binary_search(before.begin(), before.end(), id) &&
        std::find(banned.begin(), banned.end(), id) != banned.end()) {
      options_.log(NodeName(reporter) + " bans " + NodeName(id) +
                   " (it sent bad data): they are kept apart in the peer graph");
    }
    const bool is = membership_.quarantined(id);
    if (is && !was) {
      options_.log(NodeName(id) +
                   " is quarantined: live nodes ban it for bad data; it leaves "
                   "the peer graphs and rollout decisions until they lift their bans");
    } else if (was && !is) {
      options_.log(NodeName(id) + " is no longer quarantined");
    }
  }
}

}  // namespace weightcast::coord
