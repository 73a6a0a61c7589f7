// The coordinator's Prometheus metrics (docs/metrics.md, "coordinator"): the process-wide ones,
// read from its counters when the page is rendered, and the per-channel ones, which the
// Coordinator updates itself as channels appear and versions are decided (ChannelMetrics).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "coord/coord.pb.h"
#include "coord/version_log.h"
#include "metrics/registry.h"

namespace weightcast::coord {

class Coordinator;

// Registers callback metrics on `registry` that read `coordinator`'s counters. The coordinator
// must outlive the registry's use of them: call RemoveCoordinatorMetrics before it goes away if
// the registry lives longer.
void ExportCoordinatorMetrics(const Coordinator& coordinator, metrics::Registry& registry);
void RemoveCoordinatorMetrics(metrics::Registry& registry);

// Agents of one channel by the state an operator alerts on (see SetAgents).
struct ChannelAgentCounts {
  uint64_t failed = 0;   // alive, reporting PHASE_FAILED
  uint64_t lagging = 0;  // alive, not failed, not on the channel's current version
  uint64_t dead = 0;     // past their heartbeat timeout, not yet forgotten
  // Alive, by what their sampler last attested of its live tensors (docs/live.md).
  uint64_t attested_match = 0;
  uint64_t attested_mismatch = 0;  // a digest that is not the version's (or a malformed one)
};

// The per-channel metrics (weightcast_coordinator_*{channel}). A channel's series are registered
// the first time any call names it; they are plain Counters, Gauges and Histograms owned by the
// registry, so nothing needs removing, but the registry must outlive this object (the
// Coordinator holds one and updates it while it runs).
//
// Not thread-safe: the Coordinator calls it under its lock. Registering takes the registry's
// lock inside the coordinator's; that is safe because no registry callback takes the
// coordinator's lock (they read atomics).
class ChannelMetrics {
 public:
  // Null registry: every call does nothing.
  explicit ChannelMetrics(metrics::Registry* registry) : registry_(registry) {}

  // The channel's current version and its newest committed one, as `channel` holds them now.
  void Update(const ChannelState& channel);
  // `entry` (now in `channel`) was just decided: counts a commit or an abort, and for a commit
  // observes publication to decision (published_unix_ms to decided_unix_ms) in
  // weightcast_coordinator_rollout_seconds. Also Update(channel).
  void Decided(const ChannelState& channel, const wire::VersionEntry& entry);
  // A rollback of `channel` was recorded. Also Update(channel).
  void RolledBack(const ChannelState& channel);
  // The agent counts of every channel; a known channel missing from `counts` reads 0.
  void SetAgents(const std::map<std::string, ChannelAgentCounts, std::less<>>& counts);

  // Bucket bounds of weightcast_coordinator_rollout_seconds: 0.5 s to about 2.3 h.
  static std::vector<double> RolloutBuckets();

 private:
  struct Series {
    metrics::Gauge* current_version;
    metrics::Gauge* committed_version;
    metrics::Counter* commits;
    metrics::Counter* aborts;
    metrics::Counter* rollbacks;
    metrics::Histogram* rollout_seconds;
    metrics::Gauge* agents_failed;
    metrics::Gauge* agents_lagging;
    metrics::Gauge* agents_dead;
    metrics::Gauge* attested_match;
    metrics::Gauge* attested_mismatch;
  };
  // The channel's series, registered on first use; null without a registry.
  Series* Find(std::string_view channel);

  metrics::Registry* registry_;
  std::map<std::string, Series, std::less<>> channels_;
};

}  // namespace weightcast::coord
