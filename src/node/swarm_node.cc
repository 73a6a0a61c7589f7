// The swarm node's threads and event loop, the protocol's effects carried out, and the public
// calls (swarm_node_impl.h says which file holds what).
#include "node/swarm_node_impl.h"

#include <algorithm>
#include <cstdio>

#include "metrics/registry.h"
#include "trust/signed_manifest.h"

namespace weightcast::node {

Status SwarmNode::Impl::Start(std::string_view listen_address) {
  std::lock_guard lock(mu_);
  if (started_) return FailedPrecondition("swarm node already started");
  WC_ASSIGN_OR_RETURN(listener_, transport_.Listen(listen_address));
  address_ = listener_->address();
  started_ = true;
  size_t workers = options_.workers;
  if (workers == 0) workers = std::clamp<size_t>(std::thread::hardware_concurrency(), 2, 8);
  pool_ = std::make_unique<ThreadPool>(workers);
  upload_pool_ = std::make_unique<ThreadPool>(kUploadWorkers);
  connect_pool_ = std::make_unique<ThreadPool>(kConnectThreads);
  if (options_.origin_http != nullptr) origin_pool_ = std::make_unique<ThreadPool>(kOriginReaders);
  {
    std::lock_guard queue(qmu_);
    loop_running_ = true;
  }
  event_thread_ = std::thread([this] { EventLoop(); });
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

void SwarmNode::Impl::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  {
    std::lock_guard lock(qmu_);
    qstop_ = true;
  }
  qcv_.notify_all();
  done_cv_.notify_all();
  if (listener_) listener_->Close();
  if (accept_thread_.joinable()) accept_thread_.join();
  if (event_thread_.joinable()) event_thread_.join();
  std::deque<Event> left;
  {
    std::lock_guard lock(qmu_);
    left.swap(queue_);
    loop_running_ = false;
  }
  for (Event& e : left) {
    // Accepted and Connected close their connections as they go.
    if (auto* task = std::get_if<Task>(&e)) {
      // Its caller waits for it: run here, the loop being gone.
      std::lock_guard lock(mu_);
      task->run();
    }
  }
  // Blocking connects in progress finish (bounded by their timeout); queued ones do not start.
  // A connect that ends later finds the sink disconnected and closes what it made.
  connect_pool_.reset();
  std::vector<std::shared_ptr<Peer>> peers;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, p] : peers_) peers.push_back(p);
    peers_.clear();
    for (auto& p : dead_) peers.push_back(p);
    dead_.clear();
  }
  for (auto& p : peers) ClosePeer(*p);
  upload_pool_.reset();  // the queued uploads find their peers closed
  origin_pool_.reset();  // reads from the origin end (their results are not handled)
  pool_.reset();         // finishes queued verifications
  {
    // A chunk frame the transport still holds reports nothing from now on.
    std::lock_guard lock(upload_sink_->mu);
    upload_sink_->impl = nullptr;
  }
}

void SwarmNode::Impl::Push(Event event) {
  {
    std::lock_guard lock(qmu_);
    if (!qstop_) {
      // The loop waits only on an empty queue: a push onto a non-empty one needs no wake-up
      // (a delta step pushes thousands of events, and each wake is a futex call).
      const bool was_empty = queue_.empty();
      queue_.push_back(std::move(event));
      if (was_empty) qcv_.notify_one();
      return;
    }
  }
  // Stopping: the event goes, and with it a new connection it holds (closed as it goes).
}

bool SwarmNode::Impl::PushTask(Task task) {
  std::lock_guard lock(qmu_);
  if (!loop_running_ || qstop_) return false;
  const bool was_empty = queue_.empty();
  queue_.push_back(std::move(task));
  if (was_empty) qcv_.notify_one();
  return true;
}

