// The coordinator's fleet page (docs/fleet_page.md), served on its --metrics HTTP port beside
// /metrics:
//   GET  /             the page itself (one HTML file with its script and style, embedded in the
//                      binary: fleet machines have no internet, so nothing comes from a CDN)
//   GET  /api/status   FleetStatus as JSON, nodes that left included: the very rendering
//                      `weightcast status --json --all` prints
//   POST /api/rollback {"channel": "...", "version": N} with "Authorization: Bearer <admin
//                      secret>": the same rollback `weightcast rollback` asks for. Refused (403)
//                      unless the coordinator was started with an admin secret.
// The page polls /api/status once a second and renders every string from the network as text.
#pragma once

#include <string>
#include <vector>

#include "coord/coordinator.h"
#include "metrics/http_server.h"

namespace weightcast::coord {

struct FleetPageOptions {
  // Empty: the page is read-only and /api/rollback answers 403.
  std::string admin_secret;
};

// Routes for metrics::MetricsServer::Start. `coordinator` must outlive the server.
std::vector<metrics::HttpRoute> FleetPageRoutes(Coordinator& coordinator, FleetPageOptions options);

}  // namespace weightcast::coord
