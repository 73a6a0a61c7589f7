#include "coord/coordinator_metrics.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "coord/coordinator.h"

namespace weightcast::coord {
namespace {

// The request types counted by weightcast_coordinator_requests_total{type=...}.
const std::vector<std::pair<wire::Envelope::BodyCase, std::string>>& RequestTypes() {
  static const auto* types = new std::vector<std::pair<wire::Envelope::BodyCase, std::string>>{
      {wire::Envelope::kRegister, "register"},    {wire::Envelope::kHeartbeat, "heartbeat"},
      {wire::Envelope::kPublish, "publish"},      {wire::Envelope::kGetManifest, "get_manifest"},
      {wire::Envelope::kGetStatus, "get_status"}, {wire::Envelope::kRollback, "rollback"},
      {wire::Envelope::kLeave, "leave"},
  };
  return *types;
}

constexpr char kRequests[] = "weightcast_coordinator_requests_total";

struct Simple {
  const char* name;
  const char* help;
  bool gauge;
  const std::atomic<uint64_t> CoordinatorCounters::*field;
};

constexpr Simple kSimple[] = {
    {"weightcast_coordinator_members_alive", "Registered nodes whose heartbeats are on time", true,
     &CoordinatorCounters::members_alive},
    {"weightcast_coordinator_members_dead",
     "Nodes that missed their heartbeat timeout and are not yet forgotten", true,
     &CoordinatorCounters::members_dead},
    {"weightcast_coordinator_heartbeats_total", "Heartbeats answered", false,
     &CoordinatorCounters::heartbeats},
    {"weightcast_coordinator_registrations_total", "Registrations accepted", false,
     &CoordinatorCounters::registrations},
    {"weightcast_coordinator_versions_published_total", "Versions recorded in the version log",
     false, &CoordinatorCounters::versions_published},
    {"weightcast_coordinator_node_deaths_total", "Times a node was marked dead", false,
     &CoordinatorCounters::nodes_died},
    {"weightcast_coordinator_node_leaves_total", "Times a node left on purpose (Leave)", false,
     &CoordinatorCounters::nodes_left},
    {"weightcast_coordinator_peer_list_builds_total", "Peer-list updates after membership changes",
     false, &CoordinatorCounters::peer_list_builds},
    {"weightcast_coordinator_peer_edges_added_total", "Edges the peer graphs made", false,
     &CoordinatorCounters::peer_edges_added},
    {"weightcast_coordinator_peer_edges_dropped_total",
     "Edges between staying nodes the peer graphs dropped to make room", false,
     &CoordinatorCounters::peer_edges_dropped},
    {"weightcast_coordinator_request_errors_total", "Requests answered with an error", false,
     &CoordinatorCounters::requests_failed},
    {"weightcast_coordinator_heartbeats_held", "Long-poll heartbeats held now", true,
     &CoordinatorCounters::heartbeats_held},
    {"weightcast_coordinator_heartbeats_pushed_total",
     "Held heartbeats answered early because the node's target, decision or peers changed", false,
     &CoordinatorCounters::heartbeats_pushed},
};

}  // namespace

void ExportCoordinatorMetrics(const Coordinator& coordinator, metrics::Registry& registry) {
  const CoordinatorCounters* counters = &coordinator.counters();
  for (const Simple& s : kSimple) {
    const std::atomic<uint64_t>* value = &(counters->*s.field);
    if (s.gauge) {
      registry.GaugeFunc(s.name, s.help, {},
                         [value] { return static_cast<double>(value->load()); });
    } else {
      registry.CounterFunc(s.name, s.help, {}, [value] { return value->load(); });
    }
  }
  for (const auto& [body, type] : RequestTypes()) {
    const std::atomic<uint64_t>* value = &counters->requests[static_cast<size_t>(body)];
    registry.CounterFunc(kRequests, "Requests received, by type", {{"type", type}},
                         [value] { return value->load(); });
  }
}

void RemoveCoordinatorMetrics(metrics::Registry& registry) {
  for (const Simple& s : kSimple) registry.Remove(s.name, {});
  for (const auto& [body, type] : RequestTypes()) registry.Remove(kRequests, {{"type", type}});
}

}  // namespace weightcast::coord