void SwarmNode::Impl::EventLoop() {
  loop_thread_ = std::this_thread::get_id();
  net::TimePoint next_tick = clock_.Now() + kTick;
  while (true) {
    std::deque<Event> batch;
    {
      std::unique_lock lock(qmu_);
      clock_.WaitUntil(lock, qcv_, next_tick, [&] { return qstop_ || !queue_.empty(); });
      if (qstop_) return;
      batch.swap(queue_);
    }
    std::vector<std::shared_ptr<Peer>> reap;
    {
      LoopLock lock(*this);
      for (Event& e : batch) std::visit([&](auto& ev) { Handle(ev); }, e);
      if (clock_.Now() >= next_tick) {
        next_tick = clock_.Now() + kTick;
        Apply(protocol_.OnTick(Now()));
        MaybeFlush();
      }
      MaybeTrace();
      ReadoptIfAsked();
    }
    // Whoever waits for replication (or anything else the batch moved) looks again. No waiter:
    // a broadcast costs a load, not a system call.
    done_cv_.notify_all();
    RunLoopChecks();
    {
      LoopLock lock(*this);
      ReadoptIfAsked();
      reap.swap(dead_);
    }
    // Closed outside the lock: a Close may wait for the transport's own thread (UCX closes on
    // its progress thread), which the protocol's lock is not held across.
    for (auto& p : reap) ClosePeer(*p);
  }
}

// One line per trace interval: what moved since the last line and what the scheduler holds.
// Under mu_.
void SwarmNode::Impl::MaybeTrace() {
  if (options_.trace_interval <= net::Duration::zero() || clock_.Now() < next_trace_) return;
  const net::TimePoint now = clock_.Now();
  const double dt = std::chrono::duration<double>(now - last_trace_).count();
  const uint64_t rx = bytes_received_.load(), tx = bytes_sent_.load();
  if (const swarm::Scheduler* scheduler = protocol_.scheduler(); scheduler != nullptr && dt > 0) {
    const swarm::Scheduler& s = *scheduler;
    const swarm::SchedulerStats& st = s.stats();
    char line[320];
    std::snprintf(line, sizeof(line),
                  "trace %s: rx %.1f Mbit/s tx %.1f Mbit/s missing %u outstanding %zu peers %zu "
                  "uploading %zu queued %zu requests %llu rejected_by_us %llu refused %llu "
                  "endgame %d",
                  V(target_.data->manifest.version).c_str(), double(rx - traced_rx_) * 8e-6 / dt,
                  double(tx - traced_tx_) * 8e-6 / dt, s.missing(), s.outstanding_requests(),
                  s.connected_peers(), s.uploads_active(), s.serve_queue_size(),
                  static_cast<unsigned long long>(st.requests_sent),
                  static_cast<unsigned long long>(st.requests_rejected),
                  static_cast<unsigned long long>(protocol_.refusals_received()),
                  s.in_endgame() ? 1 : 0);
    Log(line);
  }
  traced_rx_ = rx;
  traced_tx_ = tx;
  last_trace_ = now;
  next_trace_ = now + options_.trace_interval;
}

// Persists the staging's chunk record about once a second (on a worker: it fsyncs), so that
// a killed node resumes with what it had verified instead of the last full batch.
void SwarmNode::Impl::MaybeFlush() {
  if (target_.data == nullptr || !target_.data->staged || target_.data->committed.load() ||
      flushing_->load() || clock_.Now() < next_flush_ || chunks_verified_ == flushed_at_) {
    return;
  }
  next_flush_ = clock_.Now() + kFlushEvery;
  flushed_at_ = chunks_verified_.load();
  flushing_->store(true);
  auto data = target_.data;
  auto flag = flushing_;
  pool_->Submit([data, flag] {
    data->staged->Flush().IgnoreError();  // a failing disk shows at the next write or commit
    flag->store(false);
  });
}

// Carries out what the protocol decided. Under mu_. Nothing here calls the protocol again, so
// the span stays valid throughout.
void SwarmNode::Impl::Apply(std::span<const Effect> effects) {
  for (const Effect& e : effects) ApplyOne(e);
}

