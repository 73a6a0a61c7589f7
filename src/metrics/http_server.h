// Serves a Registry over HTTP for Prometheus to scrape:
//   GET /metrics  -> 200, Content-Type: text/plain; version=0.0.4, Registry::Render()
//   GET /healthz  -> 200 "ok\n"
//   the extra routes a daemon adds (the coordinator's fleet page, docs/fleet_page.md)
//   anything else -> 404 (a method other than GET/HEAD on those paths: 405)
// cpp-httplib does the HTTP; it stays behind this header so daemons that include it do not pay
// for it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <weightcast/status.h>

#include "util/host_port.h"

namespace weightcast::metrics {

class Registry;

// One request to an extra route, as much of it as a handler needs.
struct HttpRequest {
  std::string path;
  std::string body;
  std::string authorization;  // the Authorization header ("" when absent)
};
struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // Extra headers (name, value), e.g. Cache-Control.
  std::vector<std::pair<std::string, std::string>> headers;
};
// A handler runs on one of the server's two threads; it must not block for long.
struct HttpRoute {
  enum class Method { kGet, kPost };
  Method method = Method::kGet;
  std::string path;  // exact match
  std::function<HttpReply(const HttpRequest&)> handler;
};

class MetricsServer {
 public:
  // Binds `address` ("ip:port", "[ipv6]:port"; port 0 picks a free port) and starts answering on
  // two threads of its own. Returns once the socket is bound, so address() can be logged and
  // scraped at once. `registry` (and whatever the routes' handlers capture) must outlive the
  // server. Fails with kInvalidArgument for a malformed address and kUnavailable when the
  // address cannot be bound.
  static Result<std::unique_ptr<MetricsServer>> Start(Registry& registry, std::string_view address,
                                                      std::vector<HttpRoute> routes = {});

  ~MetricsServer();  // Stop()s.
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound address, e.g. "127.0.0.1:41234" ("[::1]:41234" for IPv6).
  const std::string& address() const { return address_; }

  // Stops accepting, finishes the requests in flight and joins the threads. Blocks; idempotent;
  // not to be called from a request handler.
  void Stop();

 private:
  struct Impl;
  explicit MetricsServer(std::unique_ptr<Impl> impl, std::string address);

  std::unique_ptr<Impl> impl_;
  std::string address_;
};

// "ip:port" or "[ipv6]:port" (util/host_port.h) whose host is a numeric address: no name
// lookups in a daemon's start-up path.
Result<HostPort> ParseListenAddress(std::string_view address);

}  // namespace weightcast::metrics
