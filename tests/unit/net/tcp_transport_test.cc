#include "net/tcp_transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "net/handshake.h"
#include "net/wire.pb.h"
#include "net_test_util.h"

namespace weightcast::net {
namespace {

using namespace std::chrono_literals;
using testing::LogCapture;
using testing::Pattern;
using testing::TestOptions;

std::unique_ptr<Transport> MakeTcp(Options options) {
  auto t = TcpTransport::Create(std::move(options));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(*t);
}

struct Pair {
  std::unique_ptr<Transport> server_transport, client_transport;
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Connection> server, client;
};

Pair Connect(Options server_opts, Options client_opts) {
  Pair p;
  p.server_transport = MakeTcp(std::move(server_opts));
  p.client_transport = MakeTcp(std::move(client_opts));
  auto l = p.server_transport->Listen("127.0.0.1:0");
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  p.listener = std::move(*l);
  auto c = p.client_transport->Connect(p.listener->address(), 5s);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return p;
  p.client = std::move(*c);
  auto s = p.listener->Accept(5s);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (s.ok()) p.server = std::move(*s);
  return p;
}

// A raw socket to the listener, for sending bytes no real node would.
int RawConnect(const std::string& address) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

TEST(TcpTransport, HandshakeThenChunksBothWays) {
  LogCapture log;
  Pair p = Connect(TestOptions(2, &log, Role::kCoordinator), TestOptions(1, &log));
  ASSERT_TRUE(p.server && p.client);
  EXPECT_EQ(p.client->peer().node_id, PeerId(2));
  EXPECT_EQ(p.client->peer().role, Role::kCoordinator);
  EXPECT_EQ(p.server->peer().node_id, PeerId(1));
  auto payload = std::make_shared<std::vector<uint8_t>>(Pattern(3 << 20, 5));
  for (uint32_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(
        p.client->SendChunk({.version = 1, .channel = 1, .chunk_index = i}, *payload, payload)
            .ok());
  }
  ASSERT_TRUE(p.server->SendControl(Pattern(100, 1)).ok());
  for (uint32_t i = 0; i < 4; ++i) {
    auto f = p.server->Receive(5s);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->chunk_header()->chunk_index, i);
    auto got = f->chunk_payload();
    ASSERT_EQ(got.size(), payload->size());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), payload->begin()));
  }
  auto control = p.client->Receive(5s);
  ASSERT_TRUE(control.ok());
  EXPECT_EQ(control->type, FrameType::kControl);
  EXPECT_EQ(control->body.size(), 100u);
}

// Frames of every size around the reader's read-ahead (small ones arrive many to one read,
// large ones are read straight into their buffers, and a frame may begin inside the bytes read
// ahead and end beyond them): every frame arrives whole, in order, and the byte count adds up.
TEST(TcpTransport, SmallAndLargeFramesInterleavedArriveWholeAndInOrder) {
  LogCapture log;
  Pair p = Connect(TestOptions(2, &log, Role::kCoordinator), TestOptions(1, &log));
  ASSERT_TRUE(p.server && p.client);
  const std::vector<size_t> sizes = {
      1,       17, 3000,          100, (64 << 10) - 30, 64 << 10, 5, (64 << 10) + 1, 40,
      1 << 20, 2,  (3 << 20) + 7, 9,   128 << 10,       3};
  std::vector<std::shared_ptr<std::vector<uint8_t>>> payloads;
  uint64_t total = 0;
  for (uint32_t round = 0; round < 20; ++round) {
    for (size_t size : sizes) {
      payloads.push_back(std::make_shared<std::vector<uint8_t>>(
          Pattern(size, static_cast<uint32_t>(payloads.size()))));
      total += size;
    }
  }
  // Sent from a thread of its own: more than the send and receive queues hold is in flight.
  std::thread sender([&] {
    for (uint32_t i = 0; i < payloads.size(); ++i) {
      const auto& payload = payloads[i];
      ASSERT_TRUE(p.client->SendChunk({.version = 1, .chunk_index = i}, *payload, payload).ok());
    }
  });
  for (uint32_t i = 0; i < payloads.size(); ++i) {
    auto f = p.server->Receive(10s);
    ASSERT_TRUE(f.ok()) << "frame " << i << ": " << f.status().ToString();
    ASSERT_EQ(f->chunk_header()->chunk_index, i);
    auto got = f->chunk_payload();
    ASSERT_EQ(got.size(), payloads[i]->size()) << "frame " << i;
    ASSERT_TRUE(std::equal(got.begin(), got.end(), payloads[i]->begin())) << "frame " << i;
  }
  sender.join();
  EXPECT_GE(p.server_transport->stats().bytes_received, total);
}

