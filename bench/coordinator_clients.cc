// Holds N authenticated connections to a coordinator, for bench/coordinator_threads.sh and
// bench/coordinator_tls.sh: connects them all, one after another (one transport, role tool,
// cluster "default"; with --tls, mutual TLS as in certificate mode), asks GetStatus on each
// (every one is answered), prints "ready N" and keeps them open until stdin closes or --hold-s
// passes.
//
//   bench_coordinator_clients ADDRESS SECRET_FILE [--clients 100] [--hold-s 30]
//                             [--tls CERT,KEY,CA]
//
// Last line: one JSON object (connections made, GetStatus answered, seconds to connect them,
// connections per second).
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "coord/client.h"
#include "net/handshake.h"
#include "net/tcp_transport.h"

using namespace weightcast;  // NOLINT: a benchmark program

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ADDRESS SECRET_FILE [--clients N] [--hold-s S]\n", argv[0]);
    return 2;
  }
  const std::string address = argv[1];
  int clients = 100;
  int hold_s = 30;
  std::string tls;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--clients") == 0) clients = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--hold-s") == 0) hold_s = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--tls") == 0) tls = argv[i + 1];
  }
  auto secret = net::LoadClusterSecret(argv[2]);
  if (!secret.ok()) {
    std::fprintf(stderr, "%s\n", secret.status().ToString().c_str());
    return 1;
  }
  net::Options options;
  options.self.cluster_id = "default";
  options.self.node_id = PeerId(4242);
  options.self.role = net::Role::kTool;
  options.secret = *secret;
  options.log = [](std::string_view) {};
  if (!tls.empty()) {
    const size_t a = tls.find(',');
    const size_t b = tls.find(',', a + 1);
    if (a == std::string::npos || b == std::string::npos) {
      std::fprintf(stderr, "--tls CERT,KEY,CA\n");
      return 2;
    }
    options.tls = {.enabled = true,
                   .cert_file = tls.substr(0, a),
                   .key_file = tls.substr(a + 1, b - a - 1),
                   .ca_file = tls.substr(b + 1)};
  }
  auto transport = net::TcpTransport::Create(options);
  if (!transport.ok()) {
    std::fprintf(stderr, "%s\n", transport.status().ToString().c_str());
    return 1;
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<coord::CoordinatorClient>> held;
  int answered = 0;
  for (int i = 0; i < clients; ++i) {
    auto client = coord::CoordinatorClient::Connect(**transport, address);
    if (!client.ok()) {
      std::fprintf(stderr, "connection %d: %s\n", i, client.status().ToString().c_str());
      break;
    }
    (*client)->set_timeout(std::chrono::seconds(10));
    if ((*client)->GetStatus().ok()) ++answered;
    held.push_back(std::move(client).value());
  }
  const double connect_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("ready %zu\n", held.size());
  std::fflush(stdout);
  pollfd in{.fd = 0, .events = POLLIN, .revents = 0};
  poll(&in, 1, hold_s * 1000);  // stdin readable (or closed), or the hold passed
  std::printf(
      "{\"connections\": %zu, \"answered\": %d, \"connect_s\": %.3f, "
      "\"per_s\": %.1f}\n",
      held.size(), answered, connect_s, static_cast<double>(held.size()) / connect_s);
  return held.size() == static_cast<size_t>(clients) && answered == clients ? 0 : 1;
}
