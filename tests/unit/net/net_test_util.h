// Shared helpers for the net tests: options for a test node and a thread-safe log capture.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/transport.h"

namespace weightcast::net::testing {

inline constexpr char kSecret[] = "correct horse battery staple";

struct LogCapture {
  std::mutex mu;
  std::vector<std::string> lines;
  LogFn fn() {
    return [this](std::string_view line) {
      std::lock_guard lock(mu);
      lines.emplace_back(line);
    };
  }
  bool Contains(std::string_view needle) {
    std::lock_guard lock(mu);
    for (const auto& l : lines) {
      if (l.find(needle) != std::string::npos) return true;
    }
    return false;
  }
  // For lines written by transport threads just after the event a test observes.
  bool Eventually(std::string_view needle) {
    for (int i = 0; i < 200; ++i) {
      if (Contains(needle)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
  std::string All() {
    std::lock_guard lock(mu);
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }
};

inline Options TestOptions(uint64_t node, LogCapture* log, Role role = Role::kAgent) {
  Options o;
  o.self.cluster_id = "test-cluster";
  o.self.node_id = PeerId(node);
  o.self.role = role;
  o.secret = kSecret;
  if (log != nullptr) o.log = log->fn();
  return o;
}

inline std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

// A listener on `server` and one connection to it from `client`, both ends authenticated.
// A failure is reported with EXPECT and leaves the missing ends null.
struct ConnectedPair {
  std::unique_ptr<Transport> server_transport, client_transport;
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Connection> server, client;
};
inline ConnectedPair ConnectPair(std::unique_ptr<Transport> server,
                                 std::unique_ptr<Transport> client) {
  ConnectedPair p;
  p.server_transport = std::move(server);
  p.client_transport = std::move(client);
  if (!p.server_transport || !p.client_transport) return p;
  auto l = p.server_transport->Listen("127.0.0.1:0");
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  if (!l.ok()) return p;
  p.listener = std::move(*l);
  auto c = p.client_transport->Connect(p.listener->address(), std::chrono::seconds(5));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return p;
  p.client = std::move(*c);
  auto s = p.listener->Accept(std::chrono::seconds(5));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (s.ok()) p.server = std::move(*s);
  return p;
}

}  // namespace weightcast::net::testing
