// What an in-process node (a coordinated Publisher's seeder, a Subscriber's agent) reports about
// the version it moves: a snapshot, copied out, owned by the caller.
#pragma once

#include <cstdint>
#include <string>

#include <weightcast/types.h>

namespace weightcast {

struct NodeStatus {
  Version version;     // the version being fetched or seeded (0: none)
  bool delta = false;  // moved as delta payloads onto the previous version
  uint32_t chunks_done = 0;
  uint32_t chunks_total = 0;
  uint64_t bytes_done = 0;  // model bytes of the chunks done
  uint64_t bytes_total = 0;
  uint64_t bytes_received = 0;  // wire bytes received for this version
  uint64_t bytes_sent = 0;      // wire bytes uploaded for this version
  uint32_t chunks_failed = 0;   // received chunks that failed their hash check
  uint32_t peers = 0;           // connected peers
  bool complete = false;        // every wanted chunk verified
  bool committed = false;
  // Why the node cannot make progress, as "CODE: message" (a version that cannot complete, or
  // a coordinator that refuses or cannot be reached); empty while fine.
  std::string error;
  // What a fetch waits for when it cannot move, in words ("no live node holds v6: no peer is
  // connected"); empty while it moves or has nothing to fetch.
  std::string waiting;
  std::string address;  // where peers reach this node
  uint64_t node_id = 0;
  // Subscriber only: the channel's committed version in the store (0: none yet), and whether
  // the in-process agent still runs.
  Version current_version;
  bool running = false;
};

}  // namespace weightcast
