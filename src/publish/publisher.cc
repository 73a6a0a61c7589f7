// The coordinated publisher: its session with the coordinator (registration, writer lease,
// heartbeats, reconciling its store with the channel's log), publishing a prepared version and
// seeding it until the fleet holds it. One file because each of these reads and writes the same
// session state under one lock (mu_); preparing a version is version_builder.cc, a rank's side
// of sharded publish is publisher_parts.cc.
#include "publish/publisher.h"
#include "publish/channel_log.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>
#include <vector>

#include "manifest/part_assembly.h"
#include "net/transport_select.h"
#include "publish/watcher.h"
#include "trust/signed_manifest.h"
#include "util/file.h"
#include "util/text.h"

namespace weightcast::publish {
namespace {

namespace fs = std::filesystem;
namespace wire = coord::wire;

bool Transient(const Status& st) {
  return st.code() == Code::kUnavailable || st.code() == Code::kDeadlineExceeded;
}

// Whether the coordinator's log holds `version` with `root`: only such a version can be the base
// of a delta (the coordinator refuses any other, and agents could not hold it).
bool Logged(const wire::ChannelLog& log, Version version, const Digest& root) {
  for (const wire::VersionEntry& e : log.versions()) {
    if (e.version() == version.value()) {
      return e.root().size() == root.size() &&
             std::equal(root.begin(), root.end(),
                        reinterpret_cast<const uint8_t*>(e.root().data()));
    }
  }
  return false;
}

// Whether `version` was aborted (by the rollout, or by a rollback below it): no agent holds it,
// so it cannot be the base of a delta either.
bool AbortedInLog(const wire::ChannelLog& log, Version version) {
  for (const wire::VersionEntry& e : log.versions()) {
    if (e.version() == version.value()) return e.decision() == wire::DECISION_ABORT;
  }
  return false;
}

// Whether two delta tables describe the same payloads (then payloads made for one serve the
// other).
bool SameDelta(const std::optional<DeltaInfo>& a, const std::optional<DeltaInfo>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a.has_value()) return true;
  if (a->base_version != b->base_version || a->base_root != b->base_root ||
      a->chunks.size() != b->chunks.size() ||
      a->payload_hash_algorithm != b->payload_hash_algorithm) {
    return false;
  }
  for (size_t i = 0; i < a->chunks.size(); ++i) {
    if (a->chunks[i].encoding != b->chunks[i].encoding ||
        a->chunks[i].payload_size != b->chunks[i].payload_size ||
        a->chunks[i].payload_hash != b->chunks[i].payload_hash) {
      return false;
    }
  }
  return true;
}

constexpr size_t kMaxWriterIdBytes = 128;

Status CheckWriterId(std::string_view id, std::string_view where) {
  if (id.empty() || id.size() > kMaxWriterIdBytes) {
    return InvalidArgument(std::string(where) + ": a writer id has 1 to " +
                           std::to_string(kMaxWriterIdBytes) + " bytes");
  }
  for (char c : id) {
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e) {
      return InvalidArgument(std::string(where) + ": writer id " + EscapeControlBytes(id) +
                             " has a character that is not printable ASCII");
    }
  }
  return Status::Ok();
}

// The writer id kept in the store: the same store is the same writer across restarts. Made on
// first use; the store is locked, so no other process races on it.
Result<std::string> StoreWriterId(const fs::path& store) {
  const fs::path path = store / ".writer-id";
  std::error_code ec;
  if (fs::exists(path, ec)) {
    WC_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    WC_RETURN_IF_ERROR(CheckWriterId(text, path.string()));
    return text;
  }
  std::random_device rd;
  uint8_t bytes[8];
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rd());
  const std::string id = "w-" + ToHex(bytes);
  WC_RETURN_IF_ERROR(WriteFileAtomic(path, id + "\n"));
  return id;
}

// Small text files that travel beside the weights on purpose (config.json, tokenizer files,
// chat templates): named at INFO. Anything else that is not safetensors (an optimizer state, a
// pickled .bin or .pt checkpoint) is probably not meant for every agent: a WARN.
bool MetadataLike(std::string_view name) {
  for (std::string_view suffix :
       {".json", ".txt", ".md", ".model", ".tiktoken", ".jinja", ".yaml", ".yml", ".py"}) {
    if (name.ends_with(suffix)) return true;
  }
  return false;
}

std::string ListFiles(const std::vector<std::pair<std::string, uint64_t>>& files) {
  std::string names;
  for (size_t i = 0; i < files.size() && i < 8; ++i) {
    names += (i == 0 ? "" : ", ") + files[i].first + " (" + FormatBytes(files[i].second) + ")";
  }
  if (files.size() > 8) names += ", and " + std::to_string(files.size() - 8) + " more";
  return names;
}

}  // namespace

