#include "metrics/http_server.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <thread>

#include <httplib.h>

#include "metrics/registry.h"
#include "util/text.h"

namespace weightcast::metrics {
namespace {

constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

bool IsIpv6Literal(const std::string& host) {
  in6_addr addr{};
  return inet_pton(AF_INET6, host.c_str(), &addr) == 1;
}

bool IsIpv4Literal(const std::string& host) {
  in_addr addr{};
  return inet_pton(AF_INET, host.c_str(), &addr) == 1;
}

}  // namespace

Result<HostPort> ParseListenAddress(std::string_view address) {
  WC_ASSIGN_OR_RETURN(HostPort out, ParseHostPort(address));
  if (out.bracketed ? !IsIpv6Literal(out.host) : !IsIpv4Literal(out.host)) {
    return InvalidArgument("address '" + EscapeControlBytes(address) +
                           "': the host must be a numeric address (ip:port or [ipv6]:port)");
  }
  return out;
}

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
};

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl, std::string address)
    : impl_(std::move(impl)), address_(std::move(address)) {}

MetricsServer::~MetricsServer() { Stop(); }

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(Registry& registry,
                                                            std::string_view address,
                                                            std::vector<HttpRoute> routes) {
  WC_ASSIGN_OR_RETURN(HostPort where, ParseListenAddress(address));
  auto impl = std::make_unique<Impl>();
  httplib::Server& server = impl->server;
  // A scrape every few seconds needs no more than two threads (httplib's default is one per
  // core, at least eight, in every daemon).
  server.new_task_queue = [] { return new httplib::ThreadPool(2); };
  // httplib's default sets SO_REUSEPORT, which lets a second daemon bind the same port and
  // silently take half the scrapes; SO_REUSEADDR alone still allows a quick restart.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // Bounds how long Stop() waits for an idle keep-alive connection.
  server.set_keep_alive_timeout(1);
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.Get("/metrics", [&registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry.Render(), kContentType);
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain; charset=utf-8");
  });
  auto method_not_allowed = [](const httplib::Request&, httplib::Response& res) {
    res.status = 405;
    res.set_header("Allow", "GET, HEAD");
    res.set_content("method not allowed\n", "text/plain; charset=utf-8");
  };
  std::vector<std::string> get_paths = {"/metrics", "/healthz"};
  std::vector<std::string> post_paths;
  for (HttpRoute& route : routes) {
    auto handler = [h = std::move(route.handler)](const httplib::Request& req,
                                                  httplib::Response& res) {
      HttpRequest in{req.path, req.body, req.get_header_value("Authorization")};
      HttpReply out = h(in);
      res.status = out.status;
      for (const auto& [name, value] : out.headers) res.set_header(name, value);
      res.set_content(std::move(out.body), out.content_type);
    };
    if (route.method == HttpRoute::Method::kGet) {
      server.Get(route.path, std::move(handler));
      get_paths.push_back(route.path);
    } else {
      server.Post(route.path, std::move(handler));
      post_paths.push_back(route.path);
    }
  }
  for (const std::string& path : get_paths) {
    if (std::find(post_paths.begin(), post_paths.end(), path) == post_paths.end()) {
      server.Post(path, method_not_allowed);
    }
    server.Put(path, method_not_allowed);
    server.Delete(path, method_not_allowed);
    server.Patch(path, method_not_allowed);
  }
  for (const std::string& path : post_paths) {
    if (std::find(get_paths.begin(), get_paths.end(), path) == get_paths.end()) {
      server.Get(path, method_not_allowed);
    }
  }

  if (*where.port == 0) {
    const int port = server.bind_to_any_port(where.host);
    if (port <= 0) return Unavailable("metrics: cannot bind " + where.ToString());
    where.port = static_cast<uint16_t>(port);
  } else if (!server.bind_to_port(where.host, *where.port)) {
    return Unavailable("metrics: cannot bind " + where.ToString() +
                       " (in use, or not an address of this host)");
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->server.listen_after_bind(); });
  // httplib's stop() only takes effect once the accept loop runs; wait for it so that an early
  // Stop() cannot be lost (and leave the thread accepting forever).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!server.is_running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      server.stop();
      impl->thread.join();
      return Internal("metrics: the HTTP server did not start within 5 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl), where.ToString()));
}

void MetricsServer::Stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  impl_->server.stop();
  impl_->thread.join();
}

}  // namespace weightcast::metrics
