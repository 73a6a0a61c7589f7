// The scheduler settings every node runs with unless told otherwise: the agents, the publisher's
// seeding node, the coordinator's peer lists and `weightcast sim` all take their defaults from
// `Tuning{}`, and they are the settings the simulator's goal runs prove (docs/simulator.md,
// bench/sim_goals.sh). One definition, so that what the simulator shows at 1,000 nodes is what
// the agents do: a default changed here changes both.
#pragma once

#include <chrono>
#include <cstdint>

#include "swarm/scheduler.h"

namespace weightcast::swarm {

struct Tuning {
  // Peers per node in the coordinator's peer lists, and of a source (a publisher feeds more
  // peers so that its upload stays busy). Degree 24 shortens the paths from the source: at
  // N = 1,000 the full-duplex maximum went from 426.9 s (16) to 413.6 s (24); 32 was worse.
  uint32_t degree = 24;
  uint32_t source_degree = 32;
  // Share of a node's random edges drawn inside its rack (swarm::PeerListOptions).
  double same_rack_fraction = 0.9;
  // Requests in flight per peer; with adaptive windows each peer's window then follows its
  // measured speed, in [1, max_window_per_peer] (docs/swarm.md).
  uint32_t window_per_peer = 1;
  uint32_t max_window_per_peer = 4;
  bool adaptive_window = true;
  // Requests in flight per node. It exceeds the peer count so that adaptive windows can move
  // the spare requests to the fastest peers.
  uint32_t max_outstanding = 32;
  // Concurrent uploads of a receiver and of a source, and requests queued behind them.
  uint32_t upload_slots = 24;
  uint32_t source_upload_slots = 32;
  uint32_t serve_queue_limit = 32;
  // At least one upload slot per connected peer (SchedulerOptions::slot_per_peer): a source, or
  // a node a late joiner spliced into, can have more peers than upload_slots.
  bool slot_per_peer = true;
  uint32_t endgame_max_requests = 2;
  std::chrono::nanoseconds request_timeout = std::chrono::seconds(30);

  // A source's bound in the peer lists: never below a receiver's.
  uint32_t SourceDegree() const { return source_degree > degree ? source_degree : degree; }
};

// Copies the scheduler's share of `tuning` into `options`, for a receiver or a source (which
// takes the source's slots). The caller sets the rest
// (chunk count, have and want sets, spread_first, seed).
void ApplyTuning(const Tuning& tuning, bool source, SchedulerOptions& options);

}  // namespace weightcast::swarm