void Publisher::WarnOtherFiles(const fs::path& dir,
                               const std::vector<std::pair<std::string, uint64_t>>& files) {
  std::vector<std::pair<std::string, uint64_t>> metadata;
  std::vector<std::pair<std::string, uint64_t>> other;
  uint64_t other_bytes = 0;
  for (const auto& file : files) {
    if (MetadataLike(file.first)) {
      metadata.push_back(file);
    } else {
      other.push_back(file);
      other_bytes += file.second;
    }
  }
  if (!metadata.empty()) {
    options_.log.Info("publishing files that are not safetensors as opaque bytes",
                      {{"dir", dir.string()}, {"files", ListFiles(metadata)}});
  }
  if (!other.empty()) {
    options_.log.Warn(
        "files that are not safetensors are published as opaque bytes (no tensors, and every "
        "agent receives them); move them out of the checkpoint directory if the fleet does not "
        "need them",
        {{"dir", dir.string()},
         {"files", ListFiles(other)},
         {"count", static_cast<uint64_t>(other.size())},
         {"bytes", other_bytes}});
  }
}

Result<SeedUntil> ParseSeedUntil(std::string_view text) {
  if (text == "replicated") return SeedUntil::kReplicated;
  if (text == "complete") return SeedUntil::kComplete;
  if (text == "never") return SeedUntil::kNever;
  return InvalidArgument("--until must be replicated, complete or never, not '" +
                         std::string(text) + "'");
}

Publisher::Publisher(PublisherOptions options) : options_(std::move(options)) {}

Publisher::~Publisher() { Stop(); }

Result<std::unique_ptr<Publisher>> Publisher::Create(PublisherOptions options) {
  WC_RETURN_IF_ERROR(ValidateChannelName(options.channel));
  if (options.secret.empty()) {
    return InvalidArgument("no cluster secret (--secret-file or $WEIGHTCAST_SECRET)");
  }
  if (options.coordinator.empty()) return InvalidArgument("no coordinator address");
  if (options.store.empty()) return InvalidArgument("no store directory");
  if (options.world == 0 || options.world > kMaxWorld || options.rank >= options.world) {
    return InvalidArgument("rank " + std::to_string(options.rank) + " of world " +
                           std::to_string(options.world) +
                           ": need 0 <= rank < world <= " + std::to_string(kMaxWorld));
  }
  if (options.world > 1 && options.writer_id.empty()) {
    return InvalidArgument("a sharded publisher (world " + std::to_string(options.world) +
                           ") needs a writer id (--writer-id, writer_id=) that its " +
                           std::to_string(options.world) +
                           " ranks share: they are one writer, each with its own store");
  }
  std::unique_ptr<Publisher> publisher(new Publisher(std::move(options)));
  Status started = publisher->Start();
  if (!started.ok()) {
    publisher->Stop();
    return started;
  }
  return publisher;
}

Status Publisher::SendWhole(PreparedVersion& prepared) const {
  prepared.manifest.delta.reset();
  prepared.payloads.reset();
  prepared.payload_bytes = 0;
  WC_ASSIGN_OR_RETURN(
      prepared.signed_manifest,
      SignManifest(prepared.manifest, {options_.secret, options_.signing_identity.get()}));
  return Status::Ok();
}

Status Publisher::Start() {
  if (options_.node_id.value() != 0) {
    node_id_ = options_.node_id;
  } else {
    std::random_device rd;
    // Never 0 (which means "unset"); 63 bits keep it printable as a signed number anywhere.
    node_id_ = PeerId(((uint64_t{rd()} << 32 | rd()) >> 1) | 1);
  }
  options_.log = options_.log.With({{"node", node_id_.value()}, {"channel", options_.channel}});
  WC_ASSIGN_OR_RETURN(Store store, Store::Open(options_.store));
  store_.emplace(std::move(store));
  if (options_.writer_id.empty()) {
    WC_ASSIGN_OR_RETURN(writer_id_, StoreWriterId(options_.store));
  } else {
    WC_RETURN_IF_ERROR(CheckWriterId(options_.writer_id, "--writer-id"));
    writer_id_ = options_.writer_id;
  }
  options_.log = options_.log.With({{"writer", writer_id_}});

  net::Options net;
  net.self.cluster_id = options_.cluster;
  net.self.node_id = node_id_;
  net.self.role = net::Role::kPublisher;
  net.secret = options_.secret;
  net.tls = options_.tls;
  net.upload_limit = options_.upload_limit;
  net.log = coord::WithoutConnectFailures(options_.log.AsLineFn(), options_.coordinator);
  net::TransportSelection selection;
  selection.kind = options_.transport;
  WC_ASSIGN_OR_RETURN(transport_, net::CreateTransport(net, selection));

  node::SwarmNodeOptions node;
  node.channel = options_.channel;
  node.node_id = node_id_;
  node.manifest_secret = options_.secret;
  node.trust_anchor = options_.trust_anchor;
  node.source = true;
  node.clock = options_.clock;
  node.log = options_.log.AsLineFn();
  node_ = std::make_unique<node::SwarmNode>(*store_, *transport_, std::move(node));
  WC_RETURN_IF_ERROR(node_->Start(options_.listen));
  options_.log.Info("seeding from", {{"address", node_->address()}});

  coord::ClientSessionOptions session;
  session.coordinator = options_.coordinator;
  // A refusal ends Create (returned to the user) rather than being retried.
  session.retry_refusals = false;
  session.log = {.info = [log = options_.log](const std::string& line) { log.Info(line); },
                 .error = [log = options_.log](const std::string& line) { log.Error(line); }};
  session_ = std::make_unique<coord::ClientSession>(*transport_, std::move(session),
                                                    static_cast<coord::SessionDelegate&>(*this));

  const net::TimePoint deadline = clock().Now() + options_.connect_timeout;
  WC_RETURN_IF_ERROR(ConnectFirst(deadline));
  // The coordinator can go between the connect and the first calls (a leader killed just then,
  // with a standby taking over): Call drops a connection that failed, the next one follows the
  // leader; the same deadline as the connect.
  net::Duration backoff = coord::kReconnectFirst;
  for (;;) {
    Status reconciled = Reconcile();
    if (reconciled.ok()) break;
    if (!Transient(reconciled) || clock().Now() >= deadline) return reconciled;
    options_.log.Warn("the coordinator went away while starting; trying again",
                      {{"error", reconciled.message()}});
    if (!SleepFor(backoff)) return Aborted("stopped");
    backoff = std::min<net::Duration>(2 * backoff, coord::kReconnectMax);
  }
  if (options_.metrics != nullptr) {
    options_.metrics->GaugeFunc("weightcast_publish_version", "Newest version seeded",
                                {{"channel", options_.channel}},
                                [this] { return static_cast<double>(seeding().value()); });
    options_.metrics->CounterFunc(
        "weightcast_publish_sent_bytes_total", "Chunk and payload bytes uploaded to peers",
        {{"channel", options_.channel}}, [this] { return node_->counters().bytes_sent; });
    options_.metrics->GaugeFunc("weightcast_publish_peers", "Connected peers",
                                {{"channel", options_.channel}},
                                [this] { return static_cast<double>(node_->progress().peers); });
  }
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  return Status::Ok();
}

