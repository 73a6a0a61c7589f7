// Who is in the fleet, who is alive, and who connects to whom: the coordinator's membership
// decisions as a pure core. No I/O, no clock: every call is given the time. The coordinator
// (coord/coordinator.cc) feeds it registrations, heartbeats, leaves and sweeps and serves what it
// decides; the simulator (sim/fleet.cc) drives the same object, so the deaths, joins and peer
// graph changes it measures are the ones the fleet runs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
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
  swarm::PeerListOptions peers;                               // degree, rack share, seed
  uint32_t source_degree = 0;  // a source's bound in the graphs; 0: peers.degree
};

class Membership {
 public:
  // Fails on peer-graph options PeerGraph refuses.
  static Result<Membership> Create(const MembershipOptions& options);

  // A registration: the node is alive from `now`, following info.channels.
  void Register(PeerId id, MemberInfo info, net::TimePoint now);
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

  MembershipOptions options_;
  std::map<PeerId, Member> nodes_;  // by id: every walk over them is deterministic
  std::map<std::string, ChannelGraph> graphs_;
};

}  // namespace weightcast::coord
