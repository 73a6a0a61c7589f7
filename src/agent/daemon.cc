#include "agent/daemon.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <set>

#include "agent/rollout_driver.h"
#include "coord/client.h"
#include "coord/client_session.h"
#include "metrics/http_server.h"
#include "metrics/registry.h"
#include "net/transport_select.h"
#include "store/store.h"
#include "trust/signed_manifest.h"

namespace weightcast::agent {

namespace wire = coord::wire;

namespace {

// Peers that get a series of their own in weightcast_agent_verify_failures_total; the ones
// after them share peer="other", so the label stays bounded (about the degree: a peer that sends
// bad data is banned, so only a handful ever do).
constexpr size_t kMaxFailurePeers = 16;
constexpr char kVerifyFailures[] = "weightcast_agent_verify_failures_total";

// Request-to-verified times of chunks: 1 ms to about 16 s.
std::vector<double> ChunkFetchBuckets() { return metrics::ExponentialBuckets(0.001, 4, 8); }

}  // namespace

// The agent's side of its coordinator session (coord/client_session.h): what it registers with,
// and the registration's outcome on /metrics and in Agent::coordinator_error.
struct Agent::Impl : coord::SessionDelegate {
  explicit Impl(AgentOptions o) : options(std::move(o)) {}

  void Log(const std::string& line) { options.log("agent: " + line); }
  // A fetch with no peer connected cannot move: said once (after a grace, as connections come
  // and go), and again when a peer is back, so that a wait is never silent.
  void ReportStarved(const node::SwarmProgress& p) {
    const std::string starved = p.Starved();
    const net::TimePoint now =
        (options.clock != nullptr ? *options.clock : net::Clock::Real()).Now();
    if (starved.empty()) {
      if (starved_reported)
        Log("a peer holding v" + std::to_string(p.version.value()) + " is back");
      starved_since.reset();
      starved_reported = false;
      return;
    }
    if (!starved_since) starved_since = now;
    if (!starved_reported && now - *starved_since >= std::chrono::seconds(3)) {
      LogError(starved + "; waiting for one");
      starved_reported = true;
    }
  }
  std::optional<net::TimePoint> starved_since;
  bool starved_reported = false;
  void LogError(const std::string& line) { options.log_error("agent: " + line); }

  wire::Register Registration() override;
  void OnRegistered(const wire::RegisterReply& reply) override;
  Status OnRegisterRefused(Status refusal) override;
  void OnConnectResult(const Status& status) override;
  // Shows `cause` (empty: none) as weightcast_agent_error{cause} 1 on /metrics.
  void SetErrorCause(std::string_view cause);
  // Counts a chunk from `peer` that failed its hash check (any thread).
  void CountBadChunk(PeerId peer);
  // weightcast_agent_failed: 1 while the participant reports PHASE_FAILED (Run's thread).
  void UpdateFailed(const wire::ChannelProgress& progress) {
    if (failed_gauge != nullptr) {
      failed_gauge->Set(progress.phase() == wire::PHASE_FAILED ? 1.0 : 0.0);
    }
  }

  bool Sleep(net::Duration d) {
    std::unique_lock lock(mu);
    return !cv.wait_for(lock, d, [&] { return stopping; });
  }

  bool Stopping() {
    std::lock_guard lock(mu);
    return stopping;
  }

  Status Run();
  // One heartbeat on `client` and what its reply asks for. coord::LostConnection errors mean:
  // reconnect (the session dropped the client). With a coordinator that holds heartbeats (long
  // poll), this is also where the agent waits.
  Status Beat(const std::shared_ptr<coord::CoordinatorClient>& client);
  // The waker thread: while a heartbeat is held, wakes it (CoordinatorClient::Wake) when the
  // fetch completes or fails, the engine hook finishes, or the agent stops, so that the loop
  // reports at once instead of at the end of the wait.
  void WakerLoop();
  void RequestWake() {
    {
      std::lock_guard lock(mu);
      wake_requested = true;
    }
    cv.notify_all();
  }