TEST(TcpTransport, CountsTheBytesItMovesBothWays) {
  LogCapture log;
  Pair p = Connect(TestOptions(2, &log, Role::kCoordinator), TestOptions(1, &log));
  ASSERT_TRUE(p.server && p.client);
  const TransportStats before = p.client_transport->stats();
  EXPECT_GT(before.bytes_sent, 0u);  // the handshake
  EXPECT_GT(before.bytes_received, 0u);
  auto payload = std::make_shared<std::vector<uint8_t>>(Pattern(1 << 20, 3));
  ASSERT_TRUE(p.client->SendChunk({.version = 1, .chunk_index = 0}, *payload, payload).ok());
  auto f = p.server->Receive(5s);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE(p.client->Flush(5s).ok());
  const TransportStats after = p.client_transport->stats();
  EXPECT_GE(after.bytes_sent - before.bytes_sent, payload->size());
  EXPECT_GE(p.server_transport->stats().bytes_received, payload->size());
}

TEST(TcpTransport, WrongSecretIsDisconnectedWithLoggedReason) {
  LogCapture log;
  auto server = MakeTcp(TestOptions(2, &log));
  Options bad = TestOptions(1, &log);
  bad.secret = "this is not the cluster secret";
  auto client = MakeTcp(bad);
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok());
  auto c = client->Connect((*listener)->address(), 5s);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ((*listener)->Accept(200ms).status().code(), Code::kDeadlineExceeded);
  EXPECT_TRUE(log.Eventually("refused peer")) << log.All();
  EXPECT_TRUE(log.Eventually("UNAUTHENTICATED")) << log.All();
}

// ConnectAsync returns at once and hands over what Connect would: a connection (by address or by
// host name), a refusal's cause, or an address that cannot be parsed (at once, on the caller's
// thread).
TEST(TcpTransport, ConnectAsyncHandsOverWhatConnectWould) {
  LogCapture log;
  auto server = MakeTcp(TestOptions(2, &log));
  auto client = MakeTcp(TestOptions(1, &log));
  ASSERT_TRUE(client->CanConnectAsync());
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok());
  const std::string port = (*listener)->address().substr((*listener)->address().rfind(':') + 1);
  using Got = Result<std::unique_ptr<Connection>>;
  auto connect = [&](Transport& t, const std::string& address) {
    auto promise = std::make_shared<std::promise<Got>>();
    std::future<Got> got = promise->get_future();
    const std::thread::id caller = std::this_thread::get_id();
    auto on_caller = std::make_shared<bool>(false);
    t.ConnectAsync(address, 5s, [promise, caller, on_caller](Got conn) {
      *on_caller = std::this_thread::get_id() == caller;
      promise->set_value(std::move(conn));
    });
    Got result = got.get();
    return std::make_pair(std::move(result), *on_caller);
  };
  for (const std::string host : {"127.0.0.1", "localhost"}) {
    auto [conn, on_caller] = connect(*client, host + ":" + port);
    ASSERT_TRUE(conn.ok()) << host << ": " << conn.status().ToString();
    EXPECT_FALSE(on_caller) << host;
    EXPECT_EQ((*conn)->peer().node_id, PeerId(2));
    auto accepted = (*listener)->Accept(5s);
    ASSERT_TRUE(accepted.ok());
    ASSERT_TRUE((*conn)->SendControl(Pattern(8, 3)).ok());
    EXPECT_TRUE((*accepted)->Receive(5s).ok());
  }
  Options bad = TestOptions(3, &log);
  bad.secret = "this is not the cluster secret";
  auto stranger = MakeTcp(bad);
  auto [refused, refused_on_caller] = connect(*stranger, "127.0.0.1:" + port);
  EXPECT_FALSE(refused.ok());
  auto [malformed, malformed_on_caller] = connect(*client, "no port here");
  EXPECT_EQ(malformed.status().code(), Code::kInvalidArgument) << malformed.status().ToString();
  EXPECT_TRUE(malformed_on_caller);
}

