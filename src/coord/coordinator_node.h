// What the coordinator keeps per node besides the membership core's view: the connection, the
// registration, progress and long-poll state. Private to the coordinator's files (coordinator.cc,
// coordinator_membership.cc); every field is guarded by Coordinator::mu_.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <weightcast/types.h>

#include "coord/coord.pb.h"
#include "coord/coordinator.h"
#include "net/clock.h"
#include "net/handshake.h"

namespace weightcast::coord {

struct Coordinator::Node {
  PeerId id;
  net::Role role = net::Role::kAgent;
  uint64_t session = 0;  // the connection that registered last
  bool connected = false;
  // Alive, left (sent Leave: stopped on purpose; shown in status only when asked for) and last
  // heard from: membership_'s (coord/membership.h).
  wire::Register registration;
  std::map<std::string, wire::ChannelProgress, std::less<>> progress;
  // Long polls: when this node's reply last changed for reasons of its own.
  uint64_t registered_generation = 0;
  uint64_t peers_generation = 0;
  // A wake arrived with no heartbeat parked (it overtook the heartbeat it was meant to
  // release): the next heartbeat is answered at once.
  bool wake_pending = false;
  struct Parked {
    uint64_t session = 0;
    uint64_t request_id = 0;
    uint64_t seen = 0;  // the node's seen_generation
    net::TimePoint deadline{};
  };
  std::optional<Parked> parked;
};

}  // namespace weightcast::coord
