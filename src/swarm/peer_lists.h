// Who connects to whom: the inputs of the peer graph (swarm/peer_graph.h), and a whole graph
// built at once for a given membership. A pure, seeded function, so the same membership and seed
// give the same graph.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

namespace weightcast::swarm {

struct NodeInfo {
  PeerId id;
  std::string rack;  // empty: unknown
  // This node's degree bound instead of PeerListOptions::degree when non-zero (a source may
  // take more peers, to keep its upload busy).
  uint32_t degree = 0;
};

struct PeerListOptions {
  // Every node gets at most this many neighbours, and as many as the graph allows up to it.
  uint32_t degree = 8;
  // Of the edges beyond the connecting ring, the share drawn inside the node's own rack (when
  // racks are known). Cross-rack edges cross an oversubscribed uplink; few are needed.
  double same_rack_fraction = 0.75;
  uint64_t seed = 1;
};

// Returns each node's neighbours, in the order of `nodes`: a PeerGraph that all of `nodes` join
// at once. The graph is undirected, connected (a ring over rack-grouped nodes is laid first), has
// no self-loops or repeated edges, and no degree above its bound (NodeInfo::degree, else
// options.degree). Fails on duplicate ids or degree < 2.
Result<std::vector<std::vector<PeerId>>> BuildPeerLists(std::span<const NodeInfo> nodes,
                                                        const PeerListOptions& options);

}  // namespace weightcast::swarm