// A peer that refuses us says why and closes without reading what we sent after our Hello, so
// its kernel answers with a reset and our Auth fails to go out. The reason it sent is still
// ours to read: Connect reports it, not the broken pipe.
TEST(TcpTransport, ARefusalThatRacesOurAuthIsStillReported) {
  LogCapture log;
  const testing::RawListener listener = testing::RawListen();
  std::thread refuser([&] {
    const int fd = ::accept(listener.fd, nullptr, nullptr);
    ASSERT_GE(fd, 0);
    uint8_t first = 0;
    ASSERT_EQ(::recv(fd, &first, 1, MSG_PEEK), 1);  // the client's Hello arrived, unread
    const std::vector<uint8_t> bytes = testing::HelloThenRefusal("no entry for you");
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
    ::close(fd);  // unread bytes: the kernel resets the connection
  });
  auto client = MakeTcp(TestOptions(1, &log));
  auto c = client->Connect(listener.address, 5s);
  refuser.join();
  ::close(listener.fd);
  EXPECT_EQ(c.status().code(), Code::kAborted) << c.status().ToString();
  EXPECT_NE(c.status().message().find("no entry for you"), std::string::npos)
      << c.status().ToString();
}

TEST(TcpTransport, WrongClusterAndVersionAreRefused) {
  LogCapture log;
  auto server = MakeTcp(TestOptions(2, &log));
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok());
  Options other = TestOptions(1, &log);
  other.self.cluster_id = "another";
  EXPECT_EQ(MakeTcp(other)->Connect((*listener)->address(), 5s).status().code(),
            Code::kFailedPrecondition);
  Options future = TestOptions(3, &log);
  future.self.protocol_version = 9;
  EXPECT_FALSE(MakeTcp(future)->Connect((*listener)->address(), 5s).ok());
  EXPECT_EQ((*listener)->Accept(100ms).status().code(), Code::kDeadlineExceeded);
  EXPECT_TRUE(log.Eventually("cluster 'another'")) << log.All();
  EXPECT_TRUE(log.Eventually("protocol version 9")) << log.All();
}

TEST(TcpTransport, MalformedAndOversizedFramesAreDropped) {
  LogCapture log;
  auto server = MakeTcp(TestOptions(2, &log));
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok());
  {
    int fd = RawConnect((*listener)->address());
    const uint8_t junk[] = {3, 0, 0, 0, 77, 0, 0, 0, 1, 2, 3};  // unknown type 77
    ASSERT_EQ(::write(fd, junk, sizeof(junk)), static_cast<ssize_t>(sizeof(junk)));
    char buf[4096];
    while (::read(fd, buf, sizeof(buf)) > 0) {
    }  // the server hangs up
    ::close(fd);
  }
  {
    int fd = RawConnect((*listener)->address());
    uint8_t huge[8];
    EncodeFrameHeader({.length = 200u << 20, .type = FrameType::kHello},
                      std::span<uint8_t, kFrameHeaderSize>(huge, 8));
    ASSERT_EQ(::write(fd, huge, sizeof(huge)), 8);
    char buf[4096];
    while (::read(fd, buf, sizeof(buf)) > 0) {
    }
    ::close(fd);
  }
  EXPECT_EQ((*listener)->Accept(100ms).status().code(), Code::kDeadlineExceeded);
  EXPECT_TRUE(log.Eventually("unknown frame type 77")) << log.All();
  EXPECT_TRUE(log.Eventually("exceeds the limit")) << log.All();
}

TEST(TcpTransport, SilentConnectionTimesOutInHandshake) {
  LogCapture log;
  Options opts = TestOptions(2, &log);
  opts.handshake_timeout = 200ms;
  auto server = MakeTcp(opts);
  auto listener = server->Listen("127.0.0.1:0");
  int fd = RawConnect((*listener)->address());
  char buf[4096];
  while (::read(fd, buf, sizeof(buf)) > 0) {
  }
  ::close(fd);
  EXPECT_TRUE(log.Eventually("handshake did not finish in time")) << log.All();
}