void SwarmNode::Impl::ApplyOne(const Effect& e) {
  if (e.peer == kOriginPeer && OriginEffect(e)) return;
  auto peer = [&]() -> std::shared_ptr<Peer> {
    auto it = peers_.find(e.peer.value());
    return it == peers_.end() ? nullptr : it->second;
  };
  switch (e.kind) {
    case EffectKind::kSend:
      if (auto p = peer()) SendTo(*p, e.message);
      return;
    case EffectKind::kAnnounce: {
      const Message have{.type = MessageType::kHave,
                         .version = protocol_.target_version().value(),
                         .chunk = e.chunk.value(),
                         .code = e.flags};
      protocol_.ForEachHaveRecipient(e.chunk, e.flags, [&](PeerId id) {
        if (auto it = peers_.find(id.value()); it != peers_.end()) SendTo(*it->second, have);
      });
      return;
    }
    case EffectKind::kUpload: {
      auto p = peer();
      if (p == nullptr) {
        // Not connected here any more: the slot frees as if the upload had ended.
        Push(UploadDone{e.epoch, e.peer, e.chunk, false, 0});
        return;
      }
      {
        std::lock_guard lock(p->wmu);
        p->stopped.erase({e.epoch, e.chunk.value()});
        p->uploads.push_back(UploadItem{target_.data, e.chunk, e.item});
      }
      KickUploads(p);
      return;
    }
    case EffectKind::kStopUpload:
      if (auto p = peer()) {
        std::lock_guard lock(p->wmu);
        p->stopped.insert({e.epoch, e.chunk.value()});
      }
      return;
    case EffectKind::kClose:
      if (auto p = peer()) {
        Log("dropping peer " + std::to_string(e.peer.value()) + ": " + e.why);
        ++peers_dropped_;
        peers_.erase(e.peer.value());
        dead_.push_back(p);
      }
      return;
    case EffectKind::kNewEpoch: {
      // Waits out a block being written: from now on no worker of an older epoch writes.
      std::unique_lock no_writer(target_.data->write_mu);
      target_.data->epoch = e.epoch;
      return;
    }
    case EffectKind::kFetchWhole:
      if (target_.data->payloads_only) {
        // Its headers did not decode: the version is adopted again, staged whole, and the live
        // base is forgotten (the sampler copies what differs from the files then).
        Log(e.why + "; fetching " + V(target_.data->manifest.version) + " whole");
        live_base_ = Version();
        readopt_ = target_.data->manifest;
        return;
      }
      Log(e.why + "; fetching whole chunks from now on");
      return;
    case EffectKind::kComplete:
      if (target_.data->staged) target_.data->staged->Flush().IgnoreError();
      Log(V(target_.data->manifest.version) + " complete" + CompletionStats());
      done_cv_.notify_all();
      return;
    case EffectKind::kFetchTime:
      if (options_.chunk_fetch_seconds != nullptr) {
        options_.chunk_fetch_seconds->Observe(std::chrono::duration<double>(e.took).count());
      }
      return;
    case EffectKind::kFailed:
      Log("target failed: " + e.why);
      done_cv_.notify_all();
      return;
  }
}

// What the target cost: time since it was adopted, items fetched, control messages sent.
std::string SwarmNode::Impl::CompletionStats() const {
  const auto& n = target_.messages_sent;
  const double s = target_.started.Seconds();
  auto count = [&](MessageType t) { return std::to_string(n[static_cast<size_t>(t)]); };
  char took[32];
  std::snprintf(took, sizeof(took), "%.3f", s);
  return std::string(" in ") + took + " s: received " + std::to_string(target_.bytes_received) +
         " chunk bytes; sent " + count(MessageType::kRequest) + " requests, " +
         count(MessageType::kHave) + " haves, " + count(MessageType::kSwarmHave) + " have-sets, " +
         count(MessageType::kReject) + " rejects, " + count(MessageType::kCancel) + " cancels, " +
         std::to_string(target_.control_bytes_sent) + " control bytes";
}

