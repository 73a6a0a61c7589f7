// In-process point-to-point throughput of the TCP transport over loopback, next to a plain
// blocking socket pair moving the same bytes in the same run (the reference: what the kernel
// gives two threads with no framing, no queues, no event loop).
//
//   bench_p2p_throughput [bytes=1GiB] [chunk=4MiB]
//
// Last line: one JSON object. For the two-process comparison with iperf3 see
// bench/p2p_vs_iperf3.sh.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>
#include <vector>

#include "net/p2p.h"
#include "net/tcp_transport.h"
#include "util/text.h"

namespace wc = weightcast;
using namespace std::chrono_literals;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Plain sockets: one thread writes `bytes` from a `chunk` buffer, the other reads them.
double RawSocketSeconds(uint64_t bytes, size_t chunk) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("reference socket");
    std::exit(1);
  }
  double start = Now();
  std::thread reader([&] {
    int fd = ::accept(listener, nullptr, nullptr);
    std::vector<char> buf(chunk);
    uint64_t got = 0;
    while (got < bytes) {
      ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n <= 0) break;
      got += static_cast<uint64_t>(n);
    }
    ::close(fd);
  });
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::perror("reference connect");
    std::exit(1);
  }
  std::vector<char> buf(chunk, 'x');
  uint64_t sent = 0;
  while (sent < bytes) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(chunk, bytes - sent));
    ssize_t n = ::write(fd, buf.data(), want);
    if (n <= 0) break;
    sent += static_cast<uint64_t>(n);
  }
  reader.join();
  double seconds = Now() - start;
  ::close(fd);
  ::close(listener);
  return seconds;
}

wc::net::Options BenchOptions(uint64_t node, uint32_t chunk) {
  wc::net::Options o;
  o.self.cluster_id = "bench";
  o.self.node_id = wc::PeerId(node);
  o.self.role = wc::net::Role::kTool;
  o.secret = "bench secret, not for production";
  o.max_frame_bytes = chunk + wc::net::kChunkHeaderSize;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  auto bytes = wc::ParseSize(argc > 1 ? argv[1] : "1GiB");
  auto chunk = wc::ParseSize(argc > 2 ? argv[2] : "4MiB");
  if (!bytes.ok() || !chunk.ok() || *chunk == 0 || *chunk > (64u << 20)) {
    std::cerr << "usage: bench_p2p_throughput [bytes] [chunk <= 64MiB]\n";
    return 2;
  }
  const auto chunk32 = static_cast<uint32_t>(*chunk);

  auto server = wc::net::TcpTransport::Create(BenchOptions(1, chunk32));
  auto client = wc::net::TcpTransport::Create(BenchOptions(2, chunk32));
  if (!server.ok() || !client.ok()) {
    std::cerr << "transport: " << (server.ok() ? client.status() : server.status()).ToString()
              << "\n";
    return 1;
  }
  auto listener = (*server)->Listen("127.0.0.1:0");
  if (!listener.ok()) {
    std::cerr << listener.status().ToString() << "\n";
    return 1;
  }
  wc::Result<wc::net::P2pStats> received = wc::Internal("receiver did not run");
  std::thread receiver([&] { received = wc::net::P2pReceive(**listener, 120s); });
  wc::net::P2pSendOptions send;
  send.bytes = *bytes;
  send.chunk_bytes = chunk32;
  auto sent = wc::net::P2pSend(**client, (*listener)->address(), send);
  receiver.join();
  if (!sent.ok() || !received.ok()) {
    std::cerr << "transfer failed: " << (sent.ok() ? received.status() : sent.status()).ToString()
              << "\n";
    return 1;
  }
  const double ref_seconds = RawSocketSeconds(*bytes, *chunk);
  const double ref_gbps = *bytes * 8 / ref_seconds / 1e9;
  std::printf(
      "{\"bench\":\"p2p_throughput\",\"bytes\":%llu,\"chunk_bytes\":%llu,"
      "\"weightcast_gbit_per_s\":%.3f,\"raw_socket_gbit_per_s\":%.3f,\"ratio\":%.3f,"
      "\"weightcast_process_cpu_s\":%.3f}\n",
      static_cast<unsigned long long>(*bytes), static_cast<unsigned long long>(*chunk),
      sent->gbit_per_s(), ref_gbps, sent->gbit_per_s() / ref_gbps,
      sent->cpu_user + sent->cpu_system);
  return 0;
}