namespace weightcast::coord {

std::vector<double> ChannelMetrics::RolloutBuckets() {
  return metrics::ExponentialBuckets(0.5, 2, 15);
}

ChannelMetrics::Series* ChannelMetrics::Find(std::string_view channel) {
  if (registry_ == nullptr) return nullptr;
  if (auto it = channels_.find(channel); it != channels_.end()) return &it->second;
  metrics::Registry& r = *registry_;
  const metrics::Labels labels = {{"channel", std::string(channel)}};
  Series s{
      .current_version = &r.Gauge("weightcast_coordinator_current_version",
                                  "The version the fleet should have current", labels),
      .committed_version =
          &r.Gauge("weightcast_coordinator_committed_version",
                   "Newest version ever committed (a rollback below it leaves it here)", labels),
      .commits = &r.Counter("weightcast_coordinator_commits_total",
                            "Versions decided COMMIT by the rollout policy", labels),
      .aborts = &r.Counter("weightcast_coordinator_aborts_total",
                           "Versions decided ABORT by the rollout policy", labels),
      .rollbacks =
          &r.Counter("weightcast_coordinator_rollbacks_total", "Rollbacks recorded", labels),
      .rollout_seconds = &r.Histogram("weightcast_coordinator_rollout_seconds",
                                      "Seconds from a version's publication to its commit decision",
                                      RolloutBuckets(), labels),
      .agents_failed = &r.Gauge("weightcast_coordinator_agents_failed",
                                "Live agents reporting the FAILED phase", labels),
      .agents_lagging =
          &r.Gauge("weightcast_coordinator_agents_lagging",
                   "Live agents, not failed, whose current version is not the channel's", labels),
      .agents_dead = &r.Gauge("weightcast_coordinator_agents_dead",
                              "Agents past their heartbeat timeout, not yet forgotten", labels),
      .attested_match = &r.Gauge(
          "weightcast_coordinator_attested_match",
          "Live agents whose sampler attested live tensors equal to the version's bytes", labels),
      .attested_mismatch = &r.Gauge(
          "weightcast_coordinator_attested_mismatch",
          "Live agents whose sampler attested live tensors that differ from the version's bytes",
          labels),
  };
  return &channels_.emplace(std::string(channel), s).first->second;
}

void ChannelMetrics::Update(const ChannelState& channel) {
  Series* s = Find(channel.name);
  if (s == nullptr) return;
  uint64_t committed = 0;
  for (const wire::VersionEntry& entry : channel.versions) {
    if (entry.committed_once() || entry.decision() == wire::DECISION_COMMIT) {
      committed = std::max(committed, entry.version());
    }
  }
  s->current_version->Set(static_cast<double>(channel.current_version));
  s->committed_version->Set(static_cast<double>(committed));
}

void ChannelMetrics::Decided(const ChannelState& channel, const wire::VersionEntry& entry) {
  Series* s = Find(channel.name);
  if (s == nullptr) return;
  if (entry.decision() == wire::DECISION_COMMIT) {
    s->commits->Add();
    // A wall clock stepped back between the two reads as 0, not as a negative duration.
    const uint64_t ms = entry.decided_unix_ms() > entry.published_unix_ms()
                            ? entry.decided_unix_ms() - entry.published_unix_ms()
                            : 0;
    s->rollout_seconds->Observe(static_cast<double>(ms) / 1000.0);
  } else if (entry.decision() == wire::DECISION_ABORT) {
    s->aborts->Add();
  }
  Update(channel);
}

void ChannelMetrics::RolledBack(const ChannelState& channel) {
  Series* s = Find(channel.name);
  if (s == nullptr) return;
  s->rollbacks->Add();
  Update(channel);
}

void ChannelMetrics::SetAgents(
    const std::map<std::string, ChannelAgentCounts, std::less<>>& counts) {
  if (registry_ == nullptr) return;
  for (const auto& [name, c] : counts) Find(name);
  for (auto& [name, s] : channels_) {
    auto it = counts.find(name);
    const ChannelAgentCounts c = it == counts.end() ? ChannelAgentCounts{} : it->second;
    s.agents_failed->Set(static_cast<double>(c.failed));
    s.agents_lagging->Set(static_cast<double>(c.lagging));
    s.agents_dead->Set(static_cast<double>(c.dead));
    s.attested_match->Set(static_cast<double>(c.attested_match));
    s.attested_mismatch->Set(static_cast<double>(c.attested_mismatch));
  }
}

}  // namespace weightcast::coord