std::string Publisher::address() const { return node_ ? node_->address() : std::string(); }

Status Publisher::ConnectFirst(net::TimePoint deadline) {
  // The coordinator may still be starting (scripts launch everything at once); the session logs
  // the wait.
  for (;;) {
    Result<std::shared_ptr<coord::CoordinatorClient>> connected = Client();
    if (connected.ok()) return Status::Ok();
    const Status& error = connected.status();
    // Connect errors and refusals already name the coordinator (coord::ClientSession).
    if (!Transient(error)) return error;
    if (clock().Now() >= deadline) {
      return Status(error.code(),
                    "gave up on the coordinator at " + options_.coordinator + " after " +
                        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                           options_.connect_timeout)
                                           .count()) +
                        "s: " + error.message())
          .WithReason(error.reason());
    }
    if (!SleepFor(session_->retry_delay())) return Aborted("stopped");
  }
}

wire::Register Publisher::Registration() {
  wire::Register request;
  request.set_peer_address(node_->address());
  request.add_channels(options_.channel);
  request.set_source(true);
  request.set_hostname(coord::LocalHostname());
  request.set_writer_id(writer_id_);
  for (PeerId peer : node_->ListedPeers()) request.add_held_peers(peer.value());
  if (sharded()) {
    request.set_rank(options_.rank);
    request.set_world(options_.world);
  }
  uint64_t held = 0;
  {
    std::lock_guard lock(mu_);
    held = writer_epoch_;
  }
  if (held != 0) {
    // Reconnecting: the lease this process holds, which a take-over since has fenced.
    wire::WriterLease* lease = request.add_leases();
    lease->set_channel(options_.channel);
    lease->set_epoch(held);
  } else {
    request.set_take_over(options_.take_over);
  }
  return request;
}

void Publisher::OnRegistered(const wire::RegisterReply& reply) {
  for (const wire::WriterLease& lease : reply.leases()) {
    if (lease.channel() != options_.channel) continue;
    std::lock_guard lock(mu_);
    if (writer_epoch_ != lease.epoch()) {
      options_.log.Info("holding the channel's writer lease", {{"epoch", lease.epoch()}});
    }
    writer_epoch_ = lease.epoch();
  }
  options_.log.Info("registered with the coordinator", {{"coordinator", options_.coordinator}});
}

Result<std::shared_ptr<coord::CoordinatorClient>> Publisher::Client() {
  if (stopping_) return Aborted("the publisher is stopping");
  return session_->Client();
}

uint64_t Publisher::writer_epoch() const {
  std::lock_guard lock(mu_);
  return writer_epoch_;
}

Status Publisher::lost_lease() const {
  std::lock_guard lock(mu_);
  return lost_lease_;
}

void Publisher::NoteWriterConflict(const Status& status) {
  if (!coord::IsWriterConflict(status)) return;
  {
    std::lock_guard lock(mu_);
    if (!lost_lease_.ok()) return;
    lost_lease_ = status;
    cv_.notify_all();
  }
  options_.log.Error("another writer holds the channel now; this publisher stops publishing",
                     {{"error", status.ToString()}});
}

template <typename T>
Result<T> Publisher::Call(const std::function<Result<T>(coord::CoordinatorClient&)>& fn) {
  Result<std::shared_ptr<coord::CoordinatorClient>> connected = Client();
  if (!connected.ok()) {
    NoteWriterConflict(connected.status());
    return connected.status();
  }
  std::shared_ptr<coord::CoordinatorClient> client = std::move(connected).value();
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    ++calls_in_flight_;
    wake = heartbeat_held_;
  }
  // The held heartbeat has the client's lock: have the coordinator answer it now.
  if (wake) client->Wake().IgnoreError();
  Result<T> result = fn(*client);
  if (!result.ok()) NoteWriterConflict(result.status());
  {
    std::lock_guard lock(mu_);
    --calls_in_flight_;
    cv_.notify_all();
  }
  if (!result.ok() && coord::LostConnection(result.status())) {
    session_->Drop(client, result.status());
  }
  return result;
}

