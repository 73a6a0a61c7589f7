#include "coord/client_session.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

namespace weightcast::coord {
namespace {

int64_t WholeSeconds(net::Duration d) {
  return std::chrono::duration_cast<std::chrono::seconds>(d).count();
}

std::string RetryText(net::Duration every) {
  return "retrying every " +
         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(every).count()) +
         "ms";
}

// A held heartbeat takes up to the interval: a call's own timeout must be well above it.
net::Duration CallTimeout(net::Duration heartbeat_interval) {
  return std::max<net::Duration>(std::chrono::seconds(10),
                                 2 * heartbeat_interval + std::chrono::seconds(5));
}

// Bounds the calls made while a node stops, so that a coordinator gone silent cannot hold it.
constexpr net::Duration kEndCallTimeout = std::chrono::seconds(2);

}  // namespace

bool LostConnection(const Status& status) {
  return status.code() == Code::kUnavailable || status.code() == Code::kDeadlineExceeded ||
         status.code() == Code::kAborted || status.code() == Code::kCorrupt;
}

std::string LocalHostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return {};
  return buf;
}

net::LogFn WithoutConnectFailures(net::LogFn log, std::string_view coordinator) {
  return [log = std::move(log),
          skip = "tcp: connect to " + std::string(coordinator) + " failed"](std::string_view line) {
    if (!line.starts_with(skip)) log(line);
  };
}

OutageLog::OutageLog(std::string coordinator, SessionLog log, const net::Clock& clock,
                     net::Duration reconnect_max, bool retry_refusals)
    : coordinator_(std::move(coordinator)),
      log_(std::move(log)),
      clock_(clock),
      reconnect_max_(reconnect_max),
      retry_refusals_(retry_refusals) {}

net::Duration OutageLog::OnFailure(const Status& status) {
  const net::TimePoint now = clock_.Now();
  if (cause_.empty()) failing_since_ = now;
  const bool permanent = IsPermanentConnectError(status);
  const std::string_view cause = ConnectErrorCause(status);
  const bool changed = cause != cause_ || status.message() != message_;
  cause_ = std::string(cause);
  message_ = status.message();
  if (permanent) {
    backoff_ = std::clamp<net::Duration>(2 * backoff_, kRefusedRetryFirst, kRefusedRetryMax);
  } else {
    backoff_ = backoff_ == net::Duration::zero()
                   ? kReconnectFirst
                   : std::min<net::Duration>(2 * backoff_, reconnect_max_);
  }
  const std::string retry = RetryText(backoff_);
  const bool long_outage = now - failing_since_ >= kUnreachableErrorAfter;
  if (permanent || long_outage) {
    if (changed || !logged_at_error_ || now - error_logged_ >= kErrorReminder) {
      log_.error(permanent ? "cannot work with the coordinator at " + coordinator_ + ": " +
                                 status.ToString() + "; this will not fix itself" +
                                 (retry_refusals_ ? "; " + retry : "")
                           : "coordinator at " + coordinator_ + " unreachable for " +
                                 std::to_string(WholeSeconds(now - failing_since_)) +
                                 "s: " + status.ToString() + "; still " + retry);
      error_logged_ = now;
      logged_at_error_ = true;
    }
  } else if (changed) {
    log_.info("coordinator at " + coordinator_ + ": " + status.ToString() + "; " + retry);
  }
  return backoff_;
}

void OutageLog::OnSuccess() {
  if (!cause_.empty() && logged_at_error_) {
    log_.info("reached the coordinator again after " +
              std::to_string(WholeSeconds(clock_.Now() - failing_since_)) + "s of errors");
  }
  cause_.clear();
  message_.clear();
  logged_at_error_ = false;
  backoff_ = net::Duration::zero();
}

void OutageLog::OnRefusedHeartbeat(const Status& status) {
  // The coordinator answered and refused (e.g. another node registered with this node id
  // replaced this one): a person has to look, so ERROR, but not on every heartbeat.
  const net::TimePoint now = clock_.Now();
  if (status.message() == refused_heartbeat_ && now - refused_heartbeat_logged_ < kErrorReminder) {
    return;
  }
  log_.error("the coordinator refused a heartbeat: " + status.ToString());
  refused_heartbeat_ = status.message();
  refused_heartbeat_logged_ = now;
}

ClientSession::ClientSession(net::Transport& transport, ClientSessionOptions options,
                             SessionDelegate& delegate)
    : transport_(transport),
      options_(std::move(options)),
      delegate_(delegate),
      outage_(options_.coordinator, options_.log, *options_.clock, options_.reconnect_max,
              options_.retry_refusals),
      heartbeat_interval_(options_.heartbeat_interval) {}

ClientSession::~ClientSession() {
  std::lock_guard lock(mu_);
  if (client_ != nullptr) client_->Close();
}

