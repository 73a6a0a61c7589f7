// A node's session with the coordinator, shared by the agent daemon and the publisher: it
// connects (following the leader of a list "A,B,C", CoordinatorClient::Connect), registers
// again after every reconnect (a restarted coordinator forgets its members), keeps the long-poll
// state of the connection (the generation of the last reply, whether the coordinator holds
// heartbeats), drops a connection that failed so that the next call reconnects, and logs an
// outage once by the rules below, with the constants below. What a node registers with and what
// it does with a registration is its own: SessionDelegate.
//
// Outage logging (OutageLog): the first failed attempt at INFO ("coordinator at A: ...; retrying
// every 100ms"), again only when the error changes; ERROR once the coordinator has been away
// kUnreachableErrorAfter ("coordinator at A unreachable for 10s: ...; still retrying ...") and
// every kErrorReminder after; a refusal that waiting will not fix (IsPermanentConnectError) at
// ERROR at once; and once it is back, "reached the coordinator again after Ns of errors" when
// the outage was logged at ERROR. A heartbeat the coordinator refuses is logged at ERROR once
// per distinct error (and every kErrorReminder).
//
// Threads: every method is safe from any thread. Connects are serialized; Wake and End never
// wait for one.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <weightcast/status.h>

#include "coord/client.h"
#include "coord/coord.pb.h"
#include "net/clock.h"
#include "net/transport.h"

namespace weightcast::coord {

// Reconnects after an outage: the first try after kReconnectFirst, doubling up to kReconnectMax.
inline constexpr net::Duration kReconnectFirst = std::chrono::milliseconds(100);
inline constexpr net::Duration kReconnectMax = std::chrono::seconds(2);
// A refusal (wrong secret or cluster) is retried slowly: the coordinator's side may be fixed.
inline constexpr net::Duration kRefusedRetryFirst = std::chrono::seconds(1);
inline constexpr net::Duration kRefusedRetryMax = std::chrono::seconds(30);
// Silence of the coordinator after which a node logs at ERROR: long enough for a fleet started
// all at once (nodes before the coordinator) to stay quiet.
inline constexpr net::Duration kUnreachableErrorAfter = std::chrono::seconds(10);
// How often a lasting error is logged again.
inline constexpr net::Duration kErrorReminder = std::chrono::minutes(1);

// Whether a failed call means the connection is gone (reconnect) rather than that the
// coordinator answered and refused.
bool LostConnection(const Status& status);
// This machine's host name for Register.hostname ("" when unknown).
std::string LocalHostname();
// `log` without the transport's line for each failed connect to `coordinator`: the session
// reports those (once per cause, at ERROR when it lasts), not one line per retry.
net::LogFn WithoutConnectFailures(net::LogFn log, std::string_view coordinator);

// Where the session's lines go: `info` and `error` levels.
struct SessionLog {
  std::function<void(const std::string&)> info;
  std::function<void(const std::string&)> error;
};

// The outage rules of the header comment, on their own (no connection): the session feeds it
// each attempt's outcome.
class OutageLog {
 public:
  // `retry_refusals`: whether the node retries a permanent refusal (an agent) or gives up on it
  // (a publisher returns it to its user); the ERROR line says which.
  OutageLog(std::string coordinator, SessionLog log, const net::Clock& clock,
            net::Duration reconnect_max, bool retry_refusals);
  // A failed attempt: logs it by the rules and returns how long to wait before the next.
  net::Duration OnFailure(const Status& status);
  // A successful attempt: ends the outage.
  void OnSuccess();
  // A refused heartbeat (the connection stays).
  void OnRefusedHeartbeat(const Status& status);
  void OnHeartbeatAccepted() { refused_heartbeat_.clear(); }

