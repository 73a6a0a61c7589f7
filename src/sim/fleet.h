// A discrete-event simulation of one broadcast: a source and N receivers, each running the real
// swarm::PeerProtocol (and its swarm::Scheduler), the objects an agent runs, over the modelled
// network of sim/network.h, on a virtual clock. Scenario events (deaths, stragglers, late
// joiners, a leaving source) are drawn from a seed, so a run is reproducible. docs/simulator.md
// describes the model and the bounds.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <weightcast/status.h>

#include "swarm/scheduler.h"
#include "swarm/tuning.h"

namespace weightcast::sim {

struct FleetConfig {
  uint32_t receivers = 100;  // N; node 0 is the source, nodes 1..N receive
  uint64_t total_bytes = 0;  // S
  uint64_t chunk_bytes = 0;  // c
  // A delta step (docs/simulator.md, "Delta steps"): every receiver holds the base version and
  // fetches the new one as an agent does (node::SwarmNode::Fetch): chunk i changed when
  // payload_bytes[i] > 0 and travels as a delta payload of that many bytes; it is copied from
  // the base otherwise. Empty: one full version of whole chunks. DeltaPayloadSizes makes one.
  std::vector<uint64_t> payload_bytes;
  double bandwidth = 1.25e9;  // B, bytes/s per node (10 Gbit/s)
  // An HTTP(S) origin that holds the version (docs/origin.md), with an aggregate upload of this
  // many bytes/s (O; 0: none). As the coordinator grants shares, min(origin_fetchers, N)
  // receivers picked evenly get stripe k of m each and fetch it from the origin as from a source
  // peer that holds just those chunks; the rest travels between peers and from the source.
  double origin_bandwidth = 0;
  uint32_t origin_fetchers = 16;
  bool shared = false;      // one capacity for both directions instead of full duplex
  double latency = 100e-6;  // one-way, every link
  // Racks: nodes are laid out rack_size to a rack (the source in rack 0); each rack's uplink
  // carries rack_size * B / oversubscription each way. 0: no racks.
  uint32_t rack_size = 0;
  double oversubscription = 1;
  // Scenario. Times as fractions of the lower bound (what "mid-way" means at any size).
  double die_fraction = 0;  // receivers that die
  double die_at = 0.5;
  double straggler_fraction = 0;  // receivers running at straggler_speed x bandwidth
  double straggler_speed = 0.5;
  double late_fraction = 0;  // receivers that join late
  double late_at = 0.25;
  double source_leaves_at = -1;  // < 0: never
  // Receivers that upload corrupt data (a bad disk, bad memory): every item they send fails its
  // check at the receiver, which bans them (swarm::CheckOutcome::kCorrupt). Their own downloads
  // are sound.
  double bad_fraction = 0;
  double detect_delay = 1.0;  // seconds until peers notice a dead node
  // The coordinator's heartbeat timeout, seconds. The simulator runs the coordinator's
  // membership core (coord/membership.h): nodes heartbeat every third of it, the coordinator
  // sweeps every 0.1 s, marks a node silent longer than this dead and repairs the peer graph
  // around it (swarm/peer_graph.h); a late joiner enters the graph at the sweep after it
  // registers.
  double heartbeat_timeout = 3.0;
  double rebalance_interval = 0.1;  // seconds between max-min recomputations (sim/network.h)
  // Scheduler and peer-list settings: by default exactly what an agent runs (swarm/tuning.h).
  swarm::Tuning tuning{};
  double tick = 0.5;
  uint64_t seed = 1;
  // Deliver every HAVE, also those the protocol skips (swarm::PeerProtocol::WantsHave: a
  // neighbour that told us it holds the chunk). Such a HAVE changes nothing the neighbour
  // decides: it never asks for a chunk it holds, and its availability count of that chunk is
  // read only by its picks, of chunks it needs. Skipping them saves about half of all HAVE
  // deliveries, the simulator's largest cost, with the same result (tests/unit/sim/fleet_test.cc
  // checks it). The source never asks to skip them: a spread_first scheduler reads the
  // availability of chunks it holds to refuse repeats.
  bool have_to_holders = false;
  uint32_t samples = 200;  // progress samples over the run
  // Threads: 1 runs everything on the caller; 2 adds a worker for the HAVE fan-out (the same
  // run, event for event; sim/side_worker.h); 0 picks 2 on a machine with two cores or more.
  uint32_t threads = 0;
  double time_limit_factor = 20;  // give up at this multiple of the bound (or of 1 s)
};

enum class NodeRole : uint8_t { kHealthy, kDies, kStraggler, kLate, kBad };

struct NodeResult {
  uint32_t node = 0;
  NodeRole role = NodeRole::kHealthy;
  double completed_at = -1;  // seconds; -1: did not complete
  double died_at = -1;       // seconds; -1: did not die
  // Seconds; -1: never. When the coordinator's core quarantined it (live nodes ban it).
  double quarantined_at = -1;
  double joined_at = 0;    // seconds (late joiners: when they joined; -1: never)
  double bytes_in = 0;     // every chunk byte that arrived, duplicates included
  double bytes_out = 0;    // bytes of uploads that completed
  uint32_t bans = 0;       // neighbours this node banned (each sent it a corrupt item)
  uint32_t banned_by = 0;  // neighbours that banned this node
};

struct ProgressSample {
  double t = 0;
  double fraction = 0;    // bytes verified by live receivers / bytes they want
  uint32_t complete = 0;  // receivers complete
};

struct FleetResult {
  // Seconds: full duplex S/B, or shared 2NS/((N+1)B) (2NS/((N+1)B + O) with an origin, at least
  // S/B), rack-adjusted.
  double lower_bound = 0;
  double end_time = 0;
  std::vector<NodeResult> nodes;  // index 0 is the source
  std::vector<ProgressSample> progress;
  double source_bytes = 0;              // bytes the source uploaded (completed flows)
  double origin_bytes = 0;              // bytes the origin uploaded (completed flows)
  double source_first_round_done = -1;  // when the source finished sending every chunk once
  double delivered_bytes = 0;           // completed flows
  double aborted_bytes = 0;             // flows stopped early (cancels, deaths)
  double duplicate_bytes = 0;           // arrivals of chunks already held (endgame)
  // What every receiver must take in: S for a full version, the payload total P for a delta.
  double wanted_bytes = 0;
  uint64_t changed_chunks = 0;  // chunks with a payload (delta); every chunk for a full version
  // Bad peers: items from bad nodes that were checked (and failed), bans, and corrupt items a
  // node nonetheless announced or completed with (the protocol must never let one through: 0).
  uint64_t bad_arrivals = 0;
  uint64_t bans = 0;
  uint64_t corrupt_accepted = 0;
  uint64_t events = 0;
  uint64_t timeouts = 0;
  uint64_t requests = 0;
  uint64_t rejects = 0;
  // The peer graph (swarm::PeerGraph) through the run's membership changes (deaths, late
  // joins; the first graph is not counted): edges made, edges between staying nodes dropped to
  // make room, and the edges of nodes that left.
  uint64_t membership_events = 0;
  uint64_t edges_added = 0;
  uint64_t edges_dropped = 0;
  uint64_t edges_detached = 0;
  uint64_t max_dropped_per_event = 0;
  uint32_t chunks = 0;
};

// The lower bounds of docs/simulator.md, in seconds.
double FullDuplexBound(double s, double b);
// With an origin of upload O besides the source: 2NS/((N+1)B + O), at least S/B
// (docs/origin.md).
double SharedBound(double s, double b, uint32_t n, double origin = 0);
// Each rack other than the source's takes in S through its uplink; the source's rack sends out S.
double RackBound(double s, double b, uint32_t rack_size, double oversubscription);

// The payload sizes of a delta step: round(changed_fraction x chunks) chunks, drawn from `seed`,
// changed; the k-th of them (in chunk order) gets a payload of ratios[k % ratios.size()] x its
// chunk size (at least one byte), the others none. Fails on a fraction outside (0, 1], no ratio,
// a ratio outside (0, 1.01] (an encoder sends a chunk whole rather than a larger payload), or a
// fraction that changes no chunk.
Result<std::vector<uint64_t>> DeltaPayloadSizes(uint64_t total_bytes, uint64_t chunk_bytes,
                                                double changed_fraction,
                                                std::span<const double> ratios, uint64_t seed);

Result<FleetResult> RunFleet(const FleetConfig& config);

}  // namespace weightcast::sim
