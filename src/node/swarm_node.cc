#include "node/swarm_node.h"

#include "live/delta_file.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <thread>
#include <utility>
#include <variant>

#include "codec/chunk_codec.h"
#include "codec/version_codec.h"
#include "hash/digest.h"
#include "manifest/selection.h"
#include "manifest/signed_manifest.h"
#include "metrics/registry.h"
#include "node/recent_chunks.h"
#include "swarm/messages.h"
#include "swarm/peer_protocol.h"
#include "util/thread_pool.h"

namespace weightcast::node {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTick = std::chrono::milliseconds(200);
constexpr auto kFlushEvery = std::chrono::seconds(1);
// Upload workers: they read a chunk (memory or store) and queue it on its connection; the
// sending itself is the transport's. Independent of the number of peers.
constexpr size_t kUploadWorkers = 2;
// The largest chunk whose codec payload the event loop checks itself (Impl::CheckedOnLoop).
constexpr uint64_t kLoopCheckMaxChunkBytes = 1u << 20;
// Codec payloads of one peer's with its transport at once (Impl::KickUploads).
constexpr uint64_t kPayloadBytesInTransport = 256u << 10;

swarm::Time Now() {
  return std::chrono::duration_cast<swarm::Time>(Clock::now().time_since_epoch());
}

std::string V(Version v) { return "v" + std::to_string(v.value()); }

using swarm::Effect;
using swarm::EffectKind;
using swarm::Message;
using swarm::MessageType;
using swarm::PayloadKind;

}  // namespace

// How this node takes part in a target: seeding it, or fetching delta payloads onto its base
// (neither: fetching whole chunks). The protocol keeps it from then on (its TargetSpec).
struct TargetRole {
  bool source = false;
  bool fetch_payloads = false;
};

// What the upload and verification workers need of a target, shared so that a replaced target stays
// alive until they are done with it.
struct TargetData {
  Manifest manifest;
  std::optional<StagedVersion> staged;  // absent for a target committed before it was adopted
  // A tensor-subset node's (options.tensor_patterns): what it wants, committed as a partial
  // version (Store::CommitPartial). Absent: the node wants every chunk.
  std::optional<PartialVersion> subset;
  std::atomic<bool> committed{false};
  std::shared_ptr<const PayloadCache> seed_payloads;  // a source's payloads
  // A rank seeding its part of a sharded version (SeedPart): the chunks [first_chunk,
  // first_chunk + chunk_count) are read from the part committed in the store as `stored`, and
  // seed_payloads are indexed by part chunk.
  struct PartSeed {
    Version stored;
    uint32_t first_chunk = 0;
    uint32_t chunk_count = 0;
  };
  std::optional<PartSeed> part;
  bool InPart(ChunkIndex chunk) const {
    return !part || (chunk.value() >= part->first_chunk &&
                     chunk.value() - part->first_chunk < part->chunk_count);
  }
  // Payloads this node decoded, when it fetches payloads onto `base` (whether it still does, after
  // a fall-back to whole chunks, is the protocol's: PeerProtocol::fetching_payloads).
  std::shared_ptr<PayloadCache> payloads;
  std::optional<Manifest> base_manifest;
  std::optional<codec::SnapshotReader> base_bytes;
  // The scheduler generation. A worker may still be decoding for an old one after a restart;
  // it holds write_mu shared while it checks its epoch and writes a block, and a restart moves
  // the epoch on under write_mu exclusively: from then on no worker of an older epoch writes to
  // the staging (its unverified blocks could otherwise land on a chunk the new epoch verified).
  std::atomic<uint64_t> epoch{0};
  std::shared_mutex write_mu;
  // Whole chunks verified lately, in the frames they came in: forwarded without a store read.
  RecentChunks recent;

  SharedBytes Payload(ChunkIndex chunk) const {
    if (seed_payloads != nullptr && InPart(chunk)) {
      const ChunkIndex own(part ? chunk.value() - part->first_chunk : chunk.value());
      if (SharedBytes p = seed_payloads->Get(own)) return p;
    }
    return payloads != nullptr ? payloads->Get(chunk) : nullptr;
  }
};

struct SwarmNode::Impl {
  struct UploadItem {
    std::shared_ptr<TargetData> target;
    ChunkIndex chunk;
    PayloadKind kind = PayloadKind::kRaw;
  };

  struct Peer {
    PeerId id;
    uint64_t gen = 0;  // distinguishes a reconnected peer's events from the old connection's
    bool outgoing = false;
    std::unique_ptr<net::Connection> conn;
    std::thread reader;  // only for a transport that cannot push frames (DeliverFrames)

    std::mutex wmu;
    std::condition_variable wcv;
    std::deque<UploadItem> uploads;
    std::set<std::pair<uint64_t, uint32_t>> stopped;  // (epoch, chunk) uploads cancelled
    // One chunk at a time is with the transport: the next starts when the last one's bytes were
    // written (UploadDone), so the scheduler's upload slots limit what is really in flight and a
    // chunk never waits behind megabytes queued for the same peer.
    // Codec payloads (a few KiB each, held in memory) are the exception: several go to the
    // transport at once, up to kPayloadBytesInTransport (KickUploads).
    bool upload_active = false;
    uint64_t payload_bytes_in_transport = 0;
    bool closing = false;
    bool announced = false;  // PeerUp was queued: the reader may start
  };

  struct PeerUp {
    std::shared_ptr<Peer> peer;
  };
  struct PeerDown {
    PeerId id;
    uint64_t gen;
    Status why;
  };
  struct Received {
    PeerId id;
    uint64_t gen;
    net::Frame frame;
  };
  struct Verified {
    uint64_t epoch;
    PeerId from;
    ChunkIndex chunk;
    PayloadKind kind;
    Status status;               // kCorrupt: the peer's fault; other errors: ours (disk)
    bool decode_failed = false;  // an authentic payload did not decode onto our base
    bool fast = false;           // a rebuilt chunk checked by its fast hash, not its SHA-256
  };
  struct UploadDone {
    uint64_t epoch;
    PeerId peer;
    ChunkIndex chunk;
    bool sent;     // handed to the transport and since written (or dropped with the connection)
    uint64_t gen;  // the connection it went to: its next upload may start
    // A codec payload KickUploads sent (not the active upload), and its size.
    bool payload = false;
    uint64_t payload_bytes = 0;
  };
  using Event = std::variant<PeerUp, PeerDown, Received, Verified, UploadDone>;
  // A received chunk or payload to check and store (VerifyAndStore).
  struct PendingCheck {
    std::shared_ptr<TargetData> data;
    std::shared_ptr<const net::Frame> frame;
    PeerId from;
    ChunkIndex chunk;
    PayloadKind kind;
    uint64_t epoch;
  };

  // The current target's bytes and counts (guarded by mu_); what it holds, wants and decides
  // is the protocol's.
  struct Target {
    std::shared_ptr<TargetData> data;
    uint64_t bytes_received = 0;
    uint32_t chunks_failed = 0;
    // Control messages sent for this target, by type, and their bytes (the log line at
    // completion shows where a step's chatter goes).
    std::array<uint32_t, swarm::kMaxMessageType + 1> messages_sent{};
    uint64_t control_bytes_sent = 0;
    Clock::time_point started = Clock::now();
  };