// Reads until the peer closes; false when it did not within `limit` of the last byte.
bool ClosedByPeerWithin(int fd, std::chrono::milliseconds limit) {
  timeval tv{.tv_sec = static_cast<time_t>(limit.count() / 1000),
             .tv_usec = static_cast<suseconds_t>(limit.count() % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[4096];
  ssize_t n;
  do {
    n = ::read(fd, buf, sizeof(buf));
  } while (n > 0);
  // 0: an orderly close; ECONNRESET: closed with bytes unread. EAGAIN: the timeout passed.
  return n == 0 || errno == ECONNRESET;
}

TEST(TcpTransport, FullListenerDisplacesOldestSilentConnection) {
  LogCapture log;
  Options opts = TestOptions(2, &log);
  opts.handshake_timeout = 30s;
  opts.hello_timeout = 30s;
  opts.max_pending_handshakes = 2;
  opts.max_silent_handshakes_per_source = 0;  // only the listener-wide bound
  auto server = MakeTcp(opts);
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok());
  // Two silent sockets fill the handshake slots; the third displaces the older one, long before
  // a timeout would close it, and is itself held.
  int idle1 = RawConnect((*listener)->address());
  std::this_thread::sleep_for(50ms);
  int idle2 = RawConnect((*listener)->address());
  std::this_thread::sleep_for(50ms);
  int third = RawConnect((*listener)->address());
  EXPECT_TRUE(ClosedByPeerWithin(idle1, 3s));
  EXPECT_TRUE(log.Eventually("too many connections in the handshake (2)")) << log.All();
  // The listener is still full of silent sockets, yet a real peer gets through.
  auto client = MakeTcp(TestOptions(1, nullptr));
  auto c = client->Connect((*listener)->address(), 3s);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*listener)->Accept(3s).ok());
  ::close(idle1);
  ::close(idle2);
  ::close(third);
}

TEST(TcpTransport, SilentConnectionsOfOneAddressDisplaceEachOther) {
  LogCapture log;
  Options opts = TestOptions(2, &log);
  opts.handshake_timeout = 30s;
  opts.hello_timeout = 30s;
  opts.max_silent_handshakes_per_source = 2;
  opts.silent_grace = Duration::zero();  // the idle sockets here are 50 ms apart
  auto server = MakeTcp(opts);
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok());
  int idle1 = RawConnect((*listener)->address());
  std::this_thread::sleep_for(50ms);
  int idle2 = RawConnect((*listener)->address());
  std::this_thread::sleep_for(50ms);
  int idle3 = RawConnect((*listener)->address());
  EXPECT_TRUE(ClosedByPeerWithin(idle1, 3s));
  EXPECT_TRUE(log.Eventually("too many silent connections from 127.0.0.1 in the handshake (2)"))
      << log.All();
  ::close(idle1);
  ::close(idle2);
  ::close(idle3);
}

TEST(TcpTransport, ConnectionWithoutHelloIsClosedAfterHelloTimeout) {
  LogCapture log;
  Options opts = TestOptions(2, &log);
  opts.handshake_timeout = 30s;
  opts.hello_timeout = 200ms;
  auto server = MakeTcp(opts);
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok());
  int fd = RawConnect((*listener)->address());
  EXPECT_TRUE(ClosedByPeerWithin(fd, 3s));
  ::close(fd);
  EXPECT_TRUE(log.Eventually("sent no Hello within 200 ms")) << log.All();
}