  AgentOptions options;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  bool done = false;  // exit_after reached
  // Guarded by mu: the client of the heartbeat in flight (null: none to wake), whether the
  // waker watches the fetch for it, and whether something asked for a wake.
  std::shared_ptr<coord::CoordinatorClient> armed;
  uint64_t arm_count = 0;
  bool watch_fetch = false;
  bool wake_requested = false;
  // Guarded by mu: what this node's sampler last attested (Agent::ReportAttestation), sent with
  // every heartbeat from then on.
  std::optional<wire::Attestation> attestation;
  // Guarded by mu: a streaming reader's chunk order, handed to the node once it runs.
  std::optional<std::pair<Version, std::vector<ChunkIndex>>> preferred;
  bool node_running = false;  // guarded by mu: `node` started and not stopping
  // What SetLiveBase said last (guarded by mu), handed to each node as it starts.
  std::optional<std::pair<Version, Digest>> live_base;

  std::unique_ptr<Store> store;
  std::unique_ptr<net::Transport> transport;
  std::unique_ptr<node::SwarmNode> node;
  // Declared after `node` and `store`: destroyed before them (it holds references).
  std::unique_ptr<RolloutDriver> rollout;
  std::unique_ptr<coord::ClientSession> session;
  metrics::Registry registry;
  std::unique_ptr<metrics::MetricsServer> metrics_server;
  metrics::Gauge* failed_gauge = nullptr;
  std::mutex failures_mu;
  std::set<uint64_t> failure_peers;  // guarded by failures_mu: those with a series of their own

  std::string error_cause;  // the cause shown on /metrics (Run's thread only)

