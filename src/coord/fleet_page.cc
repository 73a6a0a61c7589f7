#include "coord/fleet_page.h"

#include <string_view>

#include <nlohmann/json.hpp>

#include "coord/status_json.h"
#include "hash/digest.h"

namespace weightcast::assets {
extern const std::string_view kFleetPageHtml;  // fleet_page.html, embedded by CMake
}  // namespace weightcast::assets

namespace weightcast::coord {
namespace {

constexpr const char* kJson = "application/json; charset=utf-8";

metrics::HttpReply JsonError(int status, std::string_view message) {
  nlohmann::json body = {{"error", std::string(message)}};
  return {.status = status, .content_type = kJson, .body = body.dump(), .headers = {}};
}

bool SecretMatches(std::string_view authorization, const std::string& secret) {
  constexpr std::string_view kBearer = "Bearer ";
  if (!authorization.starts_with(kBearer)) return false;
  authorization.remove_prefix(kBearer.size());
  auto bytes = [](std::string_view s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  return authorization.size() == secret.size() &&
         ConstantTimeEqual(bytes(authorization), bytes(secret));
}

// Requests from the page are made on the coordinator's own Handle, as a tool would make them.
const net::PeerInfo kPagePeer{PeerId(0), net::Role::kTool, "fleet page"};

}  // namespace

std::vector<metrics::HttpRoute> FleetPageRoutes(Coordinator& coordinator,
                                                FleetPageOptions options) {
  using Method = metrics::HttpRoute::Method;
  std::vector<metrics::HttpRoute> routes;
  const bool admin = !options.admin_secret.empty();
  routes.push_back({Method::kGet, "/", [](const metrics::HttpRequest&) {
                      return metrics::HttpReply{
                          .status = 200,
                          .content_type = "text/html; charset=utf-8",
                          .body = std::string(assets::kFleetPageHtml),
                          .headers = {{"Content-Security-Policy",
                                       "default-src 'self'; script-src 'unsafe-inline' 'self'; "
                                       "style-src 'unsafe-inline'; img-src 'self' data:"},
                                      {"Cache-Control", "no-store"}}};
                    }});
  routes.push_back(
      {Method::kGet, "/api/status", [&coordinator, admin](const metrics::HttpRequest&) {
         // Nodes that left are listed too: a publisher leaves once its --until holds, and
         // the page's rollout totals still count what it uploaded.
         wire::Envelope request;
         request.mutable_get_status()->set_include_left(true);
         wire::Envelope reply = coordinator.Handle(0, kPagePeer, request);
         if (reply.has_error()) return JsonError(500, reply.error().message());
         auto json = FleetStatusJson(reply.fleet_status());
         if (!json.ok()) return JsonError(500, json.status().ToString());
         // The page learns whether it may offer a rollback from a header, not from
         // the status body (which must equal `weightcast status --json --all`).
         return metrics::HttpReply{
             .status = 200,
             .content_type = kJson,
             .body = std::move(json).value(),
             .headers = {{"Cache-Control", "no-store"}, {"X-Weightcast-Admin", admin ? "1" : "0"}}};
       }});
  routes.push_back(
      {Method::kPost, "/api/rollback",
       [&coordinator, secret = std::move(options.admin_secret)](const metrics::HttpRequest& req) {
         if (secret.empty()) {
           return JsonError(403,
                            "the page is read-only: start the coordinator with "
                            "--admin-secret-file to allow rollbacks from it");
         }
         if (!SecretMatches(req.authorization, secret)) {
           return JsonError(401, "wrong or missing admin secret");
         }
         auto body = nlohmann::json::parse(req.body, nullptr, /*allow_exceptions=*/false);
         if (body.is_discarded() || !body.is_object() || !body.contains("channel") ||
             !body["channel"].is_string() ||
             (body.contains("version") && !body["version"].is_number_unsigned())) {
           return JsonError(400, R"(want {"channel": "NAME", "version": N} (version optional))");
         }
         wire::Envelope request;
         request.mutable_rollback()->set_channel(body["channel"].get<std::string>());
         if (body.contains("version")) {
           request.mutable_rollback()->set_version(body["version"].get<uint64_t>());
         }
         wire::Envelope reply = coordinator.Handle(0, kPagePeer, request);
         if (reply.has_error()) return JsonError(409, reply.error().message());
         nlohmann::json out = {{"version", reply.rollback_reply().version()}};
         return metrics::HttpReply{
             .status = 200, .content_type = kJson, .body = out.dump(), .headers = {}};
       }});
  return routes;
}

}  // namespace weightcast::coord