// publisher_parts.cc calls these too.
template Result<wire::PublishReply> Publisher::Call<wire::PublishReply>(
    const std::function<Result<wire::PublishReply>(coord::CoordinatorClient&)>&);
template Result<std::vector<uint8_t>> Publisher::Call<std::vector<uint8_t>>(
    const std::function<Result<std::vector<uint8_t>>(coord::CoordinatorClient&)>&);

Result<wire::ChannelLog> Publisher::LogBeforePublish() {
  Result<wire::ChannelLog> log = ChannelLog();
  // A connection the coordinator closed (a take-over closes the fenced writer's) is dropped by
  // that call; once more on a new one, which also learns whether this writer was fenced.
  if (!log.ok() && Transient(log.status())) log = ChannelLog();
  WC_RETURN_IF_ERROR(lost_lease());
  return log;
}

Result<wire::ChannelLog> Publisher::ChannelLog() {
  WC_ASSIGN_OR_RETURN(wire::FleetStatus status,
                      Call<wire::FleetStatus>([&](coord::CoordinatorClient& c) {
                        return c.GetStatus(options_.channel);
                      }));
  for (const wire::ChannelLog& log : status.channels()) {
    if (log.channel() == options_.channel) return log;
  }
  wire::ChannelLog empty;
  empty.set_channel(options_.channel);
  return empty;
}

PrepareOptions Publisher::BaseOptions() const {
  PrepareOptions o;
  o.channel = options_.channel;
  o.secret = options_.secret;
  o.signing_identity = options_.signing_identity;
  o.build = options_.build;
  o.codec = options_.codec;
  o.import = options_.import;
  o.allow_no_tensors = options_.allow_no_tensors;
  return o;
}

Status Publisher::Reconcile() {
  Result<Version> current = store_->Current(options_.channel);
  if (!current.ok()) {
    return current.status().code() == Code::kNotFound ? Status::Ok() : current.status();
  }
  WC_ASSIGN_OR_RETURN(wire::ChannelLog log, ChannelLog());
  if (sharded()) return ReconcilePart(*current, log);
  // A version the coordinator has not logged is about to be published: it needs its payloads.
  const bool unlogged = current->value() > NewestLogged(log);
  WC_ASSIGN_OR_RETURN(
      PreparedVersion prepared,
      ReloadVersion(*store_, *current, BaseOptions(), unlogged || options_.reseed_payloads));
  if (unlogged) {
    // Imported but never logged: the previous run died between the two. Publish it now, as a
    // full version unless its base is logged.
    const auto& delta = prepared.manifest.delta;
    if (delta.has_value() && !Logged(log, delta->base_version, delta->base_root)) {
      WC_RETURN_IF_ERROR(SendWhole(prepared));
    }
    options_.log.Info("publishing a version the coordinator has not logged",
                      {{"version", current->value()}});
    WC_RETURN_IF_ERROR(PublishSigned(prepared));
    return StartSeeding(prepared);
  }
  if (!Logged(log, *current, prepared.manifest.root)) {
    // The coordinator logged something else under this number: our next version goes full.
    return Status::Ok();
  }
  // Seed what the agents verify: the coordinator's signed manifest of the version.
  WC_ASSIGN_OR_RETURN(std::vector<uint8_t> signed_manifest,
                      Call<std::vector<uint8_t>>([&](coord::CoordinatorClient& c) {
                        return c.GetManifest(options_.channel, *current);
                      }));
  WC_ASSIGN_OR_RETURN(
      Manifest logged,
      VerifySignedManifest(signed_manifest, {options_.secret, options_.trust_anchor.get()}));
  if (!SameDelta(logged.delta, prepared.manifest.delta)) prepared.payloads.reset();
  prepared.manifest = std::move(logged);
  prepared.signed_manifest = std::move(signed_manifest);
  options_.log.Info("seeding the version logged before the restart",
                    {{"version", current->value()}});
  return StartSeeding(prepared);
}

Status Publisher::PublishSigned(const PreparedVersion& prepared) {
  const Version version = prepared.manifest.version;
  const uint64_t epoch = writer_epoch();
  bool retried = false;
  const net::TimePoint start = clock().Now();
  const Stopwatch waited;
  net::TimePoint error_logged{};
  while (!Stopping()) {
    Result<Version> logged = Call<Version>(
        [&](coord::CoordinatorClient& c) { return c.Publish(prepared.signed_manifest, epoch); });
    if (logged.ok()) {
      if (*logged != version) {
        return Internal("the coordinator logged version " + std::to_string(version.value()) +
                        " as " + std::to_string(logged->value()));
      }
      return Status::Ok();
    }
    if (Transient(logged.status()) || logged.status().code() == Code::kAborted) {
      const net::TimePoint now = clock().Now();
      if (options_.unreachable_timeout != net::kForever &&
          now - start >= options_.unreachable_timeout) {
        return Unavailable("the coordinator at " + options_.coordinator + " did not take version " +
                           std::to_string(version.value()) + " within " +
                           std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                              options_.unreachable_timeout)
                                              .count()) +
                           "s: " + logged.status().ToString());
      }
      if (!retried) {
        options_.log.Warn("coordinator unreachable; retrying the publish",
                          {{"version", version.value()}, {"error", logged.status().ToString()}});
      } else if (now - start >= coord::kUnreachableErrorAfter &&
                 now - error_logged >= coord::kErrorReminder) {
        // A long outage needs a person; said again every minute, not on every retry.
        options_.log.Error(
            "the coordinator is still unreachable; the version waits to be published",
            {{"version", version.value()},
             {"coordinator", options_.coordinator},
             {"waited_s", waited.Seconds()},
             {"error", logged.status().ToString()}});
        error_logged = now;
      }
      retried = true;
      SleepFor(std::chrono::seconds(1));
      continue;
    }
    // A publish whose reply was lost and that we sent again is refused as stale; the log says
    // whether the first one went through.
    if (retried) {
      Result<wire::ChannelLog> log = ChannelLog();
      if (log.ok() && Logged(*log, version, prepared.manifest.root)) return Status::Ok();
    }
    return logged.status().WithContext("publishing version " + std::to_string(version.value()));
  }
  return Aborted("stopped before the coordinator logged version " +
                 std::to_string(version.value()));
}

