// The coordinator's core: registrations, heartbeats, channel logs and rollout decisions, every
// request handled under its one lock (mu_), which is why they share a file. Sweeps, peer lists
// and bans are coordinator_membership.cc; sharded publish's side is coordinator_parts.cc;
// serving connections over a transport is coordinator_serve.cc.
#include "coord/coordinator.h"
#include "coord/coordinator_node.h"

#include <algorithm>
#include <ctime>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "coord/attestation_verdict.h"
#include "coord/client_session.h"
#include "coord/envelope.h"
#include "coord/writer_text.h"
#include "manifest/builder.h"
#include "trust/rollback_order.h"
#include "trust/signed_manifest.h"
#include "util/text.h"

namespace weightcast::coord {
namespace {

constexpr size_t kMaxChannelsPerNode = 64;
constexpr size_t kMaxTensorPatterns = 1024;
constexpr size_t kMaxLabelBytes = 256;
// A node's held peers are a hint of at most its degree; more are ignored, so that a node cannot
// make the coordinator keep an unbounded list.
constexpr int kMaxHeldPeers = 1024;
// The pusher answers many nodes in turn: one that does not read must not stall the others long.
constexpr net::Duration kPushSendTimeout = std::chrono::milliseconds(200);

MemberInfo MemberInfoOf(const wire::Register& registration) {
  return {.channels = {registration.channels().begin(), registration.channels().end()},
          .rack = registration.rack(),
          .source = registration.source()};
}

uint64_t Millis(net::Duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

bool SameMembership(const wire::Register& a, const wire::Register& b) {
  return a.peer_address() == b.peer_address() && a.rack() == b.rack() && a.source() == b.source() &&
         std::equal(a.channels().begin(), a.channels().end(), b.channels().begin(),
                    b.channels().end());
}

bool Follows(const wire::Register& registration, std::string_view channel) {
  return std::find(registration.channels().begin(), registration.channels().end(), channel) !=
         registration.channels().end();
}

Status CheckLabel(std::string_view what, std::string_view value) {
  if (value.size() > kMaxLabelBytes) {
    return InvalidArgument("register: " + std::string(what) + " is longer than " +
                           std::to_string(kMaxLabelBytes) + " bytes");
  }
  return Status::Ok();
}

std::string FormatUtc(uint64_t unix_ms) {
  const auto seconds = static_cast<time_t>(unix_ms / 1000);
  struct tm tm {};
  gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string WriterIdOf(const net::PeerInfo& peer, const wire::Register& request) {
  return request.writer_id().empty() ? "node-" + std::to_string(peer.node_id.value())
                                     : request.writer_id();
}

uint64_t HeldEpoch(const wire::Register& request, std::string_view channel) {
  for (const wire::WriterLease& lease : request.leases()) {
    if (lease.channel() == channel) return lease.epoch();
  }
  return 0;
}

}  // namespace

std::string DescribeWriter(const wire::ChannelWriter& w, uint64_t now_unix_ms) {
  std::string out = "writer " + w.writer_id() + " (" +
                    (w.world() > 1 ? std::to_string(w.world()) + " ranks, first " : "") + "node " +
                    std::to_string(w.node_id()) + " at " + w.address() +
                    (w.hostname().empty() ? "" : ", host " + w.hostname()) + "), epoch " +
                    std::to_string(w.epoch()) + " since " + FormatUtc(w.since_unix_ms());
  if (now_unix_ms >= w.since_unix_ms()) {
    out += " (" + std::to_string((now_unix_ms - w.since_unix_ms()) / 1000) + " s ago)";
  }
  return out;
}

std::string FormatSeconds(net::Duration d) {
  const uint64_t ms = Millis(d);
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return std::to_string(ms) + " ms";
}

Coordinator::Coordinator(CoordinatorOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : net::Clock::Real()),
      sweep_period_(
          std::min<net::Duration>(options_.heartbeat_interval / 4, std::chrono::milliseconds(100))),
      started_(clock_.Now()),
      channel_metrics_(options_.metrics),
      // Open checked the options PeerGraph checks.
      // A fleet that registers again after a takeover comes back within the reconnect's
      // longest step (every node retries at most kReconnectMax apart) of the new leader being
      // reachable; one not back a heartbeat timeout after that is as good as dead.
      membership_(*Membership::Create({.heartbeat_timeout = options_.heartbeat_timeout,
                                       .forget_after = options_.forget_after,
                                       .settle_window = options_.heartbeat_timeout + kReconnectMax,
                                       .peers = {.degree = options_.degree,
                                                 .same_rack_fraction = options_.same_rack_fraction,
                                                 .seed = options_.seed},
                                       .source_degree = options_.source_degree})) {}

Coordinator::~Coordinator() { Stop(); }

Result<std::unique_ptr<Coordinator>> Coordinator::Open(CoordinatorOptions options) {
  if (options.state_dir.empty() && !options.open_store) {
    return InvalidArgument("coordinator: a state directory is needed");
  }
  if (options.secret.empty()) return InvalidArgument("coordinator: the cluster secret is empty");
  if (options.heartbeat_timeout <= net::Duration::zero()) {
    return InvalidArgument("coordinator: heartbeat timeout must be above 0");
  }
  if (options.heartbeat_interval == net::Duration::zero()) {
    options.heartbeat_interval = options.heartbeat_timeout / 3;
  }
  if (options.heartbeat_interval <= net::Duration::zero() ||
      options.heartbeat_interval >= options.heartbeat_timeout) {
    return InvalidArgument("coordinator: heartbeat interval must be above 0 and below the timeout");
  }
  if (options.degree < 2) return InvalidArgument("coordinator: --degree must be at least 2");
  options.source_degree = std::max(options.source_degree, options.degree);
  if (options.source_degree < 2) {
    return InvalidArgument("coordinator: source degree must be at least 2");
  }
  if (options.same_rack_fraction < 0 || options.same_rack_fraction > 1) {
    return InvalidArgument("coordinator: same-rack fraction must be in [0, 1]");
  }
  if (options.trust_anchor != nullptr) {
    if (options.identity == nullptr) {
      return InvalidArgument(
          "coordinator: with a CA the coordinator signs its decisions with its own key: give it "
          "a certificate with the coordinator role (--cert/--key, `weightcast ca issue --role "
          "coordinator`)");
    }
    Result<trust::CertificateInfo> own =
        options.trust_anchor->Check(options.identity->certificate_der());
    if (!own.ok())
      return InvalidArgument("coordinator: its certificate: " + own.status().message());
    if (!own->roles.coordinator) {
      return InvalidArgument("coordinator: its certificate '" + own->name + "' has the roles " +
                             own->roles.ToString() + ", not coordinator");
    }
  }
  if (options.decider == nullptr) options.decider = std::make_shared<EachDecider>();
  if (!options.log) options.log = [](std::string_view) {};
  std::unique_ptr<Coordinator> coordinator(new Coordinator(std::move(options)));
  if (coordinator->options_.open_store) {
    WC_ASSIGN_OR_RETURN(std::unique_ptr<LogStore> store, coordinator->options_.open_store());
    WC_ASSIGN_OR_RETURN(coordinator->log_,
                        VersionLog::Open(std::move(store), coordinator->options_.secret,
                                         coordinator->options_.trust_anchor));
  } else {
    WC_ASSIGN_OR_RETURN(coordinator->log_, VersionLog::Open(coordinator->options_.state_dir,
                                                            coordinator->options_.secret,
                                                            coordinator->options_.trust_anchor));
  }
  coordinator->log_->set_decision_signer(coordinator->options_.identity);
  const VersionLog::Recovery& recovery = coordinator->log_->recovery();
  uint64_t versions = 0;
  for (const auto& [name, channel] : coordinator->log_->channels()) {
    versions += channel.versions.size();
    coordinator->channel_metrics_.Update(channel);
  }
  coordinator->options_.log(
      "recovered " + std::to_string(recovery.records) + " log records, " +
      std::to_string(versions) + " versions in " +
      std::to_string(coordinator->log_->channels().size()) + " channels from " +
      coordinator->log_->store().Describe() +
      (recovery.torn_bytes != 0
           ? " (cut a torn last record of " + std::to_string(recovery.torn_bytes) + " bytes)"
           : ""));
  return coordinator;
}

const VersionLog::Recovery& Coordinator::recovery() const { return log_->recovery(); }

uint64_t Coordinator::UnixMs() const {
  if (options_.unix_ms) return options_.unix_ms();
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

wire::Envelope Coordinator::Handle(uint64_t session, const net::PeerInfo& peer,
                                   const wire::Envelope& request) {
  std::optional<net::TimePoint> held_until;
  std::optional<wire::Envelope> reply = Dispatch(session, peer, request, false, &held_until);
  if (reply.has_value()) return std::move(*reply);
  // Unreachable without may_hold; an empty reply rather than a crash if that ever changes.
  wire::Envelope empty;
  empty.set_request_id(request.request_id());
  return empty;
}

std::optional<wire::Envelope> Coordinator::Dispatch(uint64_t session, const net::PeerInfo& peer,
                                                    const wire::Envelope& request, bool may_hold,
                                                    std::optional<net::TimePoint>* held_until) {
  const auto body = static_cast<size_t>(request.body_case());
  if (body < counters_.requests.size()) ++counters_.requests[body];
  wire::Envelope reply;
  reply.set_request_id(request.request_id());
  Status failed = Status::Ok();
  std::optional<uint64_t> replaced;
  std::vector<uint64_t> fenced_sessions;
  switch (request.body_case()) {
    case wire::Envelope::kRegister: {
      auto r = OnRegister(session, peer, request.register_(), &replaced, &fenced_sessions);
      if (r.ok()) {
        *reply.mutable_register_reply() = std::move(r).value();
      } else {
        failed = r.status();
      }
      break;
    }
    case wire::Envelope::kHeartbeat: {
      auto r = OnHeartbeat(session, peer, request.request_id(), request.heartbeat(), may_hold,
                           held_until);
      if (r.ok()) {
        if (!r->has_value()) return std::nullopt;  // parked, or a wake
        *reply.mutable_heartbeat_reply() = std::move(**r);
      } else {
        failed = r.status();
      }
      break;
    }
    case wire::Envelope::kPublish: {
      auto r = OnPublish(peer, request.publish());
      if (r.ok()) {
        *reply.mutable_publish_reply() = std::move(r).value();
      } else {
        failed = r.status();
      }
      break;
    }
    case wire::Envelope::kGetManifest: {
      auto r = OnGetManifest(request.get_manifest());
      if (r.ok()) {
        *reply.mutable_manifest_reply() = std::move(r).value();
      } else {
        failed = r.status();
      }
      break;
    }
    case wire::Envelope::kGetStatus:
      *reply.mutable_fleet_status() = OnGetStatus(request.get_status());
      break;
    case wire::Envelope::kLeave:
      failed = OnLeave(session, peer);
      if (failed.ok()) reply.mutable_leave_reply();
      break;
    case wire::Envelope::kRollback: {
      auto r = OnRollback(peer, request.rollback());
      if (r.ok()) {
        reply.mutable_rollback_reply()->set_version(*r);
      } else {
        failed = r.status();
      }
      break;
    }
    default:
      failed = InvalidArgument("not a coordinator request (body " +
                               std::to_string(request.body_case()) + ")");
  }
  if (replaced.has_value()) CloseSession(*replaced);
  // A fenced writer learns it at once: its next call reconnects and is refused.
  for (uint64_t fenced : fenced_sessions) CloseSession(fenced);
  if (!failed.ok()) {
    ++counters_.requests_failed;
    *reply.mutable_error() = ErrorFromStatus(failed);
  }
  return reply;
}

Result<wire::RegisterReply> Coordinator::OnRegister(uint64_t session, const net::PeerInfo& peer,
                                                    const wire::Register& request,
                                                    std::optional<uint64_t>* replaced,
                                                    std::vector<uint64_t>* fenced_sessions) {
  if (peer.role != net::Role::kAgent && peer.role != net::Role::kPublisher) {
    return FailedPrecondition(
        "register: only agents and publishers register (this connection "
        "is a " +
        std::string(net::RoleName(peer.role)) + ")");
  }
  if (request.source() && peer.role != net::Role::kPublisher) {
    return InvalidArgument("register: only a publisher may register as a source");
  }
  if (request.peer_address().empty()) {
    return InvalidArgument("register: no peer address (where this node serves chunks)");
  }
  WC_RETURN_IF_ERROR(CheckLabel("peer address", request.peer_address()));
  WC_RETURN_IF_ERROR(CheckLabel("rack", request.rack()));
  WC_RETURN_IF_ERROR(CheckLabel("hostname", request.hostname()));
  if (request.channels().empty()) return InvalidArgument("register: no channel");
  if (static_cast<size_t>(request.channels_size()) > kMaxChannelsPerNode) {
    return InvalidArgument("register: more than " + std::to_string(kMaxChannelsPerNode) +
                           " channels");
  }
  for (const std::string& channel : request.channels()) {
    WC_RETURN_IF_ERROR(ValidateChannelName(channel).WithContext("register"));
  }
  if (static_cast<size_t>(request.tensor_patterns_size()) > kMaxTensorPatterns) {
    return InvalidArgument("register: more than " + std::to_string(kMaxTensorPatterns) +
                           " tensor patterns");
  }
  WC_RETURN_IF_ERROR(CheckLabel("writer id", request.writer_id()));
  if (peer.role != net::Role::kPublisher &&
      (!request.writer_id().empty() || request.take_over() || request.leases_size() != 0 ||
       request.world() != 0 || request.rank() != 0)) {
    return InvalidArgument("register: only a publisher is a writer");
  }
  if (request.world() > kMaxWorld || (request.world() <= 1 && request.rank() != 0) ||
      (request.world() > 1 && request.rank() >= request.world())) {
    return InvalidArgument("register: rank " + std::to_string(request.rank()) + " of world " +
                           std::to_string(request.world()) +
                           " (need 0 <= rank < world <= " + std::to_string(kMaxWorld) + ")");
  }
  if (request.world() > 1 && request.writer_id().empty()) {
    return InvalidArgument(
        "register: the ranks of a sharded publisher share one writer id; none was given");
  }

  const net::TimePoint now = clock_.Now();
  std::lock_guard lock(mu_);
  // Every channel's lease is checked before anything changes, so a refused registration changes
  // nothing; then the moved leases are logged, each durably, before the reply.
  std::vector<WriterGrant> grants;
  if (peer.role == net::Role::kPublisher) {
    for (const std::string& channel : request.channels()) {
      WC_ASSIGN_OR_RETURN(WriterGrant grant, GrantWriterLocked(channel, peer, request, now));
      grants.push_back(std::move(grant));
    }
    for (WriterGrant& grant : grants) {
      if (!grant.record.has_value()) continue;
      WC_RETURN_IF_ERROR(log_->RecordWriter(grant.channel, *grant.record)
                             .WithContext("register: logging the writer of " + grant.channel));
      options_.log(grant.channel + ": " + DescribeWriter(*grant.record, UnixMs()) + " (" +
                   grant.how + ")");
      ChannelChangedLocked(grant.channel);
    }
    for (WriterGrant& grant : grants) {
      std::vector<PeerId> fenced = grant.fenced_ranks;
      if (grant.fenced.has_value()) fenced.push_back(*grant.fenced);
      for (PeerId id : fenced) {
        auto old = nodes_.find(id);
        if (old != nodes_.end() && old->second->connected && old->second->session != session) {
          fenced_sessions->push_back(old->second->session);
        }
      }
      NoteRanksLocked(peer, request, grant);
    }
  }
  std::unique_ptr<Node>& slot = nodes_[peer.node_id];
  const bool known = slot != nullptr;
  if (!known) slot = std::make_unique<Node>();
  Node& node = *slot;
  if (known && node.connected && node.session != session) *replaced = node.session;
  if (!known || !membership_.alive(peer.node_id) || node.role != peer.role ||
      !SameMembership(node.registration, request)) {
    membership_changed_ = true;
  }
  node.id = peer.node_id;
  node.role = peer.role;
  node.session = session;
  node.connected = true;
  node.registration = request;
  std::vector<PeerId> held;
  for (int i = 0; i < std::min(request.held_peers_size(), kMaxHeldPeers); ++i) {
    const uint64_t id = request.held_peers(i);
    if (id != peer.node_id.value()) held.push_back(PeerId(id));
  }
  membership_.Register(peer.node_id, MemberInfoOf(request), now, std::move(held));
  // Settling starts here, so the reply already says keep; it ends at a sweep, which tells everyone.
  if (membership_.Settling(now)) settling_ = true;
  node.progress.clear();
  // A heartbeat parked by the connection this registration replaces is dropped with it.
  if (node.parked.has_value()) {
    node.parked.reset();
    --counters_.heartbeats_held;
  }
  node.wake_pending = false;
  node.registered_generation = ++generation_;
  ++counters_.registrations;
  options_.log("" + NodeName(node.id) + " registered (" + std::string(net::RoleName(peer.role)) +
               ", " + request.peer_address() +
               (request.rack().empty() ? "" : ", rack " + request.rack()) +
               (replaced->has_value() ? ", replacing its previous connection" : "") + ")");
  MaybeSweepLocked(now);

  wire::RegisterReply reply;
  reply.set_heartbeat_interval_ms(static_cast<uint32_t>(Millis(options_.heartbeat_interval)));
  reply.set_heartbeat_timeout_ms(static_cast<uint32_t>(Millis(options_.heartbeat_timeout)));
  for (const WriterGrant& grant : grants) {
    wire::WriterLease* lease = reply.add_leases();
    lease->set_channel(grant.channel);
    lease->set_epoch(grant.epoch);
  }
  return reply;
}

bool Coordinator::WriterLiveLocked(std::string_view channel, const wire::ChannelWriter& writer,
                                   net::TimePoint now) const {
  if (writer.world() > 1) {
    // A rank set is live while any of its ranks is.
    auto ranks = rank_holders_.find(channel);
    if (ranks != rank_holders_.end() && !ranks->second.empty()) {
      for (const auto& [rank, id] : ranks->second) {
        auto node = nodes_.find(id);
        if (node != nodes_.end() && membership_.alive(id) &&
            Follows(node->second->registration, channel)) {
          return true;
        }
      }
      return false;
    }
    return now - started_ <= options_.heartbeat_timeout;
  }
  auto it = nodes_.find(PeerId(writer.node_id()));
  if (it != nodes_.end()) {
    const Node& node = *it->second;
    return membership_.alive(node.id) && node.role == net::Role::kPublisher &&
           Follows(node.registration, channel);
  }
  // Membership is not persisted: a writer logged before a restart gets the same heartbeat
  // timeout to come back as it would have had without the restart.
  return now - started_ <= options_.heartbeat_timeout;
}

Result<Coordinator::WriterGrant> Coordinator::GrantWriterLocked(const std::string& channel,
                                                                const net::PeerInfo& peer,
                                                                const wire::Register& request,
                                                                net::TimePoint now) const {
  const std::string writer_id = WriterIdOf(peer, request);
  const uint64_t held = HeldEpoch(request, channel);
  const wire::ChannelWriter* current = log_->writer(channel);
  WriterGrant grant;
  grant.channel = channel;
  auto next = [&](std::string how, bool taken_over) {
    wire::ChannelWriter record;
    record.set_writer_id(writer_id);
    record.set_epoch((current == nullptr ? 0 : current->epoch()) + 1);
    record.set_node_id(peer.node_id.value());
    record.set_address(request.peer_address());
    record.set_hostname(request.hostname());
    record.set_since_unix_ms(UnixMs());
    record.set_taken_over(taken_over);
    grant.epoch = record.epoch();
    grant.record = std::move(record);
    grant.how = std::move(how);
  };
  if (current == nullptr) {
    // `held` set: a coordinator whose state directory was replaced; nothing to fence against.
    next("the channel's first writer", false);
    if (request.world() > 1) grant.record->set_world(request.world());
    return grant;
  }
  if (request.world() > 1 || current->world() > 1) {
    return GrantShardedWriterLocked(channel, peer, request, *current, now);
  }
  if (held != 0) {
    // The process held a lease before (it reconnects): it keeps it only if nobody took it since.
    WC_RETURN_IF_ERROR(CheckNotFencedLocked(channel, peer.node_id, held));
    grant.epoch = held;
    return grant;
  }
  if (current->writer_id() == writer_id) {
    if (current->node_id() == peer.node_id.value()) {
      grant.epoch = current->epoch();  // the same process (or the same fixed --node-id) again
      return grant;
    }
    // The same writer in a new process: a restart. It continues the channel; the old process,
    // if it still runs, is fenced.
    next("the same writer restarted", false);
    if (WriterLiveLocked(channel, *current, now)) grant.fenced = PeerId(current->node_id());
    return grant;
  }
  if (!WriterLiveLocked(channel, *current, now)) {
    next("the lease of " + current->writer_id() + " had lapsed", false);
    return grant;
  }
  if (request.take_over()) {
    next("taken over from " + current->writer_id(), true);
    grant.fenced = PeerId(current->node_id());
    return grant;
  }
  return FailedPrecondition(
             "channel " + channel + " already has a writer: " + DescribeWriter(*current, UnixMs()) +
             "; a second writer is refused. Stop that publisher (its lease lapses " +
             FormatSeconds(options_.heartbeat_timeout) +
             " after its last heartbeat) or take the channel over (--take-over, take_over=True)")
      .WithReason(Reason::kWriterConflict);
}

Status Coordinator::CheckNotFencedLocked(std::string_view channel, PeerId node,
                                         uint64_t held_epoch) const {
  const wire::ChannelWriter* current = log_->writer(channel);
  if (current == nullptr) return Status::Ok();
  const bool same_epoch = held_epoch == 0 || held_epoch == current->epoch();
  if (current->world() > 1) {
    // A sharded lease is held by the rank set: each rank's latest process.
    auto ranks = rank_holders_.find(channel);
    if (same_epoch && ranks != rank_holders_.end()) {
      for (const auto& [rank, id] : ranks->second) {
        if (id == node) return Status::Ok();
      }
    }
  } else if (same_epoch && current->node_id() == node.value()) {
    return Status::Ok();
  }
  return FailedPrecondition(
             "fenced by " + DescribeWriter(*current, UnixMs()) + ": this publisher (node " +
             std::to_string(node.value()) +
             (held_epoch != 0 ? ", epoch " + std::to_string(held_epoch) : std::string()) +
             ") no longer holds channel " + std::string(channel) +
             " and may not publish to it or register for it again; restart it to rejoin (with "
             "--take-over / take_over=True to take the channel back)")
      .WithReason(Reason::kWriterConflict);
}

Result<std::optional<wire::HeartbeatReply>> Coordinator::OnHeartbeat(
    uint64_t session, const net::PeerInfo& peer, uint64_t request_id,
    const wire::Heartbeat& request, bool may_hold, std::optional<net::TimePoint>* held_until) {
  if (static_cast<size_t>(request.channels_size()) > kMaxChannelsPerNode) {
    return InvalidArgument("heartbeat: more than " + std::to_string(kMaxChannelsPerNode) +
                           " channels");
  }
  const net::TimePoint now = clock_.Now();
  std::lock_guard lock(mu_);
  auto it = nodes_.find(peer.node_id);
  if (it == nodes_.end()) {
    return FailedPrecondition("heartbeat: " + NodeName(peer.node_id) +
                              " is not registered; register first");
  }
  Node& node = *it->second;
  if (node.session != session) {
    return FailedPrecondition("heartbeat: this connection of " + NodeName(node.id) +
                              " was replaced by a newer registration");
  }
  if (node.role == net::Role::kPublisher) {
    // A writer fenced by a take-over (or a restart of the same writer) hears it here.
    for (const std::string& channel : node.registration.channels()) {
      WC_RETURN_IF_ERROR(CheckNotFencedLocked(channel, node.id, 0).WithContext("heartbeat"));
    }
  }
  ++counters_.heartbeats;
  if (membership_.Heard(node.id, now)) {
    // Same connection, same registration: a node that was only slow (or that left and thought
    // better of it) comes back as it was.
    membership_changed_ = true;
    options_.log("" + NodeName(node.id) + " is alive again");
  }
  if (!request.wake()) NoteBansLocked(node.id, request);
  std::set<std::string> changed;
  for (const wire::ChannelProgress& progress : request.channels()) {
    if (!Follows(node.registration, progress.channel())) continue;  // not one it registered
    auto previous = node.progress.find(progress.channel());
    if (previous == node.progress.end() || previous->second.phase() != progress.phase() ||
        previous->second.version() != progress.version()) {
      changed.insert(progress.channel());
    }
    std::optional<wire::Attestation> before;
    if (previous != node.progress.end() && previous->second.has_attestation()) {
      before = previous->second.attestation();
    }
    wire::ChannelProgress& kept = node.progress[progress.channel()] = progress;
    if (kept.has_attestation()) {
      const std::string problem = JudgeAttestation(log_->channel(kept.channel()), before, UnixMs(),
                                                   *kept.mutable_attestation());
      if (!problem.empty()) {
        options_.log(NodeName(node.id) + " attests " + kept.channel() + " v" +
                     std::to_string(kept.attestation().version()) + " " + problem);
      }
    }
  }
  // A phase change may complete a rollout: decide now rather than at the next sweep.
  for (const std::string& channel : changed) DecideLocked(channel, now);
  MaybeSweepLocked(now);

  if (may_hold && request.wake()) {
    // The connection thread answered a parked heartbeat before it got here (any request does
    // that); with none parked the wake overtook its heartbeat, which must then not wait.
    node.wake_pending = true;
    return std::optional<wire::HeartbeatReply>();
  }
  const bool wake_pending = std::exchange(node.wake_pending, false);
  if (may_hold && request.wait_ms() > 0 && !wake_pending &&
      request.seen_generation() == NodeGenerationLocked(node)) {
    // Nothing new for this node: park it. Capped at the interval the node was told to
    // heartbeat at, so that a parked node is never silent for the heartbeat timeout.
    const net::Duration wait = std::min<net::Duration>(std::chrono::milliseconds(request.wait_ms()),
                                                       options_.heartbeat_interval);
    if (!node.parked.has_value()) ++counters_.heartbeats_held;
    node.parked = Node::Parked{.session = session,
                               .request_id = request_id,
                               .seen = request.seen_generation(),
                               .deadline = now + wait};
    *held_until = node.parked->deadline;
    return std::optional<wire::HeartbeatReply>();
  }
  return std::optional<wire::HeartbeatReply>(HeartbeatReplyLocked(node));
}

uint64_t Coordinator::NodeGenerationLocked(const Node& node) const {
  uint64_t generation = std::max(node.registered_generation, node.peers_generation);
  for (const std::string& name : node.registration.channels()) {
    if (auto it = channel_generation_.find(name); it != channel_generation_.end()) {
      generation = std::max(generation, it->second);
    }
  }
  return generation;
}

wire::HeartbeatReply Coordinator::HeartbeatReplyLocked(const Node& node) const {
  wire::HeartbeatReply reply;
  for (const std::string& name : node.registration.channels()) {
    wire::ChannelTarget* target = reply.add_channels();
    target->set_channel(name);
    const ChannelState* channel = log_->channel(name);
    if (channel == nullptr || channel->versions.empty()) continue;
    const wire::VersionEntry& newest = channel->versions.back();
    target->set_version(newest.version());
    target->set_decision(newest.decision());
    target->set_current_version(channel->current_version);
    target->set_abort_reason(newest.abort_reason());
    if (!channel->rollback_order.empty()) target->set_rollback_order(channel->rollback_order);
    if (!channel->newest_decision.empty()) target->set_signed_decision(channel->newest_decision);
  }
  if (auto peers = peer_lists_.find(node.id); peers != peer_lists_.end()) {
    for (const wire::PeerEntry& entry : peers->second) *reply.add_peers() = entry;
  }
  reply.set_keep_peers(settling_);
  if (auto grant = origin_grants_.find(node.id); grant != origin_grants_.end()) {
    reply.set_origin_stripe(grant->second.stripe);
    reply.set_origin_stripes(grant->second.stripes);
  }
  reply.set_generation(NodeGenerationLocked(node));
  return reply;
}

void Coordinator::ChannelChangedLocked(const std::string& channel) {
  channel_generation_[channel] = ++generation_;
  push_pending_ = true;
  push_cv_.notify_one();
}

wire::Envelope Coordinator::UnparkLocked(Node& node) {
  wire::Envelope reply;
  reply.set_request_id(node.parked->request_id);
  node.parked.reset();
  --counters_.heartbeats_held;
  *reply.mutable_heartbeat_reply() = HeartbeatReplyLocked(node);
  return reply;
}

std::optional<wire::Envelope> Coordinator::TakeParked(uint64_t session, PeerId id, bool force,
                                                      std::optional<net::TimePoint>* held_until) {
  const net::TimePoint now = clock_.Now();
  std::lock_guard lock(mu_);
  held_until->reset();
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return std::nullopt;
  Node& node = *it->second;
  if (!node.parked.has_value() || node.parked->session != session) return std::nullopt;
  if (!force && now < node.parked->deadline) {
    *held_until = node.parked->deadline;
    return std::nullopt;
  }
  return UnparkLocked(node);
}

void Coordinator::SendToSession(uint64_t session, const wire::Envelope& reply) {
  std::shared_ptr<net::Connection> connection;
  {
    std::lock_guard lock(sessions_mu_);
    auto it = sessions_.find(session);
    if (it == sessions_.end()) return;
    connection = it->second;
  }
  auto bytes = EncodeEnvelope(reply);
  if (!bytes.ok() || !connection->SendControl(*bytes, kPushSendTimeout).ok()) connection->Close();
}

void Coordinator::PushLoop() {
  std::unique_lock lock(mu_);
  while (true) {
    push_cv_.wait(lock, [this] { return push_pending_ || push_stop_; });
    if (push_stop_) return;
    push_pending_ = false;
    // O(nodes) per change, not per heartbeat: changes are publishes, decisions, rollbacks and
    // peer-list rebuilds (at most one per sweep period).
    std::vector<std::pair<uint64_t, wire::Envelope>> replies;
    if (counters_.heartbeats_held.load() != 0) {
      for (auto& [id, node] : nodes_) {
        if (!node->parked.has_value() || NodeGenerationLocked(*node) == node->parked->seen) {
          continue;
        }
        const uint64_t session = node->parked->session;
        replies.emplace_back(session, UnparkLocked(*node));
      }
    }
    if (replies.empty()) continue;
    counters_.heartbeats_pushed += replies.size();
    lock.unlock();
    for (const auto& [session, reply] : replies) SendToSession(session, reply);
    lock.lock();
  }
}

Result<wire::PublishReply> Coordinator::OnPublish(const net::PeerInfo& peer,
                                                  const wire::Publish& request) {
  if (peer.role != net::Role::kPublisher && peer.role != net::Role::kTool) {
    return FailedPrecondition("publish: a " + std::string(net::RoleName(peer.role)) +
                              " may not publish");
  }
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(request.signed_manifest().data()),
                                 request.signed_manifest().size());
  const net::TimePoint now = clock_.Now();
  std::lock_guard lock(mu_);
  // A part of a sharded version is not a version yet: it is collected (coordinator_parts.cc).
  if (Result<Manifest> signed_part =
          VerifySignedManifest(bytes, {options_.secret, options_.trust_anchor.get()});
      signed_part.ok()) {
    Result<std::optional<PartId>> part = PartOf(*signed_part);
    if (!part.ok()) return part.status().WithContext("publish");
    if (part->has_value()) return OnPublishPartLocked(peer, request, *signed_part, **part, now);
  }
  Result<VerifiedPublish> checked = log_->VerifyPublish(bytes);
  if (!checked.ok()) {
    if (checked.status().code() == Code::kUnauthenticated) {
      // Someone tried to publish what no publisher of the channel signed: the operator hears of
      // it here, not only the node that tried.
      options_.log("refused a publish from node " + std::to_string(peer.node_id.value()) + " (" +
                   peer.address + "): " + checked.status().message());
    }
    return checked.status();
  }
  const VerifiedPublish& verified = *checked;
  const Manifest& m = verified.manifest;
  if (const wire::ChannelWriter* writer = log_->writer(m.channel);
      writer != nullptr && writer->world() > 1 && request.writer_epoch() != 0) {
    return FailedPrecondition("publish: channel " + m.channel +
                              " is written by a sharded writer (" +
                              std::to_string(writer->world()) +
                              " ranks): each rank publishes its part (weightcast.part)");
  }
  // One writer per channel: the lease's epoch fences a writer that lost it; without an epoch (a
  // tool, an older publisher) only while no other live writer holds the channel.
  if (request.writer_epoch() != 0) {
    WC_RETURN_IF_ERROR(CheckNotFencedLocked(m.channel, peer.node_id, request.writer_epoch())
                           .WithContext("publish"));
  } else if (const wire::ChannelWriter* writer = log_->writer(m.channel);
             writer != nullptr && writer->node_id() != peer.node_id.value() &&
             WriterLiveLocked(m.channel, *writer, now)) {
    return FailedPrecondition("publish: channel " + m.channel +
                              " already has a writer: " + DescribeWriter(*writer, UnixMs()) +
                              "; only it may publish (register as a publisher to take over)")
        .WithReason(Reason::kWriterConflict);
  }
  wire::PublishReply reply;
  if (verified.duplicate) {
    options_.log("" + m.channel + " v" + std::to_string(m.version.value()) +
                 " published again by " + NodeName(peer.node_id) + " (already recorded)");
    reply.set_version(m.version.value());
    return reply;
  }
  WC_ASSIGN_OR_RETURN(wire::VersionEntry entry, RecordPublishLocked(verified, peer.node_id));
  reply.set_version(entry.version());
  return reply;
}

Result<wire::VersionEntry> Coordinator::RecordPublishLocked(const VerifiedPublish& verified,
                                                            PeerId from) {
  const Manifest& m = verified.manifest;
  static const ChannelState kEmpty;
  const ChannelState* channel = log_->channel(m.channel);
  wire::VersionEntry preview;
  preview.set_version(m.version.value());
  if (m.delta.has_value()) preview.set_base_version(m.delta->base_version.value());
  const DecisionChange decision =
      options_.decider->OnPublish(channel != nullptr ? *channel : kEmpty, preview);
  WC_ASSIGN_OR_RETURN(
      wire::VersionEntry entry,
      log_->RecordPublish(verified, from, UnixMs(), decision.decision, decision.abort_reason));
  ++counters_.versions_published;
  if (const ChannelState* recorded = log_->channel(m.channel); recorded != nullptr) {
    const wire::VersionEntry* applied = recorded->Find(entry.version());
    if (applied != nullptr && applied->decision() != wire::DECISION_NONE) {
      channel_metrics_.Decided(*recorded, *applied);
    } else {
      channel_metrics_.Update(*recorded);
    }
  }
  ChannelChangedLocked(m.channel);
  options_.log("published " + m.channel + " v" + std::to_string(entry.version()) + " (" +
               FormatBytes(entry.total_bytes()) + ", " + std::to_string(entry.chunk_count()) +
               " chunks" +
               (entry.base_version() != 0
                    ? ", delta on v" + std::to_string(entry.base_version()) + " with " +
                          FormatBytes(entry.payload_bytes()) + " of payloads"
                    : "") +
               ") from " + NodeName(from));
  channels_to_decide_.insert(m.channel);
  return entry;
}

Result<wire::ManifestReply> Coordinator::OnGetManifest(const wire::GetManifest& request) {
  WC_RETURN_IF_ERROR(ValidateChannelName(request.channel()).WithContext("get manifest"));
  std::shared_ptr<const std::vector<uint8_t>> bytes;
  {
    std::lock_guard lock(mu_);
    WC_ASSIGN_OR_RETURN(bytes, log_->GetManifest(request.channel(), request.version()));
  }
  wire::ManifestReply reply;
  reply.set_signed_manifest(bytes->data(), bytes->size());
  return reply;
}

wire::FleetStatus Coordinator::OnGetStatus(const wire::GetStatus& request) {
  const net::TimePoint now = clock_.Now();
  const std::string& filter = request.channel();
  std::lock_guard lock(mu_);
  MaybeSweepLocked(now);
  wire::FleetStatus status;
  status.set_now_unix_ms(UnixMs());
  status.set_store(log_->store().Describe());
  status.set_store_problem(log_->store().Health());
  for (const auto& [id, node] : nodes_) {
    if (!filter.empty() && !Follows(node->registration, filter)) continue;
    if (membership_.left(id) && !request.include_left()) continue;
    wire::NodeStatus* out = status.add_nodes();
    out->set_node_id(id.value());
    out->set_address(node->registration.peer_address());
    out->set_rack(node->registration.rack());
    out->set_source(node->registration.source());
    out->set_alive(membership_.alive(id));
    out->set_left(membership_.left(id));
    out->set_last_heartbeat_ms_ago(Millis(now - membership_.last_seen(id)));
    out->set_hostname(node->registration.hostname());
    *out->mutable_tensor_patterns() = node->registration.tensor_patterns();
    for (const auto& [name, progress] : node->progress) {
      if (filter.empty() || name == filter) *out->add_channels() = progress;
    }
  }
  for (const auto& [name, channel] : log_->channels()) {
    if (!filter.empty() && name != filter) continue;
    wire::ChannelLog* out = status.add_channels();
    out->set_channel(name);
    out->set_current_version(channel.current_version);
    for (const wire::VersionEntry& entry : channel.versions) *out->add_versions() = entry;
  }
  if (!filter.empty() && status.channels_size() == 0) status.add_channels()->set_channel(filter);
  for (wire::ChannelLog& out : *status.mutable_channels()) {
    if (const wire::ChannelWriter* writer = log_->writer(out.channel()); writer != nullptr) {
      *out.mutable_writer() = *writer;
      out.mutable_writer()->set_live(WriterLiveLocked(out.channel(), *writer, now));
    }
    if (auto aborted = aborted_parts_.find(out.channel());
        aborted != aborted_parts_.end() && !aborted->second.empty()) {
      out.set_newest_aborted_assembly(aborted->second.rbegin()->first);
    }
  }
  return status;
}

Status Coordinator::OnLeave(uint64_t session, const net::PeerInfo& peer) {
  const net::TimePoint now = clock_.Now();
  std::lock_guard lock(mu_);
  auto it = nodes_.find(peer.node_id);
  if (it == nodes_.end()) {
    return FailedPrecondition("leave: " + NodeName(peer.node_id) + " is not registered");
  }
  Node& node = *it->second;
  if (node.session != session) {
    // A newer registration of the same id is the node now: this connection speaks for no one.
    return FailedPrecondition("leave: this connection of " + NodeName(node.id) +
                              " was replaced by a newer registration");
  }
  if (membership_.left(node.id)) return Status::Ok();
  ++counters_.nodes_left;
  if (membership_.alive(node.id)) membership_changed_ = true;
  membership_.Leave(node.id, now);  // forgotten forget_after from now, like a node that died
  options_.log("" + NodeName(node.id) + " (" + node.registration.peer_address() + ") left");
  // Its peers get lists without it and commit policies stop waiting for it now, not at the
  // heartbeat timeout.
  SweepLocked(now);
  return Status::Ok();
}

Result<uint64_t> Coordinator::OnRollback(const net::PeerInfo& peer, const wire::Rollback& request) {
  if (peer.role != net::Role::kTool && peer.role != net::Role::kPublisher &&
      peer.role != net::Role::kAgent) {
    return FailedPrecondition("rollback: a " + std::string(net::RoleName(peer.role)) +
                              " may not roll a channel back");
  }
  WC_RETURN_IF_ERROR(ValidateChannelName(request.channel()).WithContext("rollback"));
  std::lock_guard lock(mu_);
  std::string by = NodeName(peer.node_id);
  if (options_.trust_anchor != nullptr) {
    Result<std::string> signer = CheckRollbackOrderLocked(request);
    if (!signer.ok()) {
      options_.log("refused a rollback of " + request.channel() + " from " + by + ": " +
                   signer.status().message());
      return signer.status();
    }
    by = *signer + " (order sent by " + by + ")";
  } else if (peer.role == net::Role::kAgent) {
    // An agent whose engine refused the new version (--hook-failure rollback) may roll back a
    // channel it follows (docs/rollout.md), and only that.
    auto it = nodes_.find(peer.node_id);
    if (it == nodes_.end() || !Follows(it->second->registration, request.channel())) {
      return FailedPrecondition("rollback: an agent may only roll back a channel it follows");
    }
  }
  WC_ASSIGN_OR_RETURN(uint64_t target, log_->ResolveRollback(request.channel(), request.version()));
  WC_RETURN_IF_ERROR(CheckRollbackReachableLocked(request.channel(), target));
  // In certificate mode the order goes into the log and to every agent with the rollback: they
  // switch back only with it (trust::RollbackAuthorized).
  WC_ASSIGN_OR_RETURN(
      uint64_t version,
      log_->RecordRollback(request.channel(), target, UnixMs(),
                           options_.trust_anchor != nullptr ? request.order() : std::string()));
  if (const ChannelState* channel = log_->channel(request.channel()); channel != nullptr) {
    channel_metrics_.RolledBack(*channel);
  }
  ChannelChangedLocked(request.channel());
  options_.log("" + request.channel() + " rolled back to v" + std::to_string(version) + " by " +
               by);
  channels_to_decide_.insert(request.channel());
  return version;
}

Result<std::string> Coordinator::CheckRollbackOrderLocked(const wire::Rollback& request) {
  if (request.order().empty()) {
    return Unauthenticated(
        "rollback: this cluster has a CA, and a rollback needs an order signed by an operator "
        "(weightcast rollback --cert OPERATOR.pem --key OPERATOR.key)");
  }
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(request.order().data()),
                                 request.order().size());
  WC_ASSIGN_OR_RETURN(trust::CheckedRollbackOrder checked,
                      trust::VerifyRollbackOrder(bytes, *options_.trust_anchor));
  const trust::RollbackOrder& order = checked.order;
  if (order.channel != request.channel() || order.version != request.version()) {
    return Unauthenticated("rollback: the operator's order is for " + order.channel + " v" +
                           std::to_string(order.version) + ", not this rollback");
  }
  const ChannelState* channel = log_->channel(request.channel());
  const uint64_t current = channel == nullptr ? 0 : channel->current_version;
  if (order.from != current) {
    return Unauthenticated("rollback: the operator's order takes " + order.channel + " from v" +
                           std::to_string(order.from) + ", and v" + std::to_string(current) +
                           " is current now");
  }
  const int64_t now = static_cast<int64_t>(UnixMs());
  const int64_t window =
      std::chrono::duration_cast<std::chrono::milliseconds>(trust::kRollbackOrderWindow).count();
  std::erase_if(rollback_nonces_,
                [&](const auto& entry) { return entry.second < now - 2 * window; });
  if (order.issued_unix_ms < now - window || order.issued_unix_ms > now + window) {
    return Unauthenticated("rollback: the operator's order was issued " +
                           std::to_string((now - order.issued_unix_ms) / 1000) +
                           " s from now; an order is taken within " +
                           std::to_string(window / 1000) + " s of its issue (clocks in sync?)");
  }
  if (!rollback_nonces_.emplace(order.nonce, order.issued_unix_ms).second) {
    return Unauthenticated("rollback: this operator's order was taken already (a replay)");
  }
  return "operator '" + checked.signer.name + "' (serial " + checked.signer.serial + ")";
}

// A rollback makes current a version that agents either keep (they switch) or fetch from the
// agents that keep it (a target nobody keeps would wedge the channel). Refused when live
// agents that hold versions of the channel follow it and none of them keeps the target; the
// error says what they keep. No such agent: nothing to check, the log change alone is made.
Status Coordinator::CheckRollbackReachableLocked(const std::string& channel,
                                                 uint64_t target) const {
  std::map<uint64_t, uint32_t> keepers;  // version -> live agents keeping it
  uint32_t live = 0;
  for (const auto& [id, node] : nodes_) {
    if (!membership_.alive(id) || node->role != net::Role::kAgent || node->registration.source() ||
        !Follows(node->registration, channel)) {
      continue;
    }
    auto it = node->progress.find(channel);
    if (it == node->progress.end()) continue;
    const wire::ChannelProgress& p = it->second;
    std::set<uint64_t> kept(p.kept_versions().begin(), p.kept_versions().end());
    if (p.current_version() != 0) kept.insert(p.current_version());
    if (kept.empty()) continue;  // holds nothing yet: neither a keeper nor stuck on one
    ++live;
    for (uint64_t v : kept) ++keepers[v];
  }
  if (live == 0 || keepers.contains(target)) return Status::Ok();
  std::string kept;
  for (const auto& [v, n] : keepers) {
    kept += (kept.empty() ? "v" : ", v") + std::to_string(v) + " on " + std::to_string(n);
  }
  return FailedPrecondition("rollback: " + channel + " v" + std::to_string(target) +
                            " is kept by none of the " + std::to_string(live) +
                            " live agents (none could switch to it or serve it); they keep " +
                            (kept.empty() ? std::string("nothing yet") : kept));
}

void Coordinator::Disconnected(uint64_t session) {
  std::lock_guard lock(mu_);
  for (auto& [id, node] : nodes_) {
    if (node->session != session) continue;
    node->connected = false;
    node->wake_pending = false;
    if (node->parked.has_value()) {
      node->parked.reset();
      --counters_.heartbeats_held;
    }
  }
}

void Coordinator::DecideLocked(const std::string& name, net::TimePoint now) {
  const ChannelState* channel = log_->channel(name);
  if (channel == nullptr) return;
  std::vector<NodeProgress> nodes;
  for (const auto& [id, node] : nodes_) {
    if (!membership_.alive(id) || membership_.quarantined(id) ||
        !Follows(node->registration, name)) {
      continue;
    }
    auto progress = node->progress.find(name);
    nodes.push_back({.node = id,
                     .source = node->registration.source(),
                     .progress = progress == node->progress.end() ? nullptr : &progress->second});
  }
  for (const DecisionChange& change : options_.decider->Decide(*channel, nodes, now)) {
    Status recorded =
        log_->RecordDecision(name, change.version, change.decision, change.abort_reason, UnixMs());
    if (!recorded.ok()) {
      // Retried on every sweep while the store cannot write (etcd without quorum): said once.
      const std::string failure = "recording a decision for " + name + " v" +
                                  std::to_string(change.version) + ": " + recorded.ToString();
      if (failure != last_decision_failure_) options_.log(failure);
      last_decision_failure_ = failure;
      return;
    }
    last_decision_failure_.clear();
    if (const wire::VersionEntry* entry = channel->Find(change.version); entry != nullptr) {
      channel_metrics_.Decided(*channel, *entry);
    }
    ChannelChangedLocked(name);
    options_.log("" + name + " v" + std::to_string(change.version) + ": " +
                 wire::Decision_Name(change.decision) +
                 (change.abort_reason.empty() ? "" : " (" + change.abort_reason + ")"));
  }
}

void Coordinator::CountMembersLocked() {
  uint64_t alive = 0;
  uint64_t left = 0;
  std::map<std::string, ChannelAgentCounts, std::less<>> agents;
  for (const auto& [name, channel] : log_->channels()) agents[name];
  for (const auto& [id, node] : nodes_) {
    alive += membership_.alive(id) ? 1 : 0;
    left += membership_.left(id) ? 1 : 0;
    if (membership_.left(id)) continue;  // left on purpose: neither dead nor behind
    if (node->role != net::Role::kAgent || node->registration.source()) continue;
    for (const std::string& name : node->registration.channels()) {
      ChannelAgentCounts& counts = agents[name];
      if (!membership_.alive(id)) {
        ++counts.dead;
        continue;
      }
      auto progress = node->progress.find(name);
      if (progress == node->progress.end()) continue;  // no report yet: neither failed nor behind
      if (progress->second.has_attestation()) {
        const wire::AttestationVerdict verdict = progress->second.attestation().verdict();
        counts.attested_match += verdict == wire::ATTESTATION_MATCH ? 1 : 0;
        counts.attested_mismatch += verdict == wire::ATTESTATION_MISMATCH ? 1 : 0;
      }
      if (progress->second.phase() == wire::PHASE_FAILED) {
        ++counts.failed;
        continue;
      }
      const ChannelState* channel = log_->channel(name);
      if (channel != nullptr && channel->current_version != 0 &&
          progress->second.current_version() != channel->current_version) {
        ++counts.lagging;
      }
    }
  }
  counters_.members_alive = alive;
  counters_.members_dead = nodes_.size() - alive - left;
  channel_metrics_.SetAgents(agents);
}

void Coordinator::CloseSession(uint64_t session) {
  std::shared_ptr<net::Connection> connection;
  {
    std::lock_guard lock(sessions_mu_);
    auto it = sessions_.find(session);
    if (it == sessions_.end()) return;
    connection = it->second;
  }
  connection->Close();
}

}  // namespace weightcast::coord
