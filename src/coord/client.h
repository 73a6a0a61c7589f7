// The client side of the coordinator protocol (coord.proto): what agents, publishers and tools
// call. One connection, one request at a time (calls from several threads are serialized; Wake
// and Close are the exceptions: they never wait for a call in flight).
// The client does not reconnect by itself: after a call fails with kUnavailable or
// kDeadlineExceeded the caller makes a new client (and registers again) when it wants to.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "coord/coord.pb.h"
#include "net/transport.h"

namespace weightcast::coord {

// Whether a Connect failure will not go away by waiting: the coordinator refused our handshake
// (kUnauthenticated: another cluster secret), speaks for another cluster or protocol version, or
// is not a coordinator (kFailedPrecondition), or the address is malformed (kInvalidArgument).
// Callers report these as misconfiguration at ERROR; one-shot commands end on them.
bool IsPermanentConnectError(const Status& status);
// A short cause for logs and metric labels: "wrong_secret", "wrong_cluster", "not_coordinator",
// "protocol_version", "bad_address", "refused" (another kFailedPrecondition), "unreachable"
// (connection refused, timed out, closed) or "other".
std::string_view ConnectErrorCause(const Status& status);
// Whether the coordinator refused a publisher because another writer holds the channel
// ("channel C already has a writer: ...") or because this one was fenced ("fenced by writer
// ..."): kFailedPrecondition either way; waiting does not fix it.
bool IsWriterConflict(const Status& status);
// A standby coordinator's refusal (coord/standby.h); the leader it names is the client's
// standby_leader().
bool IsStandbyRefusal(const Status& status);

class CoordinatorClient {
 public:
  // Connects and authenticates (the transport's handshake) to the coordinator at `address`.
  // A refused handshake says so in plain words ("the coordinator refused our handshake: wrong
  // cluster secret?"); see IsPermanentConnectError for which failures are worth retrying.
  // `address` may list several coordinators, "A,B,C" (one leads, the others stand
  // by): each is tried in turn, the last one found leading first, and one that answers a probe
  // (GetManifest of no channel) with a standby's refusal is passed over for the leader it names.
  // Fails (kUnavailable) when none leads; `timeout` applies to each address.
  static Result<std::unique_ptr<CoordinatorClient>> Connect(
      net::Transport& transport, std::string_view address,
      net::Duration timeout = std::chrono::seconds(10));

  // Every call blocks until the reply arrives or `timeout` passes. A reply carrying an Error
  // becomes that Status (its code and message).
  Result<wire::RegisterReply> Register(const wire::Register& request);
  // A long poll when request.wait_ms() is above 0: blocks up to that long (plus the round trip)
  // for a coordinator that holds it; the call's timeout must be above it (set_timeout).
  // `timeout` zero: the client's (set_timeout).
  Result<wire::HeartbeatReply> Heartbeat(const wire::Heartbeat& request,
                                         net::Duration timeout = {});
  // Asks the coordinator to answer this connection's held heartbeat now (Heartbeat.wake).
  // Safe from any thread, also while a Heartbeat call is in flight; does not block on it and
  // waits for no reply (a coordinator without long polls answers it; the next call skips that).
  Status Wake();
  // Registers a version published by this node; returns its version number. `writer_epoch`: the
  // lease the registration granted for the manifest's channel (0: none, as a tool).
  Result<Version> Publish(std::span<const uint8_t> signed_manifest, uint64_t writer_epoch = 0);
  // The same for a part of a sharded version (docs/sharded_publish.md): the whole reply, which
  // says whether the version is assembled yet. Call it again with the same part to poll.
  Result<wire::PublishReply> PublishPart(std::span<const uint8_t> signed_part,
                                         uint64_t writer_epoch);
  // The signed manifest of `version` (0: the newest) of `channel`; the caller verifies it.
  Result<std::vector<uint8_t>> GetManifest(std::string_view channel, Version version);
  Result<wire::FleetStatus> GetStatus(std::string_view channel = {});
  // With include_left, also the nodes that sent Leave (NodeStatus.left).
  Result<wire::FleetStatus> GetStatus(std::string_view channel, bool include_left);
  // `order`: an operator's signed rollback order (trust/rollback_order.h), which a coordinator
  // with a CA requires; empty in development mode.
  Result<Version> Rollback(std::string_view channel, Version version,
                           std::span<const uint8_t> order = {});
  // Tells the coordinator this node stops on purpose (coord.proto Leave), waiting at most
  // `timeout` for the answer; call it last, before Close. A coordinator that does not know Leave
  // answers with an error (kInvalidArgument), which callers may ignore: the node is then marked
  // dead once its heartbeats stop, as before.
  Status Leave(net::Duration timeout = std::chrono::seconds(2));

  void set_timeout(net::Duration timeout) { timeout_ = timeout; }
  // The leader's address the last standby refusal on this connection named ("" if none did).
  std::string standby_leader() {
    std::lock_guard lock(mu_);
    return standby_leader_;
  }
  // Closes the connection; a call in flight returns kUnavailable. Any thread; does not wait for
  // a call in flight.
  void Close();

 private:
  explicit CoordinatorClient(std::unique_ptr<net::Connection> connection);
  static Result<std::unique_ptr<CoordinatorClient>> ConnectOne(net::Transport& transport,
                                                               std::string_view address,
                                                               net::Duration timeout);
  // `timeout` zero: timeout_.
  Result<wire::Envelope> Call(wire::Envelope request, net::Duration timeout = {});

  std::mutex mu_;
  // Set once by the constructor, never reset, so Wake and Close use it without mu_ (Connection
  // calls are thread-safe).
  const std::unique_ptr<net::Connection> connection_;
  uint64_t next_request_id_ = 1;
  net::Duration timeout_ = std::chrono::seconds(10);
  std::string standby_leader_;  // guarded by mu_
};

}  // namespace weightcast::coord