Status Publisher::StartSeeding(const PreparedVersion& prepared, node::ChunkReader reader) {
  WC_RETURN_IF_ERROR(node_->Seed(prepared.manifest, prepared.signed_manifest, prepared.payloads,
                                 std::move(reader)));
  NoteSeeding(prepared);
  return Status::Ok();
}

Status Publisher::FinishCommitBehind() {
  if (commit_behind_ == nullptr) return Status::Ok();
  Status committed = commit_behind_->Finish();
  const Version version = commit_behind_->version();
  // The node may go on seeding the version: its reader serves from the store, or (the commit
  // failed) answers kUnavailable, and never touches the image again.
  commit_behind_.reset();
  if (committed.ok()) return Status::Ok();
  options_.log.Error("store commit failed",
                     {{"version", version.value()}, {"error", committed.message()}});
  return committed.WithContext("v" + std::to_string(version.value()) +
                               " was announced, but this publisher's store could not keep it");
}

void Publisher::NoteSeeding(const PreparedVersion& prepared) {
  bool held = false;
  {
    std::lock_guard lock(mu_);
    seeding_ = prepared.manifest.version;
    seeding_chunks_ = prepared.manifest.chunk_count();
    seeding_bytes_ = prepared.manifest.total_size();
    held = heartbeat_held_;
    cv_.notify_all();
  }
  // Report SEEDING of the new version now rather than at the end of the held heartbeat.
  if (held) WakeHeartbeat();
}

void Publisher::WakeHeartbeat() {
  if (session_ != nullptr) session_->Wake();
}

Result<PublishedVersion> Publisher::PublishDirectory(
    const fs::path& dir, const std::map<std::string, std::string>& metadata) {
  std::lock_guard publishing(publish_mu_);
  if (stopping_) return Aborted("the publisher is stopping");
  WC_RETURN_IF_ERROR(FinishCommitBehind());
  WC_RETURN_IF_ERROR(lost_lease());
  const Stopwatch prepare;
  WC_ASSIGN_OR_RETURN(wire::ChannelLog log, LogBeforePublish());
  if (sharded()) return PublishPartDirectory(dir, metadata, log);
  WC_ASSIGN_OR_RETURN(PreparedVersion prepared,
                      PrepareVersion(*store_, dir, NextVersionOptions(log, metadata)));
  if (!prepared.other_files.empty() && prepared.other_files != warned_other_files_) {
    WarnOtherFiles(dir, prepared.other_files);
  }
  warned_other_files_ = prepared.other_files;
  return Announce(prepared, prepare, dir.string());
}

Result<PublishedVersion> Publisher::PublishImage(
    const VersionImage& image, const HeldBase* held,
    const std::map<std::string, std::string>& metadata) {
  std::lock_guard publishing(publish_mu_);
  if (stopping_) return Aborted("the publisher is stopping");
  if (sharded()) return FailedPrecondition("a sharded publisher publishes directories");
  WC_RETURN_IF_ERROR(FinishCommitBehind());
  WC_RETURN_IF_ERROR(lost_lease());
  const Stopwatch prepare;
  WC_ASSIGN_OR_RETURN(wire::ChannelLog log, LogBeforePublish());
  PrepareOptions options = NextVersionOptions(log, metadata);
  options.commit_behind = true;
  WC_ASSIGN_OR_RETURN(PreparedVersion prepared,
                      PrepareVersionFromMemory(*store_, image, held, options));
  // The fleet fetches while the image is written into the store (docs/rl_step.md).
  auto behind = std::make_unique<CommitBehind>(*store_, options_.channel, prepared.manifest.version,
                                               image.bytes, std::move(prepared.commit),
                                               std::move(prepared.hurry_commit));
  Result<PublishedVersion> out = Announce(prepared, prepare, "memory", behind->Reader());
  if (!out.ok()) {
    // Not announced: the caller has its image back once the commit is done. A version the
    // coordinator did not log is published when the publisher starts again, as after a crash.
    behind->Finish().IgnoreError();
    return out;
  }
  commit_behind_ = std::move(behind);
  return out;
}