 private:
  std::string coordinator_;
  SessionLog log_;
  const net::Clock& clock_;
  net::Duration reconnect_max_;
  bool retry_refusals_;
  net::Duration backoff_{};  // zero: no failure since the last success
  std::string cause_;        // empty: not failing
  std::string message_;
  net::TimePoint failing_since_{};
  net::TimePoint error_logged_{};
  bool logged_at_error_ = false;
  std::string refused_heartbeat_;
  net::TimePoint refused_heartbeat_logged_{};
};

// What differs between the nodes that hold a session.
class SessionDelegate {
 public:
  virtual ~SessionDelegate() = default;
  // What this node registers with; asked before every registration.
  virtual wire::Register Registration() = 0;
  // The coordinator accepted the registration (leases, the interval: read what matters).
  virtual void OnRegistered(const wire::RegisterReply& reply) { (void)reply; }
  // The coordinator answered the registration with an error (its message prefixed with
  // "coordinator ADDRESS: "): what Client returns for it.
  virtual Status OnRegisterRefused(Status refusal) { return refusal; }
  // Every attempt's outcome, OK once registered (metrics, health).
  virtual void OnConnectResult(const Status& status) { (void)status; }
};

struct ClientSessionOptions {
  std::string coordinator;  // "A" or "A,B,C"
  // Per address tried.
  net::Duration connect_timeout = std::chrono::seconds(10);
  net::Duration reconnect_max = kReconnectMax;
  // Until a registration says otherwise (RegisterReply.heartbeat_interval_ms).
  net::Duration heartbeat_interval = std::chrono::seconds(1);
  bool retry_refusals = true;  // OutageLog
  SessionLog log;
  const net::Clock* clock = &net::Clock::Real();
};

class ClientSession {
 public:
  // `transport` and `delegate` must outlive the session.
  ClientSession(net::Transport& transport, ClientSessionOptions options, SessionDelegate& delegate);
  ~ClientSession();
  ClientSession(const ClientSession&) = delete;
  ClientSession& operator=(const ClientSession&) = delete;

  // The registered client; connects and registers first when there is none. A failure is part
  // of an outage (logged by OutageLog); retry_delay says how long to wait before trying again.
  // kAborted after End.
  Result<std::shared_ptr<CoordinatorClient>> Client();
  net::Duration retry_delay() const;
  // Ends `client` if it is still the session's (a call on it lost the connection, `why`): the
  // next Client reconnects. Logs "lost the coordinator: ..." once per connection.
  void Drop(const std::shared_ptr<CoordinatorClient>& client, const Status& why);

  // One heartbeat on `client`, with the long-poll fields: `hold` asks the coordinator to hold
  // it up to the heartbeat interval (wait_ms), with the generation of the last reply. A lost
  // connection is dropped; a refusal is logged (OutageLog::OnRefusedHeartbeat). long_poll is
  // false after either until a reply says otherwise.
  Result<wire::HeartbeatReply> Heartbeat(const std::shared_ptr<CoordinatorClient>& client,
                                         wire::Heartbeat heartbeat, bool hold);
  // Has the coordinator answer the held heartbeat now (CoordinatorClient::Wake); nothing
  // without a connection.
  void Wake();
  // Ends the session: `last_report` (when it holds a channel) goes as a final heartbeat, then
  // Leave when `leave` (a stop on purpose), then the connection closes. Waits at most 2 s for
  // each.
  void End(bool leave, const wire::Heartbeat* last_report = nullptr);

  net::Duration heartbeat_interval() const;
  // Whether the coordinator holds heartbeats (the last reply carried a generation).
  bool long_poll() const;

 private:
  Result<std::shared_ptr<CoordinatorClient>> ConnectAndRegister();
  // Makes `client` the session's (kAborted after End).
  Status Registered(std::shared_ptr<CoordinatorClient> client, const wire::RegisterReply& reply);

  net::Transport& transport_;
  const ClientSessionOptions options_;
  SessionDelegate& delegate_;
  std::mutex connect_mu_;  // one connect at a time; taken before mu_, never under it
  mutable std::mutex mu_;
  OutageLog outage_;  // guarded by mu_
  std::shared_ptr<CoordinatorClient> client_;
  net::Duration retry_delay_ = kReconnectFirst;
  net::Duration heartbeat_interval_;
  uint64_t seen_generation_ = 0;
  bool long_poll_ = false;
  bool ended_ = false;
};

}  // namespace weightcast::coord
