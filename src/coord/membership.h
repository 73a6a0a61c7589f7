// Who is in the fleet, who is alive, and who connects to whom: the coordinator's membership
// decisions as a pure core. No I/O, no clock: every call is given the time. The coordinator
// (coord/coordinator.cc) feeds it registrations, heartbeats, leaves and sweeps and serves what it
// decides; the simulator (sim/fleet.cc) drives the same object, so the deaths, joins and peer
// graph changes it measures are the ones the fleet runs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "net/clock.h"
#include "swarm/peer_graph.h"

namespace weightcast::coord {

// What a node registered with that shapes the peer graphs.
struct MemberInfo {
  std::vector<std::string> channels;
  std::string rack;
  bool source = false;  // a publisher seeding its versions: a larger degree bound
  friend bool operator==(const MemberInfo&, const MemberInfo&) = default;
};

struct MembershipOptions {
  net::Duration heartbeat_timeout = std::chrono::seconds(3);  // silent longer: dead
  net::Duration forget_after = std::chrono::minutes(10);      // dead or left longer: forgotten
  // How long drawing the graphs may wait for a fleet registering again (Settling).
  net::Duration settle_window = std::chrono::seconds(5);
  // A node that this many live nodes report banned (it sent them bad data) is quarantined: out of
  // every peer graph and of rollout decisions. Above 1, so that one compromised node cannot
  // quarantine another.
  uint32_t quarantine_reports = 2;
  swarm::PeerListOptions peers;  // degree, rack share, seed
  uint32_t source_degree = 0;    // a source's bound in the graphs; 0: peers.degree
};

class Membership {
 public:
  // Fails on peer-graph options PeerGraph refuses.
  static Result<Membership> Create(const MembershipOptions& options);

  // A registration: the node is alive from `now`, following info.channels. `held`: the peers the
  // node was listed with before (by a coordinator this one took over from, or before it was
  // found dead); an edge both ends name is kept when they join a graph again.
  void Register(PeerId id, MemberInfo info, net::TimePoint now, std::vector<PeerId> held = {});

  // True while a fleet registers again with a membership that has drawn no graph yet (a
  // coordinator that has just taken over): some node registered naming peers it held, one of
  // those has not registered yet, and the first such registration is less than settle_window
  // old. Drawing the graphs waits meanwhile, so that every node joins them at once with
  // its old edges (PeerGraph::Update's `keep`) instead of the first ones filling their slots with
  // strangers. False for a fleet that starts fresh: nobody names a peer.
  bool Settling(net::TimePoint now) const;
  // A heartbeat. True when the node was dead or had left and is back (the same registration).
  bool Heard(PeerId id, net::TimePoint now);
  // Left on purpose: not alive, forgotten forget_after from now. False when unknown or gone.
  bool Leave(PeerId id, net::TimePoint now);

  struct Death {
    PeerId id;
    net::Duration silent;
  };
  // Marks dead every alive node silent for more than heartbeat_timeout, and forgets the nodes
  // dead or left for more than forget_after that `may_forget` allows (the coordinator keeps a
  // node whose connection is still open). Returns the deaths; `forgotten` gets the others.
  std::vector<Death> Sweep(net::TimePoint now, const std::function<bool(PeerId)>& may_forget,
                           std::vector<PeerId>* forgotten = nullptr);

  // Brings every channel's peer graph up to date with the alive nodes following it: the nodes
  // that died, left or stopped following leave it, new ones join (in id order), and a node whose
  // rack or source flag changed leaves and joins again. Returns each changed channel's change.
  std::map<std::string, swarm::PeerGraphChange> UpdatePeerGraphs();

  // The peers `reporter` bans now, for bad data (its heartbeat's list, which replaces the last
  // one). Each pair is kept apart in the peer graphs from the next UpdatePeerGraphs; a node
  // enough live nodes ban is quarantined. True when the list changed.
  bool ReportBans(PeerId reporter, std::vector<PeerId> banned);
  // Banned by at least quarantine_reports live nodes.
  bool quarantined(PeerId id) const;
  // The last list `reporter` reported (sorted; empty when unknown).
  std::vector<PeerId> bans(PeerId reporter) const;

  // A node's peers: the union of its neighbours in every channel it follows, in channel order.
  std::vector<PeerId> Peers(PeerId id) const;

  bool known(PeerId id) const { return nodes_.contains(id); }
  bool alive(PeerId id) const;
  bool left(PeerId id) const;
  // When the node was last heard from (registration, heartbeat) or left; unknown: epoch.
  net::TimePoint last_seen(PeerId id) const;

 private:
  struct Member {
    MemberInfo info;
    std::vector<PeerId> held;    // from its last registration
    std::vector<PeerId> banned;  // from its last heartbeat, sorted
    bool alive = false;
    bool left = false;
    net::TimePoint last_seen{};
  };
  struct ChannelGraph {
    swarm::PeerGraph graph;
    std::map<PeerId, swarm::NodeInfo> members;  // what each member joined as
  };

  explicit Membership(const MembershipOptions& options) : options_(options) {}
  swarm::NodeInfo GraphInfo(PeerId id, const MemberInfo& info) const;
  Result<swarm::PeerGraphChange> UpdateChannel(const std::string& channel,
                                               const std::map<PeerId, swarm::NodeInfo>& members);

  // Every (live reporter, banned) pair, as edges.
  std::vector<swarm::Edge> ApartEdges() const;
  // The edges between `members` that both ends named in their registrations.
  std::vector<swarm::Edge> HeldEdges(const std::map<PeerId, swarm::NodeInfo>& members) const;

  MembershipOptions options_;
  std::map<PeerId, Member> nodes_;  // by id: every walk over them is deterministic
  std::map<std::string, ChannelGraph> graphs_;
  bool drawn_ = false;  // a graph was drawn with members: no settling any more
  // quarantined()'s answer, counted again after bans or liveness change.
  mutable std::set<PeerId> quarantined_;
  mutable bool quarantine_stale_ = true;
  std::optional<net::TimePoint> first_held_;  // the first registration that named held peers
};

}  // namespace weightcast::coord