PrepareOptions Publisher::NextVersionOptions(const wire::ChannelLog& log,
                                             const std::map<std::string, std::string>& metadata) {
  PrepareOptions o = BaseOptions();
  o.metadata = metadata;
  o.min_version = Version(NewestLogged(log) + 1);
  // A delta only against a base the fleet can hold: the coordinator's log must have it.
  Result<Version> current = store_->Current(options_.channel);
  o.delta = false;
  if (current.ok()) {
    Result<Manifest> base = store_->GetManifest(options_.channel, *current);
    o.delta = base.ok() && Logged(log, *current, base->root) && !AbortedInLog(log, *current);
  }
  return o;
}

Result<PublishedVersion> Publisher::Announce(const PreparedVersion& prepared,
                                             const Stopwatch& prepare, const std::string& source,
                                             node::ChunkReader reader) {
  PublishedVersion out;
  out.version = prepared.manifest.version;
  out.delta = prepared.manifest.delta.has_value();
  out.model_bytes = prepared.manifest.total_size();
  out.payload_bytes = prepared.payload_bytes;
  out.chunks = prepared.manifest.chunk_count();
  out.root = prepared.manifest.root;
  out.prepare_seconds = prepare.Seconds();
  WC_RETURN_IF_ERROR(PublishSigned(prepared));
  WC_RETURN_IF_ERROR(StartSeeding(prepared, std::move(reader)));
  options_.log.Info("published", {{"version", out.version.value()},
                                  {"dir", source},
                                  {"delta", out.delta},
                                  {"bytes", out.model_bytes},
                                  {"payload_bytes", out.payload_bytes},
                                  {"chunks", static_cast<uint64_t>(out.chunks)},
                                  {"prepare_s", out.prepare_seconds},
                                  {"import_s", prepared.import_seconds},
                                  {"build_s", prepared.build_seconds},
                                  {"encode_s", prepared.encode_seconds}});
  return out;
}

Version Publisher::seeding() const {
  std::lock_guard lock(mu_);
  return seeding_;
}

node::SwarmProgress Publisher::progress() const {
  return node_ ? node_->progress() : node::SwarmProgress{};
}

bool Publisher::Holds(SeedUntil until, Version version, const wire::FleetStatus& status) {
  switch (until) {
    case SeedUntil::kNever:
      return false;
    case SeedUntil::kReplicated:
      return node_->EveryChunkReplicated();
    case SeedUntil::kComplete:
      break;
  }
  uint32_t agents = 0;
  for (const wire::NodeStatus& node : status.nodes()) {
    if (node.source() || !node.alive()) continue;
    for (const wire::ChannelProgress& ch : node.channels()) {
      if (ch.channel() != options_.channel) continue;
      ++agents;
      // The rule `weightcast status --until-complete` applies: current, or COMMITTED on this
      // version; a tensor-subset agent never switches `current` (the store commits whole
      // versions), so for it PREPARED on this version is as done as it gets.
      const bool on_version = ch.version() == version.value();
      const bool done =
          ch.current_version() >= version.value() ||
          (on_version && ch.phase() == wire::PHASE_COMMITTED) ||
          (on_version && ch.phase() == wire::PHASE_PREPARED && node.tensor_patterns_size() > 0);
      if (!done) return false;
    }
  }
  return agents > 0;
}

void Publisher::ReportFollowers(Version version, const wire::FleetStatus& status) {
  uint32_t agents = 0;
  for (const wire::NodeStatus& node : status.nodes()) {
    if (node.source() || !node.alive()) continue;
    for (const wire::ChannelProgress& ch : node.channels())
      agents += ch.channel() == options_.channel;
  }
  // Said once when it becomes true, not every poll: a publish nobody fetches is otherwise silent.
  if (agents == 0 && !no_followers_reported_) {
    options_.log.Warn("0 agents follow channel " + options_.channel + ": nothing fetches v" +
                          std::to_string(version.value()) + " until an agent joins",
                      {{"version", version.value()}});
  } else if (agents > 0 && no_followers_reported_) {
    options_.log.Info(std::to_string(agents) + " agents follow channel " + options_.channel,
                      {{"version", version.value()}});
  }
  no_followers_reported_ = agents == 0;
}

