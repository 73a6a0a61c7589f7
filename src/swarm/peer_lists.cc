#include "swarm/peer_lists.h"

#include "swarm/peer_graph.h"

namespace weightcast::swarm {

Result<std::vector<std::vector<PeerId>>> BuildPeerLists(std::span<const NodeInfo> nodes,
                                                        const PeerListOptions& options) {
  WC_ASSIGN_OR_RETURN(PeerGraph graph, PeerGraph::Create(options));
  WC_RETURN_IF_ERROR(graph.Update({}, nodes).status());
  std::vector<std::vector<PeerId>> out;
  out.reserve(nodes.size());
  for (const NodeInfo& node : nodes) out.push_back(graph.Neighbours(node.id));
  return out;
}

}  // namespace weightcast::swarm