SwarmProgress SwarmNode::Impl::Progress() const {
  // A query reads under the loop's lock instead of posting (see OnLoop): it is called from
  // /metrics scrapes and heartbeats that hold locks of their own.
  std::lock_guard lock(mu_);
  SwarmProgress p;
  p.peers = static_cast<uint32_t>(peers_.size());
  for (const auto& [id, peer] : peers_) {
    if (peer->conn != nullptr && peer->conn->peer().transport == "ucx") ++p.peers_ucx;
  }
  if (target_.data == nullptr) return p;
  const Manifest& m = target_.data->manifest;
  p.version = m.version;
  p.delta = protocol_.fetching_payloads();
  const std::vector<bool>& want = protocol_.want();
  const std::vector<bool>& whole = protocol_.whole();
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    if (!want[i]) continue;
    const uint64_t size = m.ChunkRange(ChunkIndex(i)).size;
    ++p.chunks_total;
    p.bytes_total += size;
    if (whole[i]) {
      ++p.chunks_done;
      p.bytes_done += size;
    }
  }
  p.bytes_received = target_.bytes_received;
  p.bytes_sent = bytes_sent_.load() - bytes_sent_at_target_;
  p.chunks_failed = target_.chunks_failed;
  p.window = protocol_.window();
  p.complete = protocol_.complete();
  p.committed = target_.data->committed.load();
  p.error = protocol_.error();
  return p;
}

bool SwarmNode::Impl::EveryChunkReplicated() const {
  std::lock_guard lock(mu_);  // a query (Progress says why)
  return target_.data != nullptr && protocol_.EveryChunkReplicated();
}

Status SwarmNode::Impl::WaitComplete(net::Duration timeout) {
  std::unique_lock lock(mu_);
  auto done = [&] {
    return stopping_ ||
           (target_.data != nullptr && (protocol_.complete() || !protocol_.error().empty()));
  };
  if (timeout == net::kForever) {
    done_cv_.wait(lock, done);
  } else if (!done_cv_.wait_for(lock, timeout, done)) {
    return DeadlineExceeded("swarm: target not complete in time");
  }
  if (!protocol_.error().empty()) return Internal(protocol_.error());
  if (stopping_ && !protocol_.complete()) return Aborted("swarm node stopped");
  return Status::Ok();
}

Status SwarmNode::Impl::WaitReplicated(net::Duration timeout) {
  std::unique_lock lock(mu_);
  auto done = [&] {
    return stopping_ || (target_.data != nullptr && protocol_.EveryChunkReplicated());
  };
  if (!done_cv_.wait_for(lock, timeout, done)) {
    return DeadlineExceeded("swarm: the target is not replicated in time");
  }
  if (!(target_.data != nullptr && protocol_.EveryChunkReplicated())) {
    return Aborted("swarm node stopped");
  }
  return Status::Ok();
}

SwarmNode::SwarmNode(Store& store, net::Transport& transport, SwarmNodeOptions options)
    : impl_(std::make_unique<Impl>(store, transport, std::move(options))) {}

SwarmNode::~SwarmNode() { Stop(); }

Status SwarmNode::Start(std::string_view listen_address) { return impl_->Start(listen_address); }

std::string SwarmNode::address() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->address_;
}

PeerId SwarmNode::id() const { return impl_->options_.node_id; }

Result<Manifest> SwarmNode::Impl::VerifyGiven(const Manifest& manifest,
                                              std::span<const uint8_t> signed_manifest) const {
  WC_ASSIGN_OR_RETURN(Manifest verified,
                      VerifySignedManifest(signed_manifest, {options_.manifest_secret,
                                                             options_.trust_anchor.get()}));
  if (verified.root != manifest.root || verified.version != manifest.version) {
    return InvalidArgument("the signed manifest is not the manifest given");
  }
  return verified;
}

