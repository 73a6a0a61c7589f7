#include "coord/coordinator_metrics.h"

#include <string>
#include <utility>
#include <vector>

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
    {"weightcast_coordinator_peer_list_builds_total", "Peer-list rebuilds after membership changes",
     false, &CoordinatorCounters::peer_list_builds},
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
