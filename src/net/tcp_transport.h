// TCP transport on asio C++20 coroutines. Each connection runs a reader, a writer and a
// keepalive watchdog as coroutines on a strand of a small io thread pool owned by the
// transport; callers interact through the blocking, thread-safe Connection calls, which hand
// frames across bounded queues. Chunks go out with one gather write of header + payload view
// (no user-space copy); received bodies are read straight into the frame's buffer.
//
// asio stays inside tcp_transport.cc: this header is cheap to include.
#pragma once

#include <memory>

#include "net/transport.h"

namespace weightcast::net {

class TcpTransport {
 public:
  // Starts `io_threads` (>= 1) event-loop threads. Addresses are "ip:port" or "[ipv6]:port";
  // Listen on port 0 picks a free port (Listener::address says which). Connections must be
  // destroyed before the transport (the transport's destructor closes any still open).
  static Result<std::unique_ptr<Transport>> Create(Options options, int io_threads = 1);
};

}  // namespace weightcast::net