  // What the last connect attempt failed with (OK once connected) and whether one ever
  // succeeded, for Agent::coordinator_error from any thread; guarded by health_mu.
  mutable std::mutex health_mu;
  Status coordinator_error;
  bool registered = false;
};

void Agent::Impl::SetErrorCause(std::string_view cause) {
  if (cause == error_cause) return;
  if (!error_cause.empty()) {
    registry.Remove("weightcast_agent_error",
                    {{"channel", options.channel}, {"cause", error_cause}});
  }
  error_cause = std::string(cause);
  if (!error_cause.empty()) {
    registry
        .Gauge("weightcast_agent_error",
               "1 while the agent cannot work with its coordinator, labelled with why "
               "(wrong_secret, wrong_cluster, unreachable, ...)",
               {{"channel", options.channel}, {"cause", error_cause}})
        .Set(1);
  }
}

void Agent::Impl::CountBadChunk(PeerId peer) {
  std::string label;
  {
    std::lock_guard lock(failures_mu);
    if (failure_peers.contains(peer.value()) || failure_peers.size() < kMaxFailurePeers) {
      failure_peers.insert(peer.value());
      label = std::to_string(peer.value());
    } else {
      label = "other";
    }
  }
  registry
      .Counter(kVerifyFailures, "Chunks received that failed their hash check, by sending peer",
               {{"channel", options.channel}, {"peer", label}})
      .Add();
}

wire::Register Agent::Impl::Registration() {
  wire::Register reg;
  reg.set_peer_address(node->address());
  reg.set_rack(options.rack);
  reg.add_channels(options.channel);
  reg.set_source(false);
  for (const std::string& p : options.tensor_patterns) reg.add_tensor_patterns(p);
  reg.set_hostname(coord::LocalHostname());
  for (PeerId peer : node->ListedPeers()) reg.add_held_peers(peer.value());
  reg.set_origin_fetch(options.origin_http != nullptr);
  return reg;
}

void Agent::Impl::OnRegistered(const wire::RegisterReply&) {
  Log("registered with the coordinator at " + options.coordinator + " as node " +
      std::to_string(node->id().value()) + ", serving peers on " + node->address());
}

Status Agent::Impl::OnRegisterRefused(Status refusal) {
  // The coordinator answered and said no: retrying the same request changes nothing.
  return FailedPrecondition("the coordinator refused to register this agent: " + refusal.ToString())
      .WithReason(refusal.reason());
}

void Agent::Impl::OnConnectResult(const Status& status) {
  SetErrorCause(status.ok() ? std::string_view() : coord::ConnectErrorCause(status));
  std::lock_guard lock(health_mu);
  coordinator_error = status;
  if (status.ok()) registered = true;
}

Status Agent::Impl::Beat(const std::shared_ptr<coord::CoordinatorClient>& client) {
  wire::Heartbeat hb;
  *hb.add_channels() = rollout->Progress();
  for (PeerId peer : node->BannedPeers()) hb.add_banned_peers(peer.value());
  UpdateFailed(hb.channels(0));
  {
    std::lock_guard lock(mu);
    if (attestation.has_value()) *hb.mutable_channels(0)->mutable_attestation() = *attestation;
  }
  rollout->clear_report_now();
  {
    std::lock_guard lock(mu);
    armed = client;
    ++arm_count;
    watch_fetch = rollout->fetching();
  }
  cv.notify_all();
  // Asks to be held until something changes (a coordinator without long polls ignores it).
  Result<wire::HeartbeatReply> answered = session->Heartbeat(client, std::move(hb), /*hold=*/true);
  {
    std::lock_guard lock(mu);
    armed.reset();
  }
  WC_ASSIGN_OR_RETURN(wire::HeartbeatReply reply, std::move(answered));
  if (!reply.keep_peers()) {  // a new coordinator that has not drawn the graph yet: keep ours
    std::vector<node::PeerAddress> peers;
    for (const wire::PeerEntry& e : reply.peers()) {
      peers.push_back({PeerId(e.node_id()), e.address(), e.source()});
    }
    node->SetPeers(peers);
  }
  node->SetOriginShare(reply.origin_stripe(), reply.origin_stripes());
  for (const wire::ChannelTarget& t : reply.channels()) {
    if (t.channel() == options.channel) rollout->OnTarget(t, client.get());
  }
  if (options.exit_after.value() != 0) {
    // The participant's current, not the store's: the store switches on the commit's thread
    // before the participant (and so the COMMITTED phase this last heartbeat reports) hears of it.
    if (rollout->current() >= options.exit_after) {
      // One more heartbeat so the coordinator sees the COMMITTED phase before we leave.
      wire::Heartbeat last;
      *last.add_channels() = rollout->Progress();
      client->Heartbeat(last).status().IgnoreError();
      done = true;
    }
  }
  return Status::Ok();
}

void Agent::Impl::WakerLoop() {
  std::unique_lock lock(mu);
  while (true) {
    cv.wait(lock,
            [&] { return stopping || (armed != nullptr && (wake_requested || watch_fetch)); });
    if (!stopping && !wake_requested) {
      // Watch the fetch in slices, so that a disarm, a hook or a stop is seen within one.
      const uint64_t arm = arm_count;
      lock.unlock();
      const Status waited = node->WaitComplete(std::chrono::milliseconds(100));
      lock.lock();
      if (waited.code() == Code::kDeadlineExceeded || armed == nullptr || arm_count != arm) {
        continue;
      }
    }
    std::shared_ptr<coord::CoordinatorClient> wake = std::move(armed);
    armed.reset();
    wake_requested = false;
    const bool stop = stopping;
    lock.unlock();
    if (wake != nullptr) wake->Wake().IgnoreError();  // a failed connection fails the call too
    if (stop) return;
    lock.lock();
  }
}

Status Agent::Impl::Run() {
  WC_ASSIGN_OR_RETURN(Store opened, Store::Open(options.store_dir));
  store = std::make_unique<Store>(std::move(opened));
  // Versions held as payloads were whole only in the live tensors of the process that kept
  // them; this one starts without (docs/live.md, "Samplers that stage nothing").
  WC_ASSIGN_OR_RETURN(std::vector<Version> forgotten,
                      store->ForgetPayloadVersions(options.channel));
  if (!forgotten.empty()) {
    Log("forgot " + std::to_string(forgotten.size()) +
        " versions held as payloads by an earlier process (newest v" +
        std::to_string(forgotten.back().value()) + ")");
  }
  net::Options net;
  net.self.cluster_id = options.cluster;
  net.self.node_id = options.node_id;
  net.self.role = net::Role::kAgent;
  net.secret = options.secret;
  net.tls = options.tls;
  net.log = coord::WithoutConnectFailures(options.log, options.coordinator);
  if (options.upload_limit != 0) {
    net.upload_limit = std::make_shared<net::TokenBucket>(
        options.upload_limit, std::max<uint64_t>(options.upload_limit / 10, 1 << 20));
  }
  if (options.download_limit != 0) {
    net.download_limit = std::make_shared<net::TokenBucket>(
        options.download_limit, std::max<uint64_t>(options.download_limit / 10, 1 << 20));
  }
  net::TransportSelection selection;
  selection.kind = options.transport;
  WC_ASSIGN_OR_RETURN(transport, net::CreateTransport(net, selection));
  node::SwarmNodeOptions so;
  so.channel = options.channel;
  so.node_id = options.node_id;
  so.manifest_secret = options.secret;
  so.trust_anchor = options.trust_anchor;
  so.tensor_patterns = options.tensor_patterns;
  so.corrupt_uploads_for_testing = options.corrupt_uploads_for_testing;
  so.verify_result = options.verify_result;
  so.log = options.log;
  const metrics::Labels labels = {{"channel", options.channel}};
  so.chunk_fetch_seconds =
      &registry.Histogram("weightcast_agent_chunk_fetch_seconds",
                          "Seconds from a chunk's request to its verification (chunks from peers)",
                          ChunkFetchBuckets(), labels);
  so.on_bad_chunk = [this](PeerId peer) { CountBadChunk(peer); };
  so.origin_http = options.origin_http;
  so.clock = options.clock;
  node = std::make_unique<node::SwarmNode>(*store, *transport, std::move(so));
  WC_RETURN_IF_ERROR(node->Start(options.listen));
  {
    std::lock_guard lock(mu);
    node_running = true;
    if (preferred.has_value()) node->PreferChunks(preferred->first, std::move(preferred->second));
    if (live_base.has_value()) node->SetLiveBase(live_base->first, live_base->second);
    preferred.reset();
  }
  RolloutDriverOptions ro;
  ro.channel = options.channel;
  ro.secret = options.secret;
  ro.trust_anchor = options.trust_anchor;
  ro.hook = options.hook;
  ro.hook_retries = options.hook_retries;
  ro.hook_failure = options.hook_failure;
  ro.log = options.log;
  ro.clock = options.clock;
  ro.on_work_done = [this] { RequestWake(); };
  WC_ASSIGN_OR_RETURN(rollout, RolloutDriver::Create(std::move(ro), *store, *node));
  if (options.corrupt_uploads_for_testing) {
    Log("TESTING ONLY: every chunk this node uploads is corrupted");
  }

  node::SwarmNode* n = node.get();
  registry.CounterFunc("weightcast_agent_bytes_received_total", "Chunk bytes received from peers",
                       labels, [n] { return n->counters().bytes_received; });
  registry.CounterFunc("weightcast_agent_bytes_sent_total", "Chunk bytes uploaded to peers", labels,
                       [n] { return n->counters().bytes_sent; });
  registry.CounterFunc("weightcast_agent_chunks_verified_total",
                       "Chunks received that matched their manifest hash", labels,
                       [n] { return n->counters().chunks_verified; });
  registry.CounterFunc("weightcast_agent_chunks_failed_total",
                       "Chunks received that failed their hash check", labels,
                       [n] { return n->counters().chunks_failed; });
  for (const bool fast : {true, false}) {
    registry.CounterFunc(
        "weightcast_agent_delta_chunks_total",
        "Chunks rebuilt from delta payloads and verified, by what checked the result",
        {{"channel", options.channel}, {"check", fast ? "fast" : "sha256"}}, [n, fast] {
          const node::SwarmCounters c = n->counters();
          return fast ? c.delta_chunks_fast : c.delta_chunks_sha256;
        });
  }
  for (const bool memory : {true, false}) {
    registry.CounterFunc(
        "weightcast_agent_chunk_uploads_total",
        "Whole chunks uploaded to peers, by where the bytes came from: the buffer they were "
        "received in (memory) or a read of the store",
        {{"channel", options.channel}, {"from", memory ? "memory" : "store"}}, [n, memory] {
          const node::SwarmCounters c = n->counters();
          return memory ? c.uploads_from_memory : c.uploads_from_store;
        });
  }
  registry.CounterFunc("weightcast_agent_peers_dropped_total", "Peers dropped (bad data, timeouts)",
                       labels, [n] { return n->counters().peers_dropped; });
  registry.GaugeFunc("weightcast_agent_peers", "Connected peers", labels,
                     [n] { return static_cast<double>(n->progress().peers); });
  registry.GaugeFunc("weightcast_agent_target_version", "Version being fetched or served", labels,
                     [n] { return static_cast<double>(n->progress().version.value()); });
  Store* s = store.get();
  const std::string channel = options.channel;
  registry.GaugeFunc("weightcast_agent_current_version", "Committed current version", labels,
                     [s, channel] {
                       auto c = s->Current(channel);
                       return c.ok() ? static_cast<double>(c->value()) : 0.0;
                     });
  failed_gauge = &registry.Gauge("weightcast_agent_failed",
                                 "1 while the agent reports the FAILED phase for the channel's "
                                 "target version (the coordinator has the error)",
                                 labels);
  UpdateFailed(rollout->Progress());
  net::Transport* t = transport.get();
  // One series per transport this node runs ("tcp", and "ucx" when UCX started).
  for (const auto& [name, unused] : net::StatsByTransport(*t)) {
    auto pick = [t, name = name](bool rx) {
      for (const auto& [n, s] : net::StatsByTransport(*t)) {
        if (n == name) return rx ? s.bytes_received : s.bytes_sent;
      }
      return uint64_t{0};
    };
    registry.CounterFunc("weightcast_agent_transport_bytes_total",
                         "Frame bytes the transport moved (peers and coordinator), by direction",
                         {{"channel", options.channel}, {"transport", name}, {"direction", "rx"}},
                         [pick] { return pick(true); });
    registry.CounterFunc("weightcast_agent_transport_bytes_total",
                         "Frame bytes the transport moved (peers and coordinator), by direction",
                         {{"channel", options.channel}, {"transport", name}, {"direction", "tx"}},
                         [pick] { return pick(false); });
  }
  for (const bool ucx : {true, false}) {
    registry.GaugeFunc("weightcast_agent_peer_connections",
                       "Connected peers by the transport that carries the connection",
                       {{"channel", options.channel}, {"transport", ucx ? "ucx" : "tcp"}},
                       [n, ucx] {
                         const node::SwarmProgress p = n->progress();
                         return static_cast<double>(ucx ? p.peers_ucx : p.peers - p.peers_ucx);
                       });
  }
  if (!options.metrics.empty()) {
    WC_ASSIGN_OR_RETURN(metrics_server, metrics::MetricsServer::Start(registry, options.metrics));
    Log("serving metrics at http://" + metrics_server->address() + "/metrics");
  }

  coord::ClientSessionOptions session_options;
  session_options.coordinator = options.coordinator;
  session_options.connect_timeout = std::chrono::seconds(3);
  session_options.reconnect_max = options.reconnect_max;
  session_options.heartbeat_interval = std::chrono::milliseconds(500);
  session_options.log = {.info = [this](const std::string& line) { Log(line); },
                         .error = [this](const std::string& line) { LogError(line); }};
  session = std::make_unique<coord::ClientSession>(*transport, std::move(session_options), *this);

  std::thread waker([this] { WakerLoop(); });
  Status result = Status::Ok();
  while (!Stopping() && !done) {
    // Connects and registers when the last connection was lost; the session logs the outage.
    Result<std::shared_ptr<coord::CoordinatorClient>> connected = session->Client();
    if (!connected.ok()) {
      if (!Sleep(session->retry_delay())) break;
      continue;
    }
    const std::shared_ptr<coord::CoordinatorClient> client = std::move(connected).value();
    Status beat = Beat(client);
    if (!beat.ok()) {
      if (coord::LostConnection(beat)) continue;  // reconnect at once
      if (beat.code() == Code::kIoError) {
        result = beat;
        break;
      }
      // The coordinator answered and refused: the session logged it; the loop goes on.
    }
    if (done) break;
    {
      std::lock_guard lock(mu);
      wake_requested = false;  // Poll looks at whatever asked for it
    }
    // Fetch results, hook results and retries; then heartbeat at once if the coordinator
    // waits for what changed (PREPARED, COMMITTED, FAILED).
    rollout->Poll(client.get());
    UpdateFailed(rollout->Progress());
    ReportStarved(node->progress());
    if (rollout->report_now()) continue;
    // The coordinator holds the next heartbeat until there is news: that is the wait.
    if (session->long_poll() && beat.ok()) continue;
    // Wake early when the target completes, so a commit decision is asked for at once.
    if (rollout->fetching()) {
      node->WaitComplete(session->heartbeat_interval()).IgnoreError();
      rollout->Poll(client.get());
    } else if (!Sleep(session->heartbeat_interval())) {
      break;
    }
  }
  {
    std::lock_guard lock(mu);
    stopping = true;  // Run may end by exit_after: the waker ends with it
  }
  cv.notify_all();
  waker.join();
  // A normal stop leaves the fleet (coord.proto Leave) so that it is not shown dead; an agent
  // ending on an error stays listed, and is marked dead, for someone to look at.
  session->End(/*leave=*/result.ok());
  if (metrics_server) metrics_server->Stop();
  {
    std::lock_guard lock(mu);
    node_running = false;
  }
  node->Stop();
  return result;
}

Result<std::unique_ptr<Agent>> Agent::Create(AgentOptions options) {
  if (options.coordinator.empty()) return InvalidArgument("agent: a coordinator address is needed");
  if (options.store_dir.empty()) return InvalidArgument("agent: a store directory is needed");
  if (options.channel.empty()) return InvalidArgument("agent: a channel is needed");
  if (options.secret.size() < net::kMinSecretBytes) {
    return InvalidArgument("agent: the cluster secret is too short");
  }
  if (options.node_id.value() == 0) {
    std::random_device rd;
    options.node_id = PeerId((uint64_t{rd()} << 32 | rd()) & 0x7fffffffffffffffULL);
  }
  if (!options.log) options.log = [](std::string_view) {};
  if (!options.log_error) {
    options.log_error = [log = options.log](std::string_view line) {
      log("ERROR " + std::string(line));
    };
  }
  return std::unique_ptr<Agent>(new Agent(std::make_unique<Impl>(std::move(options))));
}

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Agent::~Agent() { Stop(); }

Status Agent::Run() { return impl_->Run(); }

void Agent::Stop() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  // Reads from an origin end now rather than after their retries (a slow or unreachable origin).
  if (impl_->options.origin_http != nullptr) impl_->options.origin_http->Cancel();
  // Wakes a Run waiting for the swarm; the node is stopped by Run itself.
}