Status Publisher::WaitUntil(SeedUntil until, net::Duration timeout) {
  if (seeding().value() == 0) return FailedPrecondition("nothing is being seeded");
  const net::TimePoint start = clock().Now();
  // A plain pair rather than std::optional: GCC 12 warns (maybe-uninitialized) on the latter.
  bool unreachable = false;
  net::TimePoint unreachable_since{};
  for (;;) {
    if (stopping_) return Aborted("stopped");
    WC_RETURN_IF_ERROR(lost_lease());
    const Version version = seeding();
    const std::string v = "v" + std::to_string(version.value());
    // kNever seeds until Stop whatever the coordinator says; the others ask it every poll, both
    // for kComplete and to notice a version that can no longer get there.
    if (until != SeedUntil::kNever) {
      Result<wire::FleetStatus> status = Call<wire::FleetStatus>(
          [&](coord::CoordinatorClient& c) { return c.GetStatus(options_.channel); });
      const net::TimePoint now = clock().Now();
      if (status.ok()) {
        if (unreachable) options_.log.Info("the coordinator answers again");
        unreachable = false;
        if (Holds(until, version, *status)) return Status::Ok();
        ReportFollowers(version, *status);
        for (const wire::ChannelLog& log : status->channels()) {
          if (log.channel() != options_.channel) continue;
          for (const wire::VersionEntry& e : log.versions()) {
            if (e.version() == version.value() && e.decision() == wire::DECISION_ABORT) {
              return Aborted(v + " was aborted: " +
                             (e.abort_reason().empty() ? "no reason given" : e.abort_reason()));
            }
          }
        }
      } else if (!Transient(status.status())) {
        return status.status().WithContext("waiting for " + v);
      } else if (until == SeedUntil::kReplicated && node_->EveryChunkReplicated()) {
        return Status::Ok();  // the peers, not the coordinator, say so
      } else if (!unreachable) {
        unreachable = true;
        unreachable_since = now;
        options_.log.Warn("coordinator unreachable while waiting; retrying",
                          {{"version", version.value()}, {"error", status.status().ToString()}});
      } else if (options_.unreachable_timeout != net::kForever &&
                 now - unreachable_since >= options_.unreachable_timeout) {
        return Unavailable("the coordinator at " + options_.coordinator + " was unreachable for " +
                           std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                              options_.unreachable_timeout)
                                              .count()) +
                           "s while waiting for " + v + ": " + status.status().ToString());
      }
    }
    if (timeout != net::kForever && clock().Now() - start >= timeout) {
      return DeadlineExceeded("seeding version " + std::to_string(seeding().value()) +
                              ": the condition did not hold in time");
    }
    if (!SleepFor(options_.poll_interval)) return Aborted("stopped");
  }
}

Status Publisher::Watch(const fs::path& dir, net::Duration settle) {
  WC_ASSIGN_OR_RETURN(Watcher watcher,
                      Watcher::Open({.dir = dir,
                                     .state_file = WatchStatePath(options_.store, options_.channel),
                                     .settle = settle}));
  std::error_code ec;
  const fs::path watched = fs::weakly_canonical(dir, ec);
  // A directory imported by a run that died before it could write the state file: the version's
  // metadata names it, so it is not published a second time.
  if (Result<std::vector<VersionInfo>> versions = store_->List(options_.channel); versions.ok()) {
    for (const VersionInfo& info : *versions) {
      Result<Manifest> m = store_->GetManifest(options_.channel, info.version);
      if (!m.ok()) continue;
      auto it = m->metadata.find(std::string(kSourceMetadataKey));
      if (it == m->metadata.end()) continue;
      const fs::path source(it->second);
      if (source.parent_path() == watched && !watcher.IsPublished(source.filename().string())) {
        WC_RETURN_IF_ERROR(watcher.MarkPublished(source.filename().string()));
      }
    }
  }
  options_.log.Info("watching for checkpoints", {{"dir", watched.string()}});
  // Publishes that failed for a reason other than the coordinator being away (which
  // PublishDirectory waits out) are retried with backoff, not on every poll.
  std::map<std::string, std::pair<net::TimePoint, net::Duration>> backoff;
  while (!stopping_) {
    // Taken over by another writer: publishing on would be refused every time.
    WC_RETURN_IF_ERROR(lost_lease());
    Result<std::vector<WatchEvent>> events = watcher.Poll();
    if (!events.ok()) {
      options_.log.Warn("cannot scan the watched directory",
                        {{"dir", watched.string()}, {"error", events.status().ToString()}});
    } else {
      for (const WatchEvent& event : *events) {
        if (event.kind == WatchEventKind::kBroken) {
          options_.log.Warn("not a complete checkpoint; waiting for it to change",
                            {{"dir", event.path.string()}, {"error", event.problem.ToString()}});
          continue;
        }
        if (event.kind == WatchEventKind::kSkippedOlder) {
          options_.log.Warn("not publishing an older checkpoint",
                            {{"dir", event.path.string()}, {"reason", event.problem.message()}});
          continue;
        }
        auto b = backoff.find(event.name);
        if (b != backoff.end() && clock().Now() < b->second.first) break;
        if (stopping_) break;
        Result<PublishedVersion> published = PublishDirectory(
            event.path, {{std::string(kSourceMetadataKey), (watched / event.name).string()}});
        if (!published.ok()) {
          if (stopping_) break;
          if (coord::IsWriterConflict(published.status())) return published.status();
          net::Duration wait =
              b == backoff.end()
                  ? std::chrono::seconds(1)
                  : std::min<net::Duration>(2 * b->second.second, std::chrono::minutes(1));
          backoff[event.name] = {clock().Now() + wait, wait};
          {
            std::lock_guard lock(mu_);
            publish_error_ =
                "publishing " + event.path.string() + " failed: " + published.status().ToString();
          }
          options_.log.Error("publishing failed; will retry",
                             {{"dir", event.path.string()},
                              {"error", published.status().ToString()},
                              {"retry_s", std::chrono::duration<double>(wait).count()}});
          break;  // later directories wait: versions keep the trainer's order
        }
        backoff.erase(event.name);
        {
          std::lock_guard lock(mu_);
          publish_error_.clear();
        }
        WC_RETURN_IF_ERROR(watcher.MarkPublished(event.name));
      }
    }
    SleepFor(options_.poll_interval);
  }
  return Status::Ok();
}