  Impl(Store& store, net::Transport& transport, SwarmNodeOptions options)
      : store_(store),
        transport_(transport),
        options_(std::move(options)),
        protocol_(swarm::PeerProtocolOptions{
            .node_id = options_.node_id, .source = options_.source, .tuning = options_.tuning}) {
    if (!options_.log) options_.log = [](std::string_view) {};
    if (options_.trace_interval <= net::Duration::zero()) {
      if (const char* env = std::getenv("WEIGHTCAST_SWARM_TRACE")) {
        options_.trace_interval = std::chrono::milliseconds(std::atol(env));
      }
    }
  }

  void Log(const std::string& line) { options_.log("swarm " + options_.channel + ": " + line); }

  // ---- threads ----

  Status Start(std::string_view listen_address) {
    std::lock_guard lock(mu_);
    if (started_) return FailedPrecondition("swarm node already started");
    WC_ASSIGN_OR_RETURN(listener_, transport_.Listen(listen_address));
    address_ = listener_->address();
    started_ = true;
    size_t workers = options_.workers;
    if (workers == 0) workers = std::clamp<size_t>(std::thread::hardware_concurrency(), 2, 8);
    pool_ = std::make_unique<ThreadPool>(workers);
    upload_pool_ = std::make_unique<ThreadPool>(kUploadWorkers);
    event_thread_ = std::thread([this] { EventLoop(); });
    accept_thread_ = std::thread([this] { AcceptLoop(); });
    return Status::Ok();
  }