void SwarmNode::SetLiveBase(Version version, const Digest& root) {
  impl_->SetLiveBase(version, root);
}

Status SwarmNode::Fetch(const Manifest& manifest, std::vector<uint8_t> signed_manifest) {
  WC_ASSIGN_OR_RETURN(Manifest verified, impl_->VerifyGiven(manifest, signed_manifest));
  return impl_->Fetch(verified);
}

Status SwarmNode::Seed(const Manifest& manifest, std::vector<uint8_t> signed_manifest,
                       std::shared_ptr<const PayloadCache> payloads, ChunkReader reader) {
  WC_ASSIGN_OR_RETURN(Manifest verified, impl_->VerifyGiven(manifest, signed_manifest));
  return impl_->Seed(verified, std::move(payloads), std::move(reader));
}

Status SwarmNode::SeedPart(const Manifest& manifest, std::vector<uint8_t> signed_manifest,
                           const Manifest& part, uint32_t first_chunk,
                           std::shared_ptr<const PayloadCache> payloads) {
  WC_ASSIGN_OR_RETURN(Manifest verified, impl_->VerifyGiven(manifest, signed_manifest));
  return impl_->SeedPart(verified, part, first_chunk, std::move(payloads));
}

Status SwarmNode::SeedFrom(const Manifest& manifest, std::vector<uint8_t> signed_manifest,
                           ChunkReader reader) {
  WC_ASSIGN_OR_RETURN(Manifest verified, impl_->VerifyGiven(manifest, signed_manifest));
  return impl_->SeedFrom(verified, std::move(reader));
}

Status SwarmNode::source_failure() const {
  std::lock_guard lock(impl_->source_mu_);
  return impl_->source_failure_;
}

void SwarmNode::SetOriginShare(uint32_t stripe, uint32_t stripes) {
  impl_->SetOriginShare(stripe, stripes);
}

void SwarmNode::SetPeers(std::span<const PeerAddress> peers) { impl_->SetPeers(peers); }

// Queries read under the loop's lock (Impl::Progress says why).
std::vector<PeerId> SwarmNode::ListedPeers() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->listed_;
}

std::vector<PeerId> SwarmNode::BannedPeers() const {
  std::lock_guard lock(impl_->mu_);
  std::vector<PeerId> banned = impl_->protocol_.Banned(impl_->Now());
  std::erase(banned, Impl::kOriginPeer);  // not a node: nothing for the coordinator
  return banned;
}
SwarmProgress SwarmNode::progress() const { return impl_->Progress(); }

SwarmCounters SwarmNode::counters() const {
  return {impl_->bytes_received_.load(),      impl_->bytes_sent_.load(),
          impl_->chunks_verified_.load(),     impl_->chunks_failed_.load(),
          impl_->peers_dropped_.load(),       impl_->delta_chunks_fast_.load(),
          impl_->delta_chunks_sha256_.load(), impl_->uploads_from_memory_.load(),
          impl_->uploads_from_store_.load(),  impl_->origin_bytes_.load()};
}

Status SwarmNode::WaitComplete(net::Duration timeout) { return impl_->WaitComplete(timeout); }
Status SwarmNode::CommitTarget() { return impl_->CommitTarget(); }
Status SwarmNode::AbortTarget(std::string_view reason) { return impl_->AbortTarget(reason); }
void SwarmNode::PreferChunks(Version version, std::vector<ChunkIndex> order) {
  impl_->PreferChunks(version, std::move(order));
}
bool SwarmNode::EveryChunkReplicated() const { return impl_->EveryChunkReplicated(); }
Status SwarmNode::WaitReplicated(net::Duration timeout) { return impl_->WaitReplicated(timeout); }
void SwarmNode::Stop() { impl_->Stop(); }

}  // namespace weightcast::node