void Agent::ReportAttestation(Version version, std::span<const uint8_t> digest) {
  wire::Attestation a;
  a.set_version(version.value());
  a.set_digest(std::string(reinterpret_cast<const char*>(digest.data()), digest.size()));
  {
    std::lock_guard lock(impl_->mu);
    impl_->attestation = std::move(a);
  }
  impl_->RequestWake();
}

void Agent::SetLiveBase(Version version, const Digest& root) {
  std::lock_guard lock(impl_->mu);
  impl_->live_base = {version, root};
  if (impl_->node_running) impl_->node->SetLiveBase(version, root);
}

void Agent::PreferChunks(Version version, std::vector<ChunkIndex> order) {
  std::lock_guard lock(impl_->mu);
  if (impl_->node_running) {
    impl_->node->PreferChunks(version, std::move(order));
  } else {
    impl_->preferred.emplace(version, std::move(order));
  }
}

PeerId Agent::id() const { return impl_->options.node_id; }
std::string Agent::address() const { return impl_->node ? impl_->node->address() : ""; }
node::SwarmProgress Agent::progress() const {
  return impl_->node ? impl_->node->progress() : node::SwarmProgress{};
}
Status Agent::coordinator_error() const {
  std::lock_guard lock(impl_->health_mu);
  return impl_->coordinator_error;
}
bool Agent::registered() const {
  std::lock_guard lock(impl_->health_mu);
  return impl_->registered;
}

}  // namespace weightcast::agent