  void Stop() {
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
    }
    for (Event& e : left) {
      if (auto* up = std::get_if<PeerUp>(&e)) {
        ClosePeer(*up->peer);
        JoinPeer(*up->peer);
      }
    }
    // Connector threads finish their Connect (bounded by its timeout) and see stopping_.
    std::vector<std::thread> connectors;
    {
      std::lock_guard lock(mu_);
      connectors.swap(connectors_);
    }
    for (std::thread& t : connectors) t.join();
    std::vector<std::shared_ptr<Peer>> peers;
    {
      std::lock_guard lock(mu_);
      for (auto& [id, p] : peers_) peers.push_back(p);
      peers_.clear();
      for (auto& p : dead_) peers.push_back(p);
      dead_.clear();
    }
    for (auto& p : peers) ClosePeer(*p);
    for (auto& p : peers) JoinPeer(*p);
    upload_pool_.reset();  // the queued uploads find their peers closed
    pool_.reset();         // finishes queued verifications
    {
      // A chunk frame the transport still holds reports nothing from now on.
      std::lock_guard lock(upload_sink_->mu);
      upload_sink_->impl = nullptr;
    }
  }

  void Push(Event event) {
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
    // Stopping: a new connection's threads must not outlive the node. Only AddConnection
    // pushes PeerUp, never a peer's own thread, so this does not join itself.
    if (auto* up = std::get_if<PeerUp>(&event)) {
      ClosePeer(*up->peer);
      JoinPeer(*up->peer);
    }
  }

  void AcceptLoop() {
    while (true) {
      auto conn = listener_->Accept();
      if (!conn.ok()) {
        std::lock_guard lock(mu_);
        if (stopping_) return;
        if (conn.status().code() == Code::kUnavailable) return;  // listener closed
        continue;
      }
      AddConnection(std::move(conn).value(), /*outgoing=*/false);
    }
  }

  void AddConnection(std::unique_ptr<net::Connection> conn, bool outgoing) {
    const PeerId id = conn->peer().node_id;
    auto peer = std::make_shared<Peer>();
    peer->id = id;
    peer->outgoing = outgoing;
    peer->conn = std::move(conn);
    {
      std::lock_guard lock(mu_);
      if (stopping_ || !protocol_.Admits(Now(), id)) {  // this node, or banned
        peer->conn->Close();
        return;
      }
      peer->gen = ++next_gen_;
    }
    Peer* raw = peer.get();
    const uint64_t gen = peer->gen;
    // Frames are pushed only after PeerUp: a have-set handled before its peer would be lost.
    // A transport that pushes frames (TCP) needs no reader thread: its handler queues them from
    // the transport's own thread; others get a thread that waits in Receive.
    const bool pushed = peer->conn->CanDeliverFrames();
    if (!pushed) {
      peer->reader = std::thread([this, raw, id, gen] {
        {
          std::unique_lock lock(raw->wmu);
          raw->wcv.wait(lock, [&] { return raw->announced || raw->closing; });
          if (raw->closing) return;
        }
        while (true) {
          auto frame = raw->conn->Receive();
          if (!frame.ok()) {
            Push(PeerDown{id, gen, frame.status()});
            return;
          }
          Push(Received{id, gen, std::move(frame).value()});
        }
      });
    }
    Push(PeerUp{peer});
    {
      std::lock_guard lock(raw->wmu);
      raw->announced = true;
    }
    raw->wcv.notify_all();
    if (pushed) {
      // `peer` keeps the connection alive here even if the node closed it meanwhile (Deliver then
      // hands over the end at once). The handler holds no Peer: Stop closes every connection,
      // after which no call starts, before this node goes away.
      raw->conn->DeliverFrames([this, id, gen](Result<net::Frame> frame) {
        if (frame.ok()) {
          Push(Received{id, gen, std::move(frame).value()});
        } else {
          Push(PeerDown{id, gen, frame.status()});
        }
      });
    }
  }

  // Where a written chunk frame reports (UploadDone): the token in the frame may outlive this
  // node inside the transport, so it reaches the node through this, which Stop disconnects.
  struct UploadSink {
    std::mutex mu;
    Impl* impl = nullptr;
  };
  // Lives in a chunk frame (OutFrame::on_written): the transport drops it once the frame's bytes
  // were written, or with the connection.
  struct UploadToken {
    std::shared_ptr<UploadSink> sink;
    UploadDone done;
    UploadToken(std::shared_ptr<UploadSink> to, UploadDone what)
        : sink(std::move(to)), done(what) {}
    UploadToken(const UploadToken&) = delete;
    UploadToken& operator=(const UploadToken&) = delete;
    ~UploadToken() {
      std::lock_guard lock(sink->mu);
      if (sink->impl != nullptr) sink->impl->Push(done);
    }
  };

  std::shared_ptr<UploadSink> MakeUploadSink() {
    auto sink = std::make_shared<UploadSink>();
    sink->impl = this;
    return sink;
  }

  // Starts the peer's next uploads. Any thread. A whole chunk is read through the store's views
  // (opening one, faulting its pages in) on an upload worker, one at a time. Codec payloads are
  // held in memory and a few KiB each: they go to the transport from this thread, several at a
  // time (up to kPayloadBytesInTransport). One at a time, each would wait for the write of the
  // one before to be reported back, two thread switches per payload of a delta step.
  void KickUploads(const std::shared_ptr<Peer>& p) {
    while (true) {
      std::optional<UploadItem> item;
      SharedBytes payload;
      {
        std::lock_guard lock(p->wmu);
        while (!p->closing && !p->upload_active && !p->uploads.empty() && !item) {
          UploadItem& front = p->uploads.front();
          if (p->stopped.erase({front.target->epoch, front.chunk.value()}) != 0) {
            p->uploads.pop_front();
            continue;
          }
          if (front.kind != PayloadKind::kCodec) {
            p->upload_active = true;
            upload_pool_->Submit([this, p] { UploadNext(*p); });
            return;
          }
          payload = front.target->Payload(front.chunk);
          if (payload != nullptr && p->payload_bytes_in_transport != 0 &&
              p->payload_bytes_in_transport + payload->size() > kPayloadBytesInTransport) {
            return;  // the next UploadDone of a payload starts it
          }
          item = std::move(front);
          p->uploads.pop_front();
          if (payload != nullptr) p->payload_bytes_in_transport += payload->size();
        }
      }
      if (!item) return;
      if (payload == nullptr) {
        Log("cannot send the payload of chunk " + std::to_string(item->chunk.value()) + " of " +
            V(item->target->manifest.version) + " to peer " + std::to_string(p->id.value()) +
            ": no payload held");
        Push(UploadDone{item->target->epoch, p->id, item->chunk, false, p->gen});
        continue;
      }
      HeldBytes data = Hold(std::move(payload));
      CorruptForTesting(data);
      SendUpload(*p, *item, std::move(data), /*payload=*/true);
    }
  }

  // Hands one upload's bytes to the transport; its release of the frame (UploadToken) reports
  // the upload done.
  void SendUpload(Peer& p, const UploadItem& item, HeldBytes data, bool payload) {
    net::ChunkHeader header{.version = item.target->manifest.version.value(),
                            .chunk_index = item.chunk.value(),
                            .payload_length = static_cast<uint32_t>(data.bytes.size()),
                            .encoding = static_cast<uint8_t>(item.kind)};
    const size_t size = data.bytes.size();
    net::OutFrame frame = net::OutFrame::Chunk(header, data.bytes, std::move(data.owner));
    frame.on_written = std::make_shared<UploadToken>(
        upload_sink_,
        UploadDone{item.target->epoch, p.id, item.chunk, true, p.gen, payload, payload ? size : 0});
    // The transport's data queue holds at most one whole chunk or kPayloadBytesInTransport of
    // this peer's payloads, so it has room: no wait here.
    if (p.conn->Send(std::move(frame)).ok()) bytes_sent_ += size;
    // A failed send released the token: the connection is gone, and its end is reported.
  }

  // On an upload worker: reads the peer's next chunk and hands it to the transport; the
  // transport's release of the frame (UploadToken) reports it done and lets the next one start.
  void UploadNext(Peer& p) {
    while (true) {
      std::optional<UploadItem> upload;
      {
        std::lock_guard lock(p.wmu);
        while (!p.closing && !p.uploads.empty() && !upload) {
          upload = std::move(p.uploads.front());
          p.uploads.pop_front();
          if (p.stopped.erase({upload->target->epoch, upload->chunk.value()}) != 0) upload.reset();
        }
        if (!upload) {
          p.upload_active = false;
          return;
        }
      }
      const UploadItem& item = *upload;
      auto bytes = ReadForUpload(item);
      if (!bytes.ok()) {
        Log("cannot send chunk " + std::to_string(item.chunk.value()) + " of " +
            V(item.target->manifest.version) + " to peer " + std::to_string(p.id.value()) + ": " +
            bytes.status().ToString());
        Push(UploadDone{item.target->epoch, p.id, item.chunk, false, p.gen});
        continue;
      }
      SendUpload(p, item, std::move(bytes).value(), /*payload=*/false);
      return;
    }
  }

  static HeldBytes Hold(SharedBytes bytes) {
    const std::span<const uint8_t> view(*bytes);
    return {view, std::move(bytes)};
  }

  Result<HeldBytes> ReadForUpload(const UploadItem& item) {
    TargetData& t = *item.target;
    HeldBytes data;
    if (item.kind == PayloadKind::kCodec) {
      SharedBytes payload = t.Payload(item.chunk);
      if (payload == nullptr) return NotFound("no payload held");
      data = Hold(std::move(payload));
    } else if (std::optional<HeldBytes> recent = t.recent.Get(item.chunk)) {
      data = std::move(*recent);
      ++uploads_from_memory_;
    } else {
      // Through the store's mapped views: the frame sends from the mapping, which its owner
      // keeps (no copy, except for a chunk that spans files).
      auto committed = [&](Version v, ChunkIndex c) -> Result<ChunkBytes> {
        WC_ASSIGN_OR_RETURN(std::shared_ptr<const MappedVersion> view,
                            store_.OpenView(options_.channel, v));
        return view->Chunk(c);
      };
      Result<ChunkBytes> bytes = NotFound("chunk not held");
      if (t.part) {
        if (!t.InPart(item.chunk)) return NotFound("chunk not in this rank's part");
        bytes = committed(t.part->stored, ChunkIndex(item.chunk.value() - t.part->first_chunk));
      } else {
        if (!t.committed.load() && t.staged) {
          auto view = t.staged->View();
          bytes = view.ok() ? (*view)->Chunk(item.chunk) : view.status();
        }
        // Committed (or committed while we read the staging): the version's view.
        if (!bytes.ok()) bytes = committed(t.manifest.version, item.chunk);
      }
      WC_RETURN_IF_ERROR(bytes.status());
      data = HeldBytes{bytes->bytes, std::move(bytes->owner)};
      ++uploads_from_store_;
    }
    CorruptForTesting(data);
    return data;
  }

  // A test's node that sends every chunk with one bit flipped (corrupt_uploads_for_testing).
  void CorruptForTesting(HeldBytes& data) const {
    if (!options_.corrupt_uploads_for_testing || data.bytes.empty()) return;
    auto copy = std::make_shared<std::vector<uint8_t>>(data.bytes.begin(), data.bytes.end());
    (*copy)[copy->size() / 2] ^= 0x01;
    data = Hold(std::move(copy));
  }

  static void ClosePeer(Peer& p) {
    {
      std::lock_guard lock(p.wmu);
      p.closing = true;
    }
    p.wcv.notify_all();
    if (p.conn) p.conn->Close();
  }
  static void JoinPeer(Peer& p) {
    if (p.reader.joinable()) p.reader.join();
  }

  // Under mu_ (it counts into target_). Control messages go to the transport at once (its
  // control queue is written ahead of chunk data); a peer that leaves megabytes of them unread
  // is dropped rather than waited for.
  void SendTo(Peer& p, const Message& m) {
    {
      std::lock_guard lock(p.wmu);
      if (p.closing) return;
    }
    const std::vector<uint8_t> bytes = swarm::EncodeMessage(m);
    if (static_cast<size_t>(m.type) < target_.messages_sent.size()) {
      ++target_.messages_sent[static_cast<size_t>(m.type)];
    }
    target_.control_bytes_sent += bytes.size();
    const Status sent = p.conn->SendControl(bytes, net::Duration::zero());
    if (!sent.ok() && sent.code() == Code::kDeadlineExceeded) {
      Log("peer " + std::to_string(p.id.value()) + " does not read its control messages; closing");
      ClosePeer(p);  // its end arrives as PeerDown
    }
  }

  // ---- the event thread ----

  void EventLoop() {
    auto next_tick = Clock::now() + kTick;
    while (true) {
      std::deque<Event> batch;
      {
        std::unique_lock lock(qmu_);
        qcv_.wait_until(lock, next_tick, [&] { return qstop_ || !queue_.empty(); });
        if (qstop_) return;
        batch.swap(queue_);
      }
      std::vector<std::shared_ptr<Peer>> reap;
      {
        std::lock_guard lock(mu_);
        for (Event& e : batch) std::visit([&](auto& ev) { Handle(ev); }, e);
        if (Clock::now() >= next_tick) {
          next_tick = Clock::now() + kTick;
          Apply(protocol_.OnTick(Now()));
          MaybeFlush();
        }
        MaybeTrace();
      }
      RunLoopChecks();
      {
        std::lock_guard lock(mu_);
        reap.swap(dead_);
      }
      // Joined outside the lock: a writer may be pushing an event that this thread handles.
      for (auto& p : reap) {
        ClosePeer(*p);
        JoinPeer(*p);
      }
    }
  }

  // One line per trace interval: what moved since the last line and what the scheduler holds.
  // Under mu_.
  void MaybeTrace() {
    if (options_.trace_interval <= net::Duration::zero() || Clock::now() < next_trace_) return;
    const Clock::time_point now = Clock::now();
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
  void MaybeFlush() {
    if (target_.data == nullptr || !target_.data->staged || target_.data->committed.load() ||
        flushing_->load() || Clock::now() < next_flush_ || chunks_verified_ == flushed_at_) {
      return;
    }
    next_flush_ = Clock::now() + kFlushEvery;
    flushed_at_ = chunks_verified_.load();
    flushing_->store(true);
    auto data = target_.data;
    auto flag = flushing_;
    pool_->Submit([data, flag] {
      data->staged->Flush().IgnoreError();  // a failing disk shows at the next write or commit
      flag->store(false);
    });
  }

  std::shared_ptr<Peer> FindPeer(PeerId id, uint64_t gen) {
    auto it = peers_.find(id.value());
    if (it == peers_.end() || it->second->gen != gen) return nullptr;
    return it->second;
  }

  void Handle(PeerUp& e) {
    auto& slot = peers_[e.peer->id.value()];
    if (slot != nullptr) {
      // A reconnect (the peer restarted): the old connection is finished.
      Apply(protocol_.OnPeerDisconnected(Now(), slot->id));
      dead_.push_back(slot);
    }
    slot = e.peer;
    Log("peer " + std::to_string(e.peer->id.value()) + " connected (" +
        (e.peer->outgoing ? "out" : "in") + ")");
    Apply(protocol_.OnPeerConnected(Now(), e.peer->id));
  }

  void Handle(PeerDown& e) {
    auto p = FindPeer(e.id, e.gen);
    if (p == nullptr) return;
    Log("peer " + std::to_string(e.id.value()) + " disconnected: " + e.why.ToString());
    peers_.erase(e.id.value());
    dead_.push_back(p);
    Apply(protocol_.OnPeerDisconnected(Now(), e.id));
  }

  void Handle(Received& e) {
    auto p = FindPeer(e.id, e.gen);
    if (p == nullptr) return;
    if (e.frame.type == net::FrameType::kChunk) {
      OnChunkFrame(*p, std::move(e.frame));
      return;
    }
    if (e.frame.type != net::FrameType::kControl) return;
    auto m = swarm::ParseMessage(e.frame.body);
    if (!m.ok()) {
      Apply(protocol_.OnMalformed(Now(), p->id, m.status().ToString()));
      return;
    }
    Apply(protocol_.OnMessage(Now(), p->id, *m));
  }

  void OnChunkFrame(Peer& p, net::Frame frame) {
    auto header = frame.chunk_header();
    if (!header.ok()) return;
    const uint64_t size = frame.chunk_payload().size();
    bytes_received_ += size;
    const Version v(header->version);
    if (target_.data == nullptr || protocol_.target_version() != v) return;  // a target we left
    target_.bytes_received += size;
    const uint32_t c = header->chunk_index;
    // Dropped unread unless it answers a request of this epoch and is not held or being checked.
    const swarm::Arrival arrival =
        protocol_.OnChunkArrived(Now(), p.id, v, ChunkIndex(c), header->encoding);
    if (!arrival.check) return;
    PendingCheck check{target_.data, std::make_shared<const net::Frame>(std::move(frame)),
                       p.id,         ChunkIndex(c),
                       arrival.item, arrival.epoch};
    if (CheckedOnLoop(check)) {
      loop_checks_.push_back(std::move(check));
      return;
    }
    pool_->Submit([this, check = std::move(check)] { Push(Check(check)); });
  }

  // A codec payload onto a small chunk is checked on the event loop's own thread, between
  // batches and outside mu_: handing it to a worker and its result back costs two thread
  // switches, more than decoding a few KiB onto the base. Whole chunks (a SHA-256 pass each) and
  // large chunks stay on the workers, which spread them over the cores.
  static bool CheckedOnLoop(const PendingCheck& check) {
    return check.kind == PayloadKind::kCodec &&
           check.data->manifest.ChunkRange(check.chunk).size <= kLoopCheckMaxChunkBytes;
  }

  Verified Check(const PendingCheck& c) {
    Verified result = VerifyAndStore(*c.data, c.epoch, c.frame, c.from, c.chunk, c.kind);
    if (result.status.code() == Code::kCorrupt && !result.decode_failed && options_.on_bad_chunk) {
      options_.on_bad_chunk(c.from);
    }
    return result;
  }

  // The event loop's own checks (CheckedOnLoop): run outside mu_, their outcomes handled under
  // it. Handling an outcome never receives a frame, so one round empties the list.
  void RunLoopChecks() {
    std::vector<PendingCheck> checks;
    {
      std::lock_guard lock(mu_);
      checks.swap(loop_checks_);
    }
    if (checks.empty()) return;
    std::vector<Verified> results;
    results.reserve(checks.size());
    for (const PendingCheck& c : checks) results.push_back(Check(c));
    std::lock_guard lock(mu_);
    for (Verified& r : results) Handle(r);
  }

  // Runs on a worker: checks the chunk (or payload, then the decoded chunk) against the manifest
  // and writes it to the staging. A chunk is marked verified only after its bytes hashed to the
  // manifest's chunk hash.
  Verified VerifyAndStore(TargetData& t, uint64_t epoch,
                          const std::shared_ptr<const net::Frame>& frame, PeerId from,
                          ChunkIndex chunk, PayloadKind kind) {
    Verified out{epoch, from, chunk, kind, Status::Ok()};
    const Manifest& m = t.manifest;
    const ByteRange range = m.ChunkRange(chunk);
    std::span<const uint8_t> payload = frame->chunk_payload();
    // Built only for an error: a delta step verifies hundreds of chunks a second.
    auto what = [&] { return "chunk " + std::to_string(chunk.value()) + " of " + V(m.version); };
    if (kind == PayloadKind::kRaw) {
      if (payload.size() != range.size ||
          HashBytes(m.hash_algorithm, payload) != m.chunk_hashes[chunk.value()]) {
        out.status = Corrupt(what() + " does not match its manifest hash");
        return out;
      }
      out.status = t.staged->WriteChunk(chunk, payload);
      if (out.status.ok()) out.status = t.staged->MarkVerified(chunk);
      if (out.status.ok()) t.recent.Put(chunk, {payload, frame});
      return out;
    }
    const DeltaChunk& d = m.delta->chunks[chunk.value()];
    // The payload first, before a byte of it is parsed: its SHA-256 is in the signed manifest.
    // With the fast check (docs/verification.md) that hash is what makes the payload trusted
    // input, so the rebuilt chunk needs only its XXH3-128; otherwise it is hashed with SHA-256.
    std::optional<codec::CheckedPayload> checked;
    if (codec::UsesFastCheck(m, options_.verify_result)) {
      Result<codec::CheckedPayload> c =
          codec::CheckedPayload::Check(payload, d.payload_size, d.payload_hash);
      if (!c.ok()) {
        out.status = Corrupt(what() + ": payload does not match its manifest hash");
        return out;
      }
      checked = *c;
    } else if (payload.size() != d.payload_size ||
               HashBytes(m.delta->payload_hash_algorithm, payload) != d.payload_hash) {
      out.status = Corrupt(what() + ": payload does not match its manifest hash");
      return out;
    }
    // The payload is the publisher's own: a failure from here on is not the sender's fault.
    thread_local codec::CodecScratch scratch;
    thread_local std::vector<uint8_t> base_scratch;  // reused: a fresh one is an mmap per chunk
    std::span<const uint8_t> base_bytes;
    Digest base_hash{};
    if (chunk.value() < t.base_manifest->chunk_count()) {
      base_bytes = t.base_bytes->Read(t.base_manifest->ChunkRange(chunk), base_scratch);
      base_hash = t.base_manifest->chunk_hashes[chunk.value()];
    }
    // One pass: each decoded block is hashed and written to the staged file while it is in
    // cache (no dry run, no chunk-sized copy). The staged range holds unverified bytes until the
    // decoder has checked the whole chunk's hash; the chunk is marked verified only then, so a
    // failure (or a crash) leaves it missing and it is fetched again.
    Status write_error;
    const codec::HashedChunk base =
        base_bytes.empty()
            ? codec::HashedChunk::Compute({}, m.hash_algorithm)
            : codec::HashedChunk::FromVerifiedManifest(base_bytes, base_hash, m.hash_algorithm);
    const codec::DecodedBlockSink sink = [&](uint64_t offset, std::span<const uint8_t> block) {
      std::shared_lock current(t.write_mu);
      if (t.epoch != epoch) {
        // Restarted meanwhile: the new epoch may already hold this chunk, verified.
        write_error = Aborted("the fetch restarted while chunk " + std::to_string(chunk.value()) +
                              " was decoding");
        return write_error;
      }
      write_error = t.staged->WriteChunkPart(chunk, offset, block);
      return write_error;
    };
    const Digest* expected = &m.chunk_hashes[chunk.value()];
    Status status =
        checked
            ? codec::DecodeChunkStreaming(*checked, base, expected, m.fast_hashes[chunk.value()],
                                          range.size, sink, scratch)
            : codec::DecodeChunkStreaming(payload, base, expected, range.size, sink, scratch);
    if (!write_error.ok()) {
      out.status = write_error;  // ours (disk), not a decode failure
      return out;
    }
    if (!status.ok()) {
      out.status = status.WithContext(what());
      out.decode_failed = true;
      return out;
    }
    out.fast = checked.has_value();
    out.status = t.staged->MarkVerified(chunk);
    if (out.status.ok() && t.payloads != nullptr) {
      t.payloads->Put(chunk, std::vector<uint8_t>(payload.begin(), payload.end()));
    }
    return out;
  }

  void Handle(Verified& e) {
    if (target_.data == nullptr || e.epoch != protocol_.epoch()) return;
    swarm::CheckOutcome outcome = swarm::CheckOutcome::kOk;
    std::string why;
    if (e.status.ok()) {
      ++chunks_verified_;
      if (e.kind == PayloadKind::kCodec) ++(e.fast ? delta_chunks_fast_ : delta_chunks_sha256_);
    } else if (e.decode_failed) {
      outcome = swarm::CheckOutcome::kUndecodable;
      why = e.status.ToString();
    } else if (e.status.code() == Code::kCorrupt) {
      outcome = swarm::CheckOutcome::kCorrupt;
      ++chunks_failed_;
      ++target_.chunks_failed;
      Log("bad data from peer " + std::to_string(e.from.value()) + ": " + e.status.ToString());
    } else {
      outcome = swarm::CheckOutcome::kStoreError;
      why = e.status.WithContext("storing chunk " + std::to_string(e.chunk.value())).ToString();
    }
    Apply(protocol_.OnChunkChecked(Now(), e.epoch, e.from, e.chunk, outcome, why));
  }

  void Handle(UploadDone& e) {
    if (e.sent) {
      auto it = peers_.find(e.peer.value());
      if (it != peers_.end() && it->second->gen == e.gen) {
        {
          std::lock_guard lock(it->second->wmu);
          if (e.payload) {
            it->second->payload_bytes_in_transport -= e.payload_bytes;
          } else {
            it->second->upload_active = false;
          }
        }
        KickUploads(it->second);
      }
    }
    Apply(protocol_.OnUploadDone(Now(), e.epoch, e.peer, e.chunk));
  }

  // Carries out what the protocol decided. Under mu_. Nothing here calls the protocol again, so
  // the span stays valid throughout.
  void Apply(std::span<const Effect> effects) {
    for (const Effect& e : effects) ApplyOne(e);
  }

  void ApplyOne(const Effect& e) {
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
  std::string CompletionStats() const {
    const auto& n = target_.messages_sent;
    const double s = std::chrono::duration<double>(Clock::now() - target_.started).count();
    auto count = [&](MessageType t) { return std::to_string(n[static_cast<size_t>(t)]); };
    char took[32];
    std::snprintf(took, sizeof(took), "%.3f", s);
    return std::string(" in ") + took + " s: received " + std::to_string(target_.bytes_received) +
           " chunk bytes; sent " + count(MessageType::kRequest) + " requests, " +
           count(MessageType::kHave) + " haves, " + count(MessageType::kSwarmHave) +
           " have-sets, " + count(MessageType::kReject) + " rejects, " +
           count(MessageType::kCancel) + " cancels, " + std::to_string(target_.control_bytes_sent) +
           " control bytes";
  }

  // ---- targets ----

  // Hands the target to the protocol: what it holds (`whole`, `payload`) and wants, and the
  // sizes its item scaling needs. target_.data is set. Under mu_.
  Status StartTarget(std::vector<bool> whole, std::vector<bool> payload, std::vector<bool> want,
                     TargetRole role = {}) {
    const TargetData& t = *target_.data;
    const Manifest& m = t.manifest;
    swarm::TargetSpec spec{.version = m.version,
                           .chunk_count = m.chunk_count(),
                           .whole = std::move(whole),
                           .payload = std::move(payload),
                           .want = std::move(want),
                           .source = role.source,
                           .fetch_payloads = role.fetch_payloads,
                           .total_bytes = m.total_size(),
                           .chunk_bytes = m.chunk_size,
                           .payload_bytes = {},
                           .seed = options_.node_id.value() ^ (m.version.value() << 20),
                           .preferred = {}};
    if (preferred_.has_value() && preferred_->first == m.version)
      spec.preferred = preferred_->second;
    if (m.delta && m.delta->chunks.size() == m.chunk_count()) {
      spec.payload_bytes.reserve(m.chunk_count());
      for (const DeltaChunk& d : m.delta->chunks) {
        spec.payload_bytes.push_back(
            d.encoding == ChunkEncoding::kSame ? 0 : std::max<uint64_t>(d.payload_size, 1));
      }
    }
    Result<std::span<const Effect>> effects = protocol_.SetTarget(Now(), std::move(spec));
    if (!effects.ok()) {
      target_ = Target{};  // no target rather than one the protocol does not know
      return effects.status();
    }
    Apply(*effects);
    done_cv_.notify_all();
    return Status::Ok();
  }

  // Leaves the current target; its staging is dropped unless it was committed (`reason`: why,
  // for streaming readers). Under mu_.
  void LeaveTarget(std::string_view reason = {}) {
    if (target_.data == nullptr) return;
    if (!target_.data->committed.load() && target_.data->staged) {
      Status aborted = store_.Abort(options_.channel, target_.data->manifest.version, reason);
      if (!aborted.ok())
        Log("abort of " + V(target_.data->manifest.version) + ": " + aborted.ToString());
    }
    protocol_.LeaveTarget();
    target_ = Target{};
    bytes_sent_at_target_ = bytes_sent_.load();
  }

  Result<std::optional<Manifest>> Committed(Version v) {
    auto list = store_.List(options_.channel);
    if (!list.ok()) {
      if (list.status().code() == Code::kNotFound) return std::optional<Manifest>();
      return list.status();
    }
    for (const VersionInfo& info : *list) {
      if (info.version != v) continue;
      WC_ASSIGN_OR_RETURN(Manifest m, store_.GetManifest(options_.channel, v));
      return std::optional<Manifest>(std::move(m));
    }
    return std::optional<Manifest>();
  }

  // Which chunks of committed `m` hold its bytes: all, or a partial version's (Store::GetPartial).
  Result<std::vector<bool>> HeldChunks(const Manifest& m) const {
    WC_ASSIGN_OR_RETURN(std::optional<PartialVersion> partial,
                        store_.GetPartial(options_.channel, m.version));
    std::vector<bool> out(m.chunk_count(), !partial.has_value());
    if (partial) {
      for (ChunkIndex c : partial->chunks) out[c.value()] = true;
    }
    return out;
  }

  // Whether every wanted chunk still missing can be rebuilt from its payload: its encoding needs
  // no base (kFull), or the base holds the chunk. A tensor-subset node's base is its previous
  // partial version; when that lacks a chunk the delta needs, the version is fetched whole
  // (payloads and whole chunks are not mixed within one target).
  static bool BaseCoversDelta(const Manifest& m, const std::vector<bool>& want,
                              const std::vector<bool>& whole, const std::vector<bool>& base_holds) {
    for (uint32_t i = 0; i < m.chunk_count(); ++i) {
      if (!want[i] || whole[i] || m.delta->chunks[i].encoding == ChunkEncoding::kFull) continue;
      if (i < base_holds.size() && !base_holds[i]) return false;  // beyond it: decoded onto nothing
    }
    return true;
  }

  // Checks a new target against the current one: OK to replace, or a status (OK for "same").
  std::optional<Status> CheckReplace(const Manifest& manifest) {
    if (manifest.channel != options_.channel) {
      return InvalidArgument("manifest of channel '" + manifest.channel + "', node follows '" +
                             options_.channel + "'");
    }
    if (target_.data == nullptr) return std::nullopt;
    const Manifest& cur = target_.data->manifest;
    if (cur.version == manifest.version) {
      if (cur.root != manifest.root) {
        return FailedPrecondition(V(manifest.version) + " arrived with another root");
      }
      return Status::Ok();
    }
    // Another version, older ones included: after a rollback the fleet's current version is
    // below the target, and this node must serve it (or fetch it) instead.
    return std::nullopt;
  }

  Status Fetch(const Manifest& manifest) {
    std::lock_guard lock(mu_);
    if (auto s = CheckReplace(manifest)) return *s;
    const Clock::time_point begun = Clock::now();
    const uint32_t n = manifest.chunk_count();
    auto data = std::make_shared<TargetData>();
    data->manifest = manifest;
    std::vector<bool> want(n, options_.tensor_patterns.empty());
    if (!options_.tensor_patterns.empty()) {
      // The chunks of the selected tensors and those that keep every file parseable (headers).
      TensorSelection selection = SelectTensors(manifest, options_.tensor_patterns);
      for (ChunkIndex c : selection.chunks) want[c.value()] = true;
      data->subset = PartialVersion{options_.tensor_patterns, std::move(selection.tensors),
                                    std::move(selection.chunks)};
    }

    WC_ASSIGN_OR_RETURN(std::optional<Manifest> held, Committed(manifest.version));
    if (held) {
      if (held->root != manifest.root) {
        return FailedPrecondition("local " + V(manifest.version) + " has another root");
      }
      // A partial version (a tensor-subset node's) holds, and serves, only its chunks.
      WC_ASSIGN_OR_RETURN(std::vector<bool> holds, HeldChunks(*held));
      for (uint32_t i = 0; i < n; ++i) {
        if (want[i] && !holds[i]) {
          return FailedPrecondition("local " + V(manifest.version) +
                                    " is committed partially, without chunk " + std::to_string(i) +
                                    " that this node wants (other --tensors?)");
        }
      }
      LeaveTarget();
      data->committed = true;
      target_.data = std::move(data);
      // Every wanted chunk is held: the target is complete from the start.
      WC_RETURN_IF_ERROR(
          StartTarget(std::move(holds), std::vector<bool>(n, false), std::move(want)));
      Log("target " + V(manifest.version) + " already committed: serving it");
      return Status::Ok();
    }

    LeaveTarget();
    // Staging left by an earlier run: resumed when it is this version, dropped otherwise.
    auto staging = store_.ListStaging(options_.channel);
    if (staging.ok()) {
      for (Version v : *staging) {
        if (v == manifest.version) {
          auto resumed = store_.ResumeStaging(options_.channel, v);
          if (resumed.ok() && resumed->manifest().root == manifest.root) {
            data->staged.emplace(std::move(resumed).value());
            continue;
          }
        }
        if (v <= manifest.version) store_.Abort(options_.channel, v).IgnoreError();
      }
    }
    if (!data->staged) {
      WC_ASSIGN_OR_RETURN(StagedVersion begun, store_.BeginStaging(options_.channel, manifest));
      data->staged.emplace(std::move(begun));
    }
    std::vector<bool> whole(n, false);
    for (uint32_t i = 0; i < n; ++i) whole[i] = data->staged->HasChunk(ChunkIndex(i));
    const uint32_t resumed = data->staged->verified_count();

    // The current committed version is the local base: chunks equal to its chunks are copied,
    // and a delta onto it travels as payloads.
    auto current = store_.Current(options_.channel);
    uint32_t copied = 0;
    bool fetch_payloads = false;
    if (current.ok()) {
      auto base = store_.GetManifest(options_.channel, *current);
      auto bytes = base.ok() ? codec::SnapshotReader::Open(
                                   store_.VersionPath(options_.channel, *current), *base)
                             : Result<codec::SnapshotReader>(base.status());
      // A partial base (this node's previous subset) holds real bytes only in its chunks.
      auto base_holds = base.ok() ? HeldChunks(*base) : Result<std::vector<bool>>(base.status());
      if (bytes.ok() && base_holds.ok() && base->hash_algorithm == manifest.hash_algorithm) {
        std::vector<uint8_t> scratch;
        for (uint32_t i = 0; i < n; ++i) {
          const ChunkIndex c(i);
          if (whole[i] || !want[i] || i >= base->chunk_count() || !(*base_holds)[i] ||
              base->chunk_hashes[i] != manifest.chunk_hashes[i] ||
              base->ChunkRange(c).size != manifest.ChunkRange(c).size) {
            continue;
          }
          // Equal chunk hashes: the bytes are our verified base's. Checked again on the way
          // into the staging (a base changed on disk, a memory error), by the fast hash when the
          // manifest has them (nothing here came from a peer).
          const std::span<const uint8_t> same = bytes->Read(base->ChunkRange(c), scratch);
          if (codec::CheckLocalCopy(manifest, c, same, options_.verify_result).ok() &&
              data->staged->WriteChunk(c, same).ok() && data->staged->MarkVerified(c).ok()) {
            whole[i] = true;
            ++copied;
          }
        }
        fetch_payloads = options_.use_delta && manifest.delta.has_value() &&
                         manifest.delta->base_version == *current &&
                         manifest.delta->base_root == base->root &&
                         manifest.delta->chunks.size() == n &&
                         BaseCoversDelta(manifest, want, whole, *base_holds);
        if (fetch_payloads) {
          data->base_manifest = std::move(base).value();
          data->base_bytes.emplace(std::move(bytes).value());
          // Spilled past its memory bound into the store's own disk (TMPDIR may be tmpfs).
          data->payloads = std::make_shared<PayloadCache>(
              manifest.version, PayloadCacheOptions{.spill_dir = store_.root()});
        }
      }
    }
    WC_RETURN_IF_ERROR(data->staged->Flush());
    target_.data = std::move(data);
    target_.started = begun;
    WC_RETURN_IF_ERROR(StartTarget(std::move(whole), std::vector<bool>(n, false), std::move(want),
                                   {.fetch_payloads = fetch_payloads}));
    Log("target " + V(manifest.version) + ": " + std::to_string(n) + " chunks, " +
        std::to_string(resumed) + " resumed, " + std::to_string(copied) + " copied locally, " +
        (fetch_payloads ? "fetching delta payloads" : "fetching whole chunks") + " (staged in " +
        std::to_string(
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - begun).count()) +
        " ms, window " + std::to_string(protocol_.window()) + ")");
    return Status::Ok();
  }

  Status Seed(const Manifest& manifest, std::shared_ptr<const PayloadCache> payloads) {
    std::lock_guard lock(mu_);
    if (auto s = CheckReplace(manifest)) return *s;
    WC_ASSIGN_OR_RETURN(std::optional<Manifest> held, Committed(manifest.version));
    if (!held || held->root != manifest.root) {
      return FailedPrecondition("cannot seed " + V(manifest.version) +
                                ": not committed in the store with this root");
    }
    const uint32_t n = manifest.chunk_count();
    LeaveTarget();
    auto data = std::make_shared<TargetData>();
    data->manifest = manifest;
    data->committed = true;
    data->seed_payloads = std::move(payloads);
    target_.data = std::move(data);
    std::vector<bool> payload(n, false);
    if (target_.data->seed_payloads != nullptr) {
      for (ChunkIndex c : target_.data->seed_payloads->Chunks()) {
        if (c.value() < n) payload[c.value()] = true;
      }
    }
    target_.started = Clock::now();
    WC_RETURN_IF_ERROR(StartTarget(std::vector<bool>(n, true), std::move(payload),
                                   std::vector<bool>(n, true), {.source = true}));
    Log("seeding " + V(manifest.version));
    return Status::Ok();
  }

  Status SeedPart(const Manifest& manifest, const Manifest& part, uint32_t first_chunk,
                  std::shared_ptr<const PayloadCache> payloads) {
    std::lock_guard lock(mu_);
    if (auto s = CheckReplace(manifest)) return *s;
    const uint32_t n = manifest.chunk_count();
    const uint32_t own = part.chunk_count();
    if (first_chunk > n || own > n - first_chunk ||
        !std::equal(part.chunk_hashes.begin(), part.chunk_hashes.end(),
                    manifest.chunk_hashes.begin() + first_chunk)) {
      return FailedPrecondition(
          "cannot seed " + V(manifest.version) + ": this rank's part is not its chunks " +
          std::to_string(first_chunk) + ".." + std::to_string(first_chunk + own));
    }
    WC_ASSIGN_OR_RETURN(std::optional<Manifest> held, Committed(part.version));
    if (!held || held->root != part.root) {
      return FailedPrecondition("cannot seed " + V(manifest.version) +
                                ": this rank's part is not committed in the store");
    }
    LeaveTarget();
    auto data = std::make_shared<TargetData>();
    data->manifest = manifest;
    data->committed = true;
    data->seed_payloads = std::move(payloads);
    data->part = TargetData::PartSeed{part.version, first_chunk, own};
    target_.data = std::move(data);
    // This rank holds, wants and replicates its part's chunks only.
    std::vector<bool> own_chunks(n, false), payload(n, false);
    for (uint32_t i = first_chunk; i < first_chunk + own; ++i) own_chunks[i] = true;
    if (target_.data->seed_payloads != nullptr) {
      for (ChunkIndex c : target_.data->seed_payloads->Chunks()) {
        if (c.value() < own) payload[first_chunk + c.value()] = true;
      }
    }
    target_.started = Clock::now();
    WC_RETURN_IF_ERROR(StartTarget(own_chunks, std::move(payload), own_chunks, {.source = true}));
    Log("seeding " + V(manifest.version) + " chunks " + std::to_string(first_chunk) + ".." +
        std::to_string(first_chunk + own) + " (this rank's part)");
    return Status::Ok();
  }

  Status CommitTarget() {
    std::shared_ptr<TargetData> data;
    bool kept_payloads = false;  // every payload was fetched and decoded (no fall-back)
    {
      std::lock_guard lock(mu_);
      if (target_.data == nullptr) return FailedPrecondition("no target to commit");
      if (target_.data->committed.load()) return Status::Ok();
      if (!protocol_.complete()) {
        const swarm::Scheduler* scheduler = protocol_.scheduler();
        return FailedPrecondition(V(target_.data->manifest.version) + " is not complete (" +
                                  std::to_string(scheduler != nullptr ? scheduler->missing() : 0) +
                                  " missing)");
      }
      data = target_.data;
      kept_payloads = protocol_.fetching_payloads();
    }
    // The commit (fsyncs, renames) runs without the lock; uploads keep reading the staging
    // and fall back to the committed files once it moved.
    WC_RETURN_IF_ERROR(data->staged->Flush());
    if (data->subset) {
      // Only the chunks of its tensors (docs/agent.md, "Tensor subsets"): no delta file, since
      // samplers of a partial version read its files.
      WC_RETURN_IF_ERROR(
          store_.CommitPartial(options_.channel, data->manifest.version, *data->subset));
    } else {
      if (kept_payloads) KeepDeltaFile(*data);
      WC_RETURN_IF_ERROR(store_.Commit(options_.channel, data->manifest.version));
    }
    if (Result<std::vector<VersionInfo>> kept = store_.List(options_.channel); kept.ok()) {
      std::vector<Version> keep;
      for (const VersionInfo& v : *kept) keep.push_back(v.version);
      live::CollectDeltaFiles(store_.root(), options_.channel, keep);
    }
    data->committed = true;
    Log("committed " + V(data->manifest.version));
    done_cv_.notify_all();
    return Status::Ok();
  }

  // Samplers on this machine patch their live tensors from a version's payloads instead of
  // copying its chunks (docs/live.md): when this node received the delta as payloads (every
  // one checked against the signed manifest), keep them in the delta file beside the store,
  // before the version becomes current. A node that took some chunks whole has no complete set:
  // its samplers copy the chunks that differ instead.
  void KeepDeltaFile(const TargetData& data) {
    if (data.payloads == nullptr || !data.manifest.delta.has_value()) return;
    const Status s = live::WriteDeltaFile(store_.root(), data.manifest,
                                          [&](ChunkIndex i) -> std::span<const uint8_t> {
                                            // The cache keeps every payload it holds alive, so the
                                            // span outlives `p`.
                                            const SharedBytes p = data.payloads->Get(i);
                                            if (p == nullptr) return {};
                                            return std::span<const uint8_t>(*p);
                                          });
    if (!s.ok() && s.code() != Code::kInvalidArgument) {
      Log("no delta file for " + V(data.manifest.version) + ": " + s.ToString());
    }
  }

  void PreferChunks(Version version, std::vector<ChunkIndex> order) {
    std::lock_guard lock(mu_);
    preferred_.emplace(version, order);
    if (target_.data != nullptr && target_.data->manifest.version == version) {
      Apply(protocol_.Prefer(Now(), std::move(order)));
    }
  }

  Status AbortTarget(std::string_view reason) {
    std::lock_guard lock(mu_);
    if (target_.data == nullptr) return Status::Ok();
    if (target_.data->committed.load()) {
      return FailedPrecondition(V(target_.data->manifest.version) + " is already committed");
    }
    LeaveTarget(reason);
    done_cv_.notify_all();
    return Status::Ok();
  }

  void SetPeers(std::span<const PeerAddress> list) {
    std::lock_guard lock(mu_);
    if (stopping_ || !started_) return;
    std::set<uint64_t> listed;
    for (const PeerAddress& a : list) {
      if (a.id == options_.node_id) continue;
      listed.insert(a.id.value());
      if (a.id > options_.node_id) continue;  // it connects to us
      if (peers_.count(a.id.value()) != 0 || connecting_.count(a.id.value()) != 0) continue;
      if (!protocol_.Admits(Now(), a.id)) continue;  // banned
      connecting_.insert(a.id.value());
      connectors_.emplace_back([this, a] {
        auto conn = transport_.Connect(a.address, std::chrono::seconds(5));
        if (conn.ok() && (*conn)->peer().node_id != a.id) {
          Log("peer at " + a.address + " is node " +
              std::to_string((*conn)->peer().node_id.value()) + ", not " +
              std::to_string(a.id.value()));
          (*conn)->Close();
          conn = Unavailable("wrong node");
        }
        if (conn.ok()) {
          AddConnection(std::move(conn).value(), /*outgoing=*/true);
        } else {
          Log("connect to peer " + std::to_string(a.id.value()) + " at " + a.address + ": " +
              conn.status().ToString());
        }
        std::lock_guard inner(mu_);
        connecting_.erase(a.id.value());
      });
    }
    // Outgoing connections to peers no longer listed are closed (incoming ones are the other
    // side's to close).
    for (auto it = peers_.begin(); it != peers_.end();) {
      if (it->second->outgoing && listed.count(it->first) == 0) {
        Log("peer " + std::to_string(it->first) + " no longer listed");
        Apply(protocol_.OnPeerDisconnected(Now(), it->second->id));
        dead_.push_back(it->second);
        it = peers_.erase(it);
      } else {
        ++it;
      }
    }
    // Finished connector threads are joined at Stop; bound their number meanwhile.
    if (connectors_.size() > 256 && connecting_.empty()) {
      std::vector<std::thread> old;
      old.swap(connectors_);
      mu_.unlock();
      for (std::thread& t : old) t.join();
      mu_.lock();
    }
    qcv_.notify_one();
  }

  SwarmProgress Progress() const {
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

  bool EveryChunkReplicated() const {
    std::lock_guard lock(mu_);
    return target_.data != nullptr && protocol_.EveryChunkReplicated();
  }

  Status WaitComplete(net::Duration timeout) {
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

  Store& store_;
  net::Transport& transport_;
  SwarmNodeOptions options_;
  swarm::PeerProtocol protocol_;  // guarded by mu_

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  bool started_ = false;
  bool stopping_ = false;
  std::unique_ptr<net::Listener> listener_;
  std::string address_;
  std::thread event_thread_, accept_thread_;
  std::vector<std::thread> connectors_;
  std::set<uint64_t> connecting_;
  std::map<uint64_t, std::shared_ptr<Peer>> peers_;
  std::vector<std::shared_ptr<Peer>> dead_;
  std::vector<PendingCheck> loop_checks_;  // guarded by mu_; run by the event loop (RunLoopChecks)
  uint64_t next_gen_ = 0;
  Target target_;
  // A streaming reader's chunk order for a version (PreferChunks), applied when it is the target.
  std::optional<std::pair<Version, std::vector<ChunkIndex>>> preferred_;
  uint64_t bytes_sent_at_target_ = 0;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<ThreadPool> upload_pool_;
  std::shared_ptr<UploadSink> upload_sink_ = MakeUploadSink();
  Clock::time_point next_flush_{};
  Clock::time_point next_trace_{}, last_trace_{};
  uint64_t traced_rx_ = 0, traced_tx_ = 0;
  uint64_t flushed_at_ = 0;
  std::shared_ptr<std::atomic<bool>> flushing_ = std::make_shared<std::atomic<bool>>(false);

  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<Event> queue_;
  bool qstop_ = false;

  std::atomic<uint64_t> bytes_received_{0}, bytes_sent_{0}, chunks_verified_{0}, chunks_failed_{0},
      peers_dropped_{0}, delta_chunks_fast_{0}, delta_chunks_sha256_{0}, uploads_from_memory_{0},
      uploads_from_store_{0};
};

SwarmNode::SwarmNode(Store& store, net::Transport& transport, SwarmNodeOptions options)
    : impl_(std::make_unique<Impl>(store, transport, std::move(options))) {}

SwarmNode::~SwarmNode() { Stop(); }

Status SwarmNode::Start(std::string_view listen_address) { return impl_->Start(listen_address); }

std::string SwarmNode::address() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->address_;
}

PeerId SwarmNode::id() const { return impl_->options_.node_id; }

Status SwarmNode::Fetch(const Manifest& manifest, std::vector<uint8_t> signed_manifest) {
  WC_ASSIGN_OR_RETURN(Manifest verified,
                      VerifySignedManifest(signed_manifest, impl_->options_.manifest_secret));
  if (verified.root != manifest.root || verified.version != manifest.version) {
    return InvalidArgument("the signed manifest is not the manifest given");
  }
  return impl_->Fetch(verified);
}

Status SwarmNode::Seed(const Manifest& manifest, std::vector<uint8_t> signed_manifest,
                       std::shared_ptr<const PayloadCache> payloads) {
  WC_ASSIGN_OR_RETURN(Manifest verified,
                      VerifySignedManifest(signed_manifest, impl_->options_.manifest_secret));
  if (verified.root != manifest.root || verified.version != manifest.version) {
    return InvalidArgument("the signed manifest is not the manifest given");
  }
  return impl_->Seed(verified, std::move(payloads));
}

Status SwarmNode::SeedPart(const Manifest& manifest, std::vector<uint8_t> signed_manifest,
                           const Manifest& part, uint32_t first_chunk,
                           std::shared_ptr<const PayloadCache> payloads) {
  WC_ASSIGN_OR_RETURN(Manifest verified,
                      VerifySignedManifest(signed_manifest, impl_->options_.manifest_secret));
  if (verified.root != manifest.root || verified.version != manifest.version) {
    return InvalidArgument("the signed manifest is not the manifest given");
  }
  return impl_->SeedPart(verified, part, first_chunk, std::move(payloads));
}

void SwarmNode::SetPeers(std::span<const PeerAddress> peers) { impl_->SetPeers(peers); }
SwarmProgress SwarmNode::progress() const { return impl_->Progress(); }

SwarmCounters SwarmNode::counters() const {
  return {impl_->bytes_received_.load(),      impl_->bytes_sent_.load(),
          impl_->chunks_verified_.load(),     impl_->chunks_failed_.load(),
          impl_->peers_dropped_.load(),       impl_->delta_chunks_fast_.load(),
          impl_->delta_chunks_sha256_.load(), impl_->uploads_from_memory_.load(),
          impl_->uploads_from_store_.load()};
}

Status SwarmNode::WaitComplete(net::Duration timeout) { return impl_->WaitComplete(timeout); }
Status SwarmNode::CommitTarget() { return impl_->CommitTarget(); }
Status SwarmNode::AbortTarget(std::string_view reason) { return impl_->AbortTarget(reason); }
void SwarmNode::PreferChunks(Version version, std::vector<ChunkIndex> order) {
  impl_->PreferChunks(version, std::move(order));
}
bool SwarmNode::EveryChunkReplicated() const { return impl_->EveryChunkReplicated(); }
void SwarmNode::Stop() { impl_->Stop(); }

}  // namespace weightcast::node