// ~100 sockets that connect and never say anything, which needs no key, must not lock real
// peers out of the coordinator, agents and `weightcast serve`. With the default bounds,
// and timeouts too long to help, all 16 real handshakes must still succeed at once.
TEST(TcpTransport, IdleFloodFromOneAddressDoesNotLockOutRealPeers) {
  Options opts = TestOptions(2, nullptr);
  opts.log = [](std::string_view) {};
  opts.handshake_timeout = 30s;
  opts.hello_timeout = 30s;
  auto server = MakeTcp(opts);
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok());
  const std::string address = (*listener)->address();
  std::vector<int> flood;
  for (int i = 0; i < 100; ++i) flood.push_back(RawConnect(address));
  std::this_thread::sleep_for(200ms);  // let the listener accept all of them

  auto client = MakeTcp(TestOptions(1, nullptr));
  std::atomic<int> established{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 4; ++i) {
        auto c = client->Connect(address, 3s);
        if (c.ok()) {
          ++established;
        } else {
          ADD_FAILURE() << c.status().ToString();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(established.load(), 16);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  for (int i = 0; i < 16; ++i) EXPECT_TRUE((*listener)->Accept(1s).ok()) << i;
  for (int fd : flood) ::close(fd);
}

TEST(TcpTransport, SenderBlocksInsteadOfBufferingWithoutBound) {
  Options sender = TestOptions(1, nullptr);
  sender.send_queue_bytes = 1 << 20;
  Options receiver = TestOptions(2, nullptr);
  receiver.receive_queue_bytes = 1 << 20;
  Pair p = Connect(receiver, sender);
  ASSERT_TRUE(p.server && p.client);
  auto payload = std::make_shared<std::vector<uint8_t>>(Pattern(256 << 10, 1));
  size_t queued = 0;
  // Nobody reads on the server: after send queue + receive queue + kernel buffers fill, Send
  // must time out rather than queue more.
  for (int i = 0; i < 4096; ++i) {
    Status s =
        p.client->SendChunk({.chunk_index = static_cast<uint32_t>(i)}, *payload, payload, 100ms);
    if (!s.ok()) {
      EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << s.ToString();
      break;
    }
    queued += payload->size();
  }
  EXPECT_LT(queued, 256u << 20) << "sender never blocked";
  // Reading drains everything in order, and the sender can go on.
  size_t received = 0;
  for (uint32_t i = 0; received < queued; ++i) {
    auto f = p.server->Receive(5s);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->chunk_header()->chunk_index, i);
    received += f->chunk_payload().size();
  }
  EXPECT_TRUE(p.client->SendChunk({}, *payload, payload, 2s).ok());
}

TEST(TcpTransport, DeadPeerIsDetectedByKeepaliveTimeout) {
  LogCapture log;
  Options watcher = TestOptions(1, &log);
  watcher.keepalive_timeout = 300ms;
  watcher.keepalive_interval = 100ms;
  // The peer never sends pings: to the watcher it looks like a hung process.
  Options silent = TestOptions(2, &log);
  silent.keepalive_interval = std::chrono::hours(1);
  silent.keepalive_timeout = std::chrono::hours(1);
  Pair p = Connect(silent, watcher);
  ASSERT_TRUE(p.server && p.client);
  auto start = std::chrono::steady_clock::now();
  auto r = p.client->Receive(3s);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status().code(), Code::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("keepalive"), std::string::npos) << r.status().ToString();
  EXPECT_LT(took, 1s);
  // Meanwhile the silent side hears the watcher's pings and stays up until the watcher hangs up.
  EXPECT_TRUE(log.Eventually("keepalive")) << log.All();
}

TEST(TcpTransport, IdleConnectionStaysUpThanksToPings) {
  Options a = TestOptions(1, nullptr);
  a.keepalive_interval = 50ms;
  a.keepalive_timeout = 200ms;
  Pair p = Connect(a, a);
  ASSERT_TRUE(p.server && p.client);
  std::this_thread::sleep_for(600ms);
  EXPECT_TRUE(p.client->status().ok()) << p.client->status().ToString();
  EXPECT_TRUE(p.server->status().ok()) << p.server->status().ToString();
}

TEST(TcpTransport, ManyConcurrentConnections) {
  auto server = MakeTcp(TestOptions(100, nullptr));
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok());
  constexpr int kClients = 32;
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<std::unique_ptr<Connection>> clients;
  for (int i = 0; i < kClients; ++i) {
    transports.push_back(MakeTcp(TestOptions(i + 1, nullptr)));
  }
  std::vector<std::thread> threads;
  clients.resize(kClients);
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = transports[i]->Connect((*listener)->address(), 5s);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      ASSERT_TRUE((*c)->SendControl(Pattern(1000, static_cast<uint8_t>(i))).ok());
      clients[i] = std::move(*c);
    });
  }
  std::vector<std::unique_ptr<Connection>> accepted;
  for (int i = 0; i < kClients; ++i) {
    auto s = (*listener)->Accept(5s);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto f = (*s)->Receive(5s);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->body[0], static_cast<uint8_t>((*s)->peer().node_id.value() - 1));
    accepted.push_back(std::move(*s));
  }
  for (auto& t : threads) t.join();
}

TEST(TcpTransport, RefusesShortSecret) {
  Options o = TestOptions(1, nullptr);
  o.secret = "short";
  EXPECT_EQ(TcpTransport::Create(o).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace weightcast::net
