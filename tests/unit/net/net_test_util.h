// Shared helpers for the net tests: options for a test node, a thread-safe log capture, the
// pieces of a peer played by hand (a raw listener, the bytes of a refusal), and what a push
// handler (Connection::DeliverFrames) was given.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/handshake.h"
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

// A TCP socket listening on 127.0.0.1 (a free port), for a test that plays the peer by hand.
struct RawListener {
  int fd = -1;
  std::string address;  // "127.0.0.1:PORT"
};
inline RawListener RawListen() {
  RawListener out;
  out.fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  EXPECT_EQ(::bind(out.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::listen(out.fd, 1), 0);
  socklen_t length = sizeof(addr);
  ::getsockname(out.fd, reinterpret_cast<sockaddr*>(&addr), &length);
  out.address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  return out;
}

// What a node that refuses us sends: its Hello (node 2), then an error report saying `reason`.
inline std::vector<uint8_t> HelloThenRefusal(std::string_view reason) {
  Identity self;
  self.cluster_id = "test-cluster";
  self.node_id = PeerId(2);
  Handshake hs(self, kSecret, /*initiator=*/false);
  std::vector<uint8_t> bytes;
  for (const OutFrame& frame :
       {hs.HelloFrame(), Handshake::ErrorFrameFor(Unauthenticated(std::string(reason)))}) {
    bytes.insert(bytes.end(), frame.head.begin(), frame.head.begin() + frame.head_size);
    bytes.insert(bytes.end(), frame.payload.begin(), frame.payload.end());
  }
  return bytes;
}

// What a handler was given, in order; waitable.
struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Frame> frames;
  std::vector<Status> ends;

  Connection::FrameHandler Handler() {
    return [this](Result<Frame> f) {
      std::lock_guard lock(mu);
      if (f.ok()) {
        frames.push_back(std::move(f).value());
      } else {
        ends.push_back(f.status());
      }
      cv.notify_all();
    };
  }
  bool WaitFrames(size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(5), [&] { return frames.size() >= n; });
  }
  bool WaitEnd() {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(5), [&] { return !ends.empty(); });
  }
  size_t frame_count() {
    std::lock_guard lock(mu);
    return frames.size();
  }
  size_t end_count() {
    std::lock_guard lock(mu);
    return ends.size();
  }
};

// Frames [from, to) of a push-delivery order test: frame i is a chunk of `payload` (index i)
// when i is a positive multiple of 4, else a 16-byte control frame whose bytes follow i.
inline void SendMixedFrames(Connection& client, uint32_t from, uint32_t to,
                            const std::shared_ptr<std::vector<uint8_t>>& payload) {
  for (uint32_t i = from; i < to; ++i) {
    if (i > 0 && i % 4 == 0) {
      ASSERT_TRUE(
          client.SendChunk({.version = 1, .channel = 0, .chunk_index = i}, *payload, payload).ok())
          << i;
    } else {
      ASSERT_TRUE(client.SendControl(Pattern(16, static_cast<uint8_t>(i))).ok()) << i;
    }
  }
}

// That the first `n` frames `got` holds are SendMixedFrames' frames 0..n, in order.
inline void ExpectMixedFramesInOrder(Collected& got, uint32_t n,
                                     const std::vector<uint8_t>& payload) {
  ASSERT_TRUE(got.WaitFrames(n));
  std::lock_guard lock(got.mu);
  for (uint32_t i = 0; i < n; ++i) {
    const Frame& f = got.frames[i];
    if (i > 0 && i % 4 == 0) {
      ASSERT_EQ(f.type, FrameType::kChunk) << i;
      EXPECT_EQ(f.chunk_header()->chunk_index, i);
      EXPECT_TRUE(std::equal(payload.begin(), payload.end(), f.chunk_payload().begin()));
    } else {
      ASSERT_EQ(f.type, FrameType::kControl) << i;
      EXPECT_EQ(f.body[0], Pattern(16, static_cast<uint8_t>(i))[0]) << "frame " << i;
    }
  }
}

}  // namespace weightcast::net::testing
