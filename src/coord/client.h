// The client side of the coordinator protocol (coord.proto): what agents, publishers and tools
// call. One connection, one request at a time (calls from several threads are serialized).
// The client does not reconnect by itself: after a call fails with kUnavailable or
// kDeadlineExceeded the caller makes a new client (and registers again) when it wants to.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "coord/coord.pb.h"
#include "net/transport.h"

namespace weightcast::coord {

class CoordinatorClient {
 public:
  // Connects and authenticates (the transport's handshake) to the coordinator at `address`.
  static Result<std::unique_ptr<CoordinatorClient>> Connect(
      net::Transport& transport, std::string_view address,
      net::Duration timeout = std::chrono::seconds(10));

  // Every call blocks until the reply arrives or `timeout` passes. A reply carrying an Error
  // becomes that Status (its code and message).
  Result<wire::RegisterReply> Register(const wire::Register& request);
  Result<wire::HeartbeatReply> Heartbeat(const wire::Heartbeat& request);
  // Registers a version published by this node; returns its version number.
  Result<Version> Publish(std::span<const uint8_t> signed_manifest);
  // The signed manifest of `version` (0: the newest) of `channel`; the caller verifies it.
  Result<std::vector<uint8_t>> GetManifest(std::string_view channel, Version version);
  Result<wire::FleetStatus> GetStatus(std::string_view channel = {});
  Result<Version> Rollback(std::string_view channel, Version version);

  void set_timeout(net::Duration timeout) { timeout_ = timeout; }
  void Close();

 private:
  explicit CoordinatorClient(std::unique_ptr<net::Connection> connection);
  Result<wire::Envelope> Call(wire::Envelope request);

  std::mutex mu_;
  std::unique_ptr<net::Connection> connection_;
  uint64_t next_request_id_ = 1;
  net::Duration timeout_ = std::chrono::seconds(10);
};

}  // namespace weightcast::coord
