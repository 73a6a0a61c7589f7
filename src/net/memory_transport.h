// An in-memory transport for deterministic tests: nodes in one process, connected through a
// MemoryNetwork, with time from a FakeClock. Frames go through the real encoder and decoder and
// the real handshake, so tests of upper layers (swarm, coordinator, agent) exercise the same
// rules as TCP, without sockets or sleeps.
//
// Semantics that differ from TCP, on purpose:
// - Connect runs both sides of the handshake inside the call; the accepted connection is ready
//   for the listener's Accept when Connect returns.
// - Timeouts are measured on the fake clock: a Receive with a finite timeout returns when another
//   thread advances the clock far enough (timeout 0 polls). Keepalive pings and dead-peer checks
//   run on every FakeClock::Advance.
// - Push delivery (Connection::DeliverFrames) runs on one thread of the network's, started by the
//   first connection that pushes, for every connection: as a transport's I/O thread does.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "net/clock.h"
#include "net/transport.h"

namespace weightcast::net {

class MemoryNetwork {
 public:
  // `clock` must outlive the network and every transport created from it.
  explicit MemoryNetwork(FakeClock& clock);
  ~MemoryNetwork();
  MemoryNetwork(const MemoryNetwork&) = delete;
  MemoryNetwork& operator=(const MemoryNetwork&) = delete;

  // A node named `name` (listen addresses are any strings; "mem:<name>" by convention).
  std::unique_ptr<Transport> CreateTransport(std::string name, Options options);

  // Simulates a hung node: while frozen its connections send nothing (not even pings), so its
  // peers declare it dead after keepalive_timeout.
  void Freeze(std::string_view name, bool frozen = true);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace weightcast::net