Result<std::shared_ptr<CoordinatorClient>> ClientSession::Client() {
  std::lock_guard connecting(connect_mu_);
  {
    std::lock_guard lock(mu_);
    if (ended_) return Aborted("the coordinator session ended");
    if (client_ != nullptr) return client_;
  }
  Result<std::shared_ptr<CoordinatorClient>> client = ConnectAndRegister();
  {
    std::lock_guard lock(mu_);
    if (ended_) return Aborted("the coordinator session ended");  // no outage: the node stops
    if (client.ok()) {
      outage_.OnSuccess();
      retry_delay_ = kReconnectFirst;
    } else {
      retry_delay_ = outage_.OnFailure(client.status());
    }
  }
  delegate_.OnConnectResult(client.status());
  return client;
}

Result<std::shared_ptr<CoordinatorClient>> ClientSession::ConnectAndRegister() {
  WC_ASSIGN_OR_RETURN(
      std::unique_ptr<CoordinatorClient> connected,
      CoordinatorClient::Connect(transport_, options_.coordinator, options_.connect_timeout));
  std::shared_ptr<CoordinatorClient> client = std::move(connected);
  Result<wire::RegisterReply> reply = client->Register(delegate_.Registration());
  if (!reply.ok()) {
    client->Close();
    // A lost connection is retried as any outage; an answer that says no is the node's to word.
    if (LostConnection(reply.status()) && reply.status().code() != Code::kCorrupt) {
      return reply.status().WithContext("coordinator " + options_.coordinator);
    }
    return delegate_.OnRegisterRefused(
        reply.status().WithContext("coordinator " + options_.coordinator));
  }
  // The node reads the reply (a writer lease) before any other thread can use the connection.
  delegate_.OnRegistered(*reply);
  WC_RETURN_IF_ERROR(Registered(client, *reply));
  return client;
}

Status ClientSession::Registered(std::shared_ptr<CoordinatorClient> client,
                                 const wire::RegisterReply& reply) {
  std::lock_guard lock(mu_);
  if (ended_) {
    // End came while this connect ran: nobody would close the connection.
    client->Close();
    return Aborted("the coordinator session ended");
  }
  // Heartbeat a few times per coordinator timeout (it says how often).
  if (reply.heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = std::chrono::milliseconds(reply.heartbeat_interval_ms());
  }
  client->set_timeout(CallTimeout(heartbeat_interval_));
  // A registration moves the node's generation: nothing seen on this connection yet.
  seen_generation_ = 0;
  long_poll_ = false;
  client_ = std::move(client);
  return Status::Ok();
}

net::Duration ClientSession::retry_delay() const {
  std::lock_guard lock(mu_);
  return retry_delay_;
}

void ClientSession::Drop(const std::shared_ptr<CoordinatorClient>& client, const Status& why) {
  {
    std::lock_guard lock(mu_);
    if (client == nullptr || client_ != client) return;
    client_.reset();
    long_poll_ = false;
  }
  client->Close();
  options_.log.info("lost the coordinator: " + why.ToString());
}

Result<wire::HeartbeatReply> ClientSession::Heartbeat(
    const std::shared_ptr<CoordinatorClient>& client, wire::Heartbeat heartbeat, bool hold) {
  {
    std::lock_guard lock(mu_);
    if (hold) {
      heartbeat.set_wait_ms(static_cast<uint32_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(heartbeat_interval_).count()));
    }
    heartbeat.set_seen_generation(seen_generation_);
  }
  Result<wire::HeartbeatReply> reply = client->Heartbeat(heartbeat);
  if (!reply.ok()) {
    if (LostConnection(reply.status())) {
      Drop(client, reply.status());
    } else {
      std::lock_guard lock(mu_);
      outage_.OnRefusedHeartbeat(reply.status());
      // Not held again at once: a node that heartbeats again as soon as one is answered waits
      // an interval after a refusal instead of asking in a tight loop.
      if (client_ == client) long_poll_ = false;
    }
    return reply;
  }
  std::lock_guard lock(mu_);
  outage_.OnHeartbeatAccepted();
  if (client_ == client) {
    seen_generation_ = reply->generation();
    long_poll_ = reply->generation() != 0;
  }
  return reply;
}

void ClientSession::Wake() {
  std::shared_ptr<CoordinatorClient> client;
  {
    std::lock_guard lock(mu_);
    client = client_;
  }
  // A failed wake fails the held call too, which reconnects.
  if (client != nullptr) client->Wake().IgnoreError();
}

void ClientSession::End(bool leave, const wire::Heartbeat* last_report) {
  std::shared_ptr<CoordinatorClient> client;
  {
    std::lock_guard lock(mu_);
    ended_ = true;
    client = std::move(client_);
  }
  if (client == nullptr) return;
  if (last_report != nullptr && last_report->channels_size() > 0) {
    // Not held (no wait_ms), and waited for no longer than Leave is.
    client->Heartbeat(*last_report, kEndCallTimeout).status().IgnoreError();
  }
  // A stop on purpose: listed as left, not dead. Best effort: a coordinator without Leave
  // refuses it and marks this node dead at its heartbeat timeout.
  if (leave) client->Leave(kEndCallTimeout).IgnoreError();
  client->Close();
}

net::Duration ClientSession::heartbeat_interval() const {
  std::lock_guard lock(mu_);
  return heartbeat_interval_;
}

bool ClientSession::long_poll() const {
  std::lock_guard lock(mu_);
  return long_poll_;
}

}  // namespace weightcast::coord