void Publisher::HeartbeatLoop() {
  // The first heartbeat goes at once: the peer list is wanted now. Then, with a coordinator that
  // holds heartbeats, the next goes as soon as one is answered; otherwise one per interval.
  for (bool first = true;; first = false) {
    if (!first && !session_->long_poll() && !SleepFor(session_->heartbeat_interval())) return;
    if (!Beat()) return;
  }
}

bool Publisher::Beat() {
  wire::Heartbeat heartbeat;
  bool hold = false;
  {
    std::unique_lock lock(mu_);
    // Another call goes first (it would otherwise wait behind a held heartbeat). The cancel
    // flag notifies nobody: look at it every 100 ms.
    while (session_->long_poll() && calls_in_flight_ != 0 && !Stopping()) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
    }
    if (Stopping()) return false;
    hold = session_->long_poll();
    heartbeat_held_ = hold;
    AddSeedingProgressLocked(heartbeat);
  }
  AddUploadedBytes(heartbeat);
  Result<std::shared_ptr<coord::CoordinatorClient>> client = Client();
  Result<wire::HeartbeatReply> reply =
      client.ok() ? session_->Heartbeat(*client, std::move(heartbeat), hold)
                  : Result<wire::HeartbeatReply>(client.status());
  {
    std::lock_guard lock(mu_);
    heartbeat_held_ = false;
  }
  if (!reply.ok()) {
    NoteWriterConflict(reply.status());
    // The session logged the outage or the refusal. Fenced: heartbeats would be refused from
    // now on.
    return !stopping_ && !coord::IsWriterConflict(reply.status());
  }
  if (reply->keep_peers()) return true;  // a new coordinator that has not drawn the graph yet
  std::vector<node::PeerAddress> peers;
  for (const wire::PeerEntry& e : reply->peers()) {
    if (e.node_id() == node_id_.value()) continue;
    peers.push_back({PeerId(e.node_id()), e.address(), e.source()});
  }
  node_->SetPeers(peers);
  return true;
}

void Publisher::AddSeedingProgressLocked(wire::Heartbeat& heartbeat) const {
  if (seeding_.value() == 0) return;
  wire::ChannelProgress* ch = heartbeat.add_channels();
  ch->set_channel(options_.channel);
  ch->set_version(seeding_.value());
  ch->set_phase(wire::PHASE_SEEDING);
  ch->set_current_version(seeding_.value());
  ch->set_chunks_done(static_cast<uint32_t>(seeding_chunks_));
  ch->set_chunks_total(static_cast<uint32_t>(seeding_chunks_));
  ch->set_bytes_done(seeding_bytes_);
  ch->set_bytes_total(seeding_bytes_);
  ch->set_error(publish_error_);
  // A version seeded from an origin whose content changed cannot be completed: FAILED aborts
  // it (the coordinator's rollout decider), with the reason.
  if (Status failed = node_->source_failure(); !failed.ok()) {
    ch->set_phase(wire::PHASE_FAILED);
    ch->set_error("the origin changed under the version: " + failed.message());
  }
}

void Publisher::AddUploadedBytes(wire::Heartbeat& heartbeat) const {
  if (heartbeat.channels_size() > 0) {
    heartbeat.mutable_channels(0)->set_bytes_sent(node_->progress().bytes_sent);
  }
}

bool Publisher::SleepFor(net::Duration d) {
  const net::TimePoint deadline = clock().Now() + d;
  std::unique_lock lock(mu_);
  while (!Stopping()) {
    if (clock().Now() >= deadline) return true;
    if (options_.cancel == nullptr) {
      clock().WaitUntil(lock, cv_, deadline, [this] { return stopping_.load(); });
    } else {
      // The cancel flag notifies nobody: look at it at least every 100 ms of real time.
      cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stopping_.load(); });
    }
  }
  return false;
}

void Publisher::Stop() {
  std::lock_guard stop(stop_mu_);
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  WakeHeartbeat();  // a held heartbeat returns now, not at the end of its wait
  {
    // A publish from an origin, or seeding one, does not wait out a slow or unreachable origin.
    std::lock_guard lock(mu_);
    if (origin_http_ != nullptr) origin_http_->Cancel();
  }
  if (heartbeat_.joinable()) heartbeat_.join();
  if (options_.metrics != nullptr) {
    const metrics::Labels labels = {{"channel", options_.channel}};
    options_.metrics->Remove("weightcast_publish_version", labels);
    options_.metrics->Remove("weightcast_publish_sent_bytes_total", labels);
    options_.metrics->Remove("weightcast_publish_peers", labels);
  }
  if (session_ != nullptr) {
    // The last heartbeat was built before the last uploads (a held heartbeat carries what was
    // sent when it left): report the final figures, which the coordinator keeps for a node
    // that left, so that the rollout's source upload does not read short. Then leave: a stop
    // on purpose is listed as left, not dead.
    wire::Heartbeat last;
    {
      std::lock_guard lock(mu_);
      AddSeedingProgressLocked(last);
    }
    AddUploadedBytes(last);
    session_->End(/*leave=*/true, &last);
  }
  if (node_ != nullptr) node_->Stop();
  // The last image's store commit: the caller frees the image once Stop returns.
  std::lock_guard publishing(publish_mu_);
  FinishCommitBehind().IgnoreError();  // logged; nobody is left to tell
}

}  // namespace weightcast::publish
