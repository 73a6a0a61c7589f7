#include "coord/client.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "coord/envelope.h"

namespace weightcast::coord {
namespace {

// What a reply must hold for each request; a different body is a protocol error.
wire::Envelope::BodyCase ExpectedReply(wire::Envelope::BodyCase request) {
  switch (request) {
    case wire::Envelope::kRegister:
      return wire::Envelope::kRegisterReply;
    case wire::Envelope::kHeartbeat:
      return wire::Envelope::kHeartbeatReply;
    case wire::Envelope::kPublish:
      return wire::Envelope::kPublishReply;
    case wire::Envelope::kGetManifest:
      return wire::Envelope::kManifestReply;
    case wire::Envelope::kGetStatus:
      return wire::Envelope::kFleetStatus;
    case wire::Envelope::kRollback:
      return wire::Envelope::kRollbackReply;
    case wire::Envelope::kLeave:
      return wire::Envelope::kLeaveReply;
    default:
      return wire::Envelope::BODY_NOT_SET;
  }
}

// The transport's handshake errors, in the words an operator needs. Either side may notice
// first, our own check or the coordinator's refusal (its ErrorReport's reason): the status's
// reason says which cause it was either way.
Status ExplainHandshakeError(const Status& status, std::string_view address) {
  const std::string at = "coordinator " + std::string(address) + ": ";
  switch (status.reason()) {
    case Reason::kWrongSecret:
      return Unauthenticated(at +
                             "the coordinator refused our handshake: wrong cluster secret? "
                             "(--secret-file or $WEIGHTCAST_SECRET must hold the coordinator's; " +
                             status.message() + ")")
          .WithReason(Reason::kWrongSecret);
    case Reason::kWrongCluster:
      return FailedPrecondition(
                 at + "wrong cluster (--cluster must match the coordinator's): " + status.message())
          .WithReason(Reason::kWrongCluster);
    case Reason::kProtocolVersion:
      return FailedPrecondition(at + "incompatible weightcast versions: " + status.message())
          .WithReason(Reason::kProtocolVersion);
    default:
      break;
  }
  if (status.code() == Code::kUnauthenticated) {  // a refusal of ours without a known cause
    return Unauthenticated(at + "the coordinator's handshake does not verify: " + status.message());
  }
  return status.WithContext("coordinator " + std::string(address));
}

}  // namespace

bool IsPermanentConnectError(const Status& status) {
  return status.code() == Code::kUnauthenticated || status.code() == Code::kFailedPrecondition ||
         status.code() == Code::kInvalidArgument;
}

bool IsStandbyRefusal(const Status& status) {
  return status.code() == Code::kUnavailable && status.reason() == Reason::kStandby;
}

bool IsWriterConflict(const Status& status) {
  return status.code() == Code::kFailedPrecondition && status.reason() == Reason::kWriterConflict;
}

std::string_view ConnectErrorCause(const Status& status) {
  switch (status.code()) {
    case Code::kUnauthenticated:
      return "wrong_secret";
    case Code::kFailedPrecondition:
      switch (status.reason()) {
        case Reason::kNotCoordinator:
          return "not_coordinator";
        case Reason::kProtocolVersion:
          return "protocol_version";
        case Reason::kWrongCluster:
          return "wrong_cluster";
        case Reason::kWriterConflict:
          return "writer_conflict";
        default:
          return "refused";
      }
    case Code::kInvalidArgument:
      return "bad_address";
    case Code::kUnavailable:
    case Code::kDeadlineExceeded:
    case Code::kAborted:
      return "unreachable";
    default:
      return "other";
  }
}

CoordinatorClient::CoordinatorClient(std::unique_ptr<net::Connection> connection)
    : connection_(std::move(connection)) {}

namespace {

std::vector<std::string> SplitAddresses(std::string_view list) {
  std::vector<std::string> out;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    if (!item.empty()) out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return out;
}

// The coordinator last found leading, per address list: the next Connect tries it first.
std::mutex leader_hints_mu;
std::map<std::string, std::string, std::less<>> leader_hints;

}  // namespace

Result<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(net::Transport& transport,
                                                                      std::string_view address,
                                                                      net::Duration timeout) {
  if (address.find(',') == std::string_view::npos) return ConnectOne(transport, address, timeout);
  std::vector<std::string> order = SplitAddresses(address);
  if (order.empty())
    return InvalidArgument("coordinator: no address in '" + std::string(address) + "'");
  {
    std::lock_guard lock(leader_hints_mu);
    auto hint = leader_hints.find(address);
    if (hint != leader_hints.end()) {
      auto it = std::find(order.begin(), order.end(), hint->second);
      if (it != order.end()) std::rotate(order.begin(), it, it + 1);
    }
  }
  Status last = Unavailable("no coordinator of " + std::string(address) + " leads");
  std::vector<std::string> tried;
  // A standby may name a leader outside the list; each address is tried once.
  for (size_t i = 0; i < order.size() && i < 16; ++i) {
    const std::string candidate = order[i];
    if (std::find(tried.begin(), tried.end(), candidate) != tried.end()) continue;
    tried.push_back(candidate);
    auto client = ConnectOne(transport, candidate, timeout);
    if (!client.ok()) {
      if (IsPermanentConnectError(client.status())) return client.status();
      last = client.status();
      continue;
    }
    wire::Envelope probe;
    probe.mutable_get_manifest();
    auto answer = (*client)->Call(std::move(probe), timeout);
    if (!answer.ok() && IsStandbyRefusal(answer.status())) {
      last = answer.status().WithContext("coordinator " + candidate);
      const std::string leader = (*client)->standby_leader();
      if (!leader.empty() && std::find(tried.begin(), tried.end(), leader) == tried.end()) {
        order.insert(order.begin() + static_cast<std::ptrdiff_t>(i) + 1, leader);
      }
      continue;
    }
    if (!answer.ok() && (answer.status().code() == Code::kUnavailable ||
                         answer.status().code() == Code::kDeadlineExceeded)) {
      last = answer.status().WithContext("coordinator " + candidate);
      continue;
    }
    // Any other answer (NOT_FOUND: no such channel) comes from a coordinator that serves.
    std::lock_guard lock(leader_hints_mu);
    leader_hints[std::string(address)] = candidate;
    return client;
  }
  return last;
}

Result<std::unique_ptr<CoordinatorClient>> CoordinatorClient::ConnectOne(net::Transport& transport,
                                                                         std::string_view address,
                                                                         net::Duration timeout) {
  auto connection = transport.Connect(address, timeout);
  if (!connection.ok()) return ExplainHandshakeError(connection.status(), address);
  if (connection.value()->peer().role != net::Role::kCoordinator) {
    return FailedPrecondition("coordinator " + std::string(address) + " is a " +
                              std::string(net::RoleName(connection.value()->peer().role)) +
                              ", not a coordinator")
        .WithReason(Reason::kNotCoordinator);
  }
  return std::unique_ptr<CoordinatorClient>(new CoordinatorClient(std::move(connection).value()));
}

void CoordinatorClient::Close() {
  if (connection_ != nullptr) connection_->Close();
}

Status CoordinatorClient::Wake() {
  // request_id 0: below every call's id, so a reply from a coordinator that answers it anyway is
  // skipped as the late answer to an earlier call.
  wire::Envelope envelope;
  envelope.set_request_id(0);
  envelope.mutable_heartbeat()->set_wake(true);
  WC_ASSIGN_OR_RETURN(std::vector<uint8_t> body, EncodeEnvelope(envelope));
  return connection_->SendControl(body, std::chrono::seconds(1));
}

Result<wire::Envelope> CoordinatorClient::Call(wire::Envelope request, net::Duration timeout) {
  std::lock_guard lock(mu_);
  if (timeout == net::Duration::zero()) timeout = timeout_;
  if (connection_ == nullptr) return Unavailable("coordinator client is closed");
  const wire::Envelope::BodyCase expected = ExpectedReply(request.body_case());
  if (expected == wire::Envelope::BODY_NOT_SET) {
    return InvalidArgument("not a coordinator request");
  }
  const uint64_t id = next_request_id_++;
  request.set_request_id(id);
  WC_ASSIGN_OR_RETURN(std::vector<uint8_t> body, EncodeEnvelope(request));

  // One deadline for the send and for every receive: replies to earlier calls that timed out may
  // still arrive first and are skipped, without extending the wait.
  const net::Clock& clock = net::Clock::Real();
  const bool forever = timeout >= std::chrono::hours(24 * 365);
  const net::TimePoint deadline = forever ? net::TimePoint::max() : clock.Now() + timeout;
  auto remaining = [&]() -> net::Duration {
    if (forever) return net::kForever;
    return std::max(net::Duration::zero(), deadline - clock.Now());
  };

  WC_RETURN_IF_ERROR(connection_->SendControl(body, remaining()));
  while (true) {
    auto frame = connection_->Receive(remaining());
    if (!frame.ok()) return frame.status().WithContext("coordinator");
    if (frame->type != net::FrameType::kControl) {
      connection_->Close();
      return Corrupt("coordinator sent a " + std::string(net::FrameTypeName(frame->type)) +
                     " frame on the control connection");
    }
    auto reply = ParseEnvelope(frame->body);
    if (!reply.ok()) {
      connection_->Close();
      return reply.status().WithContext("coordinator reply");
    }
    if (reply->request_id() < id) continue;  // the late answer to a call that timed out
    if (reply->request_id() != id) {
      connection_->Close();
      return Corrupt("coordinator answered request " + std::to_string(reply->request_id()) +
                     ", which was never sent (expected " + std::to_string(id) + ")");
    }
    if (reply->body_case() == wire::Envelope::kError) {
      Status error = StatusFromError(reply->error());
      if (error.reason() == Reason::kStandby) standby_leader_ = reply->error().leader();
      return error;
    }
    if (reply->body_case() != expected) {
      connection_->Close();
      return Corrupt("coordinator answered with the wrong message type (" +
                     std::to_string(reply->body_case()) + ", expected " + std::to_string(expected) +
                     ")");
    }
    return std::move(reply).value();
  }
}

Result<wire::RegisterReply> CoordinatorClient::Register(const wire::Register& request) {
  wire::Envelope envelope;
  *envelope.mutable_register_() = request;
  WC_ASSIGN_OR_RETURN(wire::Envelope reply, Call(std::move(envelope)));
  return std::move(*reply.mutable_register_reply());
}

Result<wire::HeartbeatReply> CoordinatorClient::Heartbeat(const wire::Heartbeat& request,
                                                          net::Duration timeout) {
  wire::Envelope envelope;
  *envelope.mutable_heartbeat() = request;
  WC_ASSIGN_OR_RETURN(wire::Envelope reply, Call(std::move(envelope), timeout));
  return std::move(*reply.mutable_heartbeat_reply());
}

Result<Version> CoordinatorClient::Publish(std::span<const uint8_t> signed_manifest,
                                           uint64_t writer_epoch) {
  wire::Envelope envelope;
  envelope.mutable_publish()->set_signed_manifest(signed_manifest.data(), signed_manifest.size());
  envelope.mutable_publish()->set_writer_epoch(writer_epoch);
  WC_ASSIGN_OR_RETURN(wire::Envelope reply, Call(std::move(envelope)));
  return Version(reply.publish_reply().version());
}

Result<wire::PublishReply> CoordinatorClient::PublishPart(std::span<const uint8_t> signed_part,
                                                          uint64_t writer_epoch) {
  wire::Envelope envelope;
  envelope.mutable_publish()->set_signed_manifest(signed_part.data(), signed_part.size());
  envelope.mutable_publish()->set_writer_epoch(writer_epoch);
  WC_ASSIGN_OR_RETURN(wire::Envelope reply, Call(std::move(envelope)));
  return std::move(*reply.mutable_publish_reply());
}

Result<std::vector<uint8_t>> CoordinatorClient::GetManifest(std::string_view channel,
                                                            Version version) {
  wire::Envelope envelope;
  envelope.mutable_get_manifest()->set_channel(std::string(channel));
  envelope.mutable_get_manifest()->set_version(version.value());
  WC_ASSIGN_OR_RETURN(wire::Envelope reply, Call(std::move(envelope)));
  const std::string& bytes = reply.manifest_reply().signed_manifest();
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

Result<wire::FleetStatus> CoordinatorClient::GetStatus(std::string_view channel) {
  return GetStatus(channel, false);
}

Result<wire::FleetStatus> CoordinatorClient::GetStatus(std::string_view channel,
                                                       bool include_left) {
  wire::Envelope envelope;
  envelope.mutable_get_status()->set_channel(std::string(channel));
  envelope.mutable_get_status()->set_include_left(include_left);
  WC_ASSIGN_OR_RETURN(wire::Envelope reply, Call(std::move(envelope)));
  return std::move(*reply.mutable_fleet_status());
}

Result<Version> CoordinatorClient::Rollback(std::string_view channel, Version version,
                                            std::span<const uint8_t> order) {
  wire::Envelope envelope;
  envelope.mutable_rollback()->set_channel(std::string(channel));
  envelope.mutable_rollback()->set_version(version.value());
  envelope.mutable_rollback()->set_order(std::string(order.begin(), order.end()));
  WC_ASSIGN_OR_RETURN(wire::Envelope reply, Call(std::move(envelope)));
  return Version(reply.rollback_reply().version());
}

Status CoordinatorClient::Leave(net::Duration timeout) {
  wire::Envelope envelope;
  envelope.mutable_leave();
  return Call(std::move(envelope), timeout).status();
}

}  // namespace weightcast::coord
