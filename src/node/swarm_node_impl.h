// The swarm node's implementation, shared by the files that carry it out (private to node/):
//   swarm_node.cc              the public calls, the event loop and the protocol's effects;
//   swarm_node_connections.cc  peers: accepting, connecting, reading, control messages;
//   swarm_node_intake.cc       received chunks and payloads: checked, decoded, staged;
//   swarm_node_uploads.cc      chunks and payloads sent to peers;
//   swarm_node_targets.cc      the version fetched or seeded: adopt, commit, abort.
// One mutex (mu_) guards the protocol and the peer table; docs/agent.md describes the threads.
#pragma once

#include "node/swarm_node.h"

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "codec/version_codec.h"
#include "node/recent_chunks.h"
#include "origin/model.h"
#include "swarm/messages.h"
#include "swarm/peer_protocol.h"
#include "util/stopwatch.h"
#include "util/thread_pool.h"

namespace weightcast::node {

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
  // The target's origin (docs/origin.md): its objects, read for this node's share of the chunks.
  // Null: the manifest names none, or the node reads no origin.
  std::shared_ptr<const origin::OriginReader> origin;
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
  // A source that holds no copy of the version in its store (SeedFrom: a model at an HTTP
  // origin; Seed with a reader: a publisher whose store commit runs behind the announce): its
  // chunks are read through this, checked against the manifest, then sent.
  ChunkReader reader;
  bool InPart(ChunkIndex chunk) const {
    return !part || (chunk.value() >= part->first_chunk &&
                     chunk.value() - part->first_chunk < part->chunk_count);
  }
  // Payloads this node decoded, when it fetches payloads onto `base` (whether it still does, after
  // a fall-back to whole chunks, is the protocol's: PeerProtocol::fetching_payloads).
  std::shared_ptr<PayloadCache> payloads;
  // The sampler on this node patches its live tensors from the payloads (SetLiveBase): they are
  // kept as they are, and only the chunks in `decoded` (those with bytes outside every tensor:
  // headers) are decoded and staged; committed partial, as payloads (docs/live.md, "Samplers
  // that stage nothing").
  bool payloads_only = false;
  std::vector<bool> decoded;
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

  std::optional<HeldBytes> Payload(ChunkIndex chunk) const {
    if (seed_payloads != nullptr && InPart(chunk)) {
      const ChunkIndex own(part ? chunk.value() - part->first_chunk : chunk.value());
      if (std::optional<HeldBytes> p = seed_payloads->Get(own)) return p;
    }
    return payloads != nullptr ? payloads->Get(chunk) : std::nullopt;
  }
};

struct SwarmNode::Impl {
  using Effect = swarm::Effect;
  using EffectKind = swarm::EffectKind;
  using Message = swarm::Message;
  using MessageType = swarm::MessageType;
  using PayloadKind = swarm::PayloadKind;

  static constexpr auto kTick = std::chrono::milliseconds(200);
  static constexpr auto kFlushEvery = std::chrono::seconds(1);
  // Upload workers: they read a chunk (memory or store) and queue it on its connection; the
  // sending itself is the transport's. Independent of the number of peers.
  static constexpr size_t kUploadWorkers = 2;
  // Outgoing connects do not block over TCP (the transport's I/O threads run them, each
  // ending as a Connected event). A transport whose connects block (UCX with its TCP fallback)
  // connects on a few threads, whatever the number of peers to connect to: each blocks until its
  // handshake is done (at most kConnectTimeout), and a thread each would make an agent's
  // threads grow with its degree.
  static constexpr size_t kConnectThreads = 4;
  static constexpr auto kConnectTimeout = std::chrono::seconds(5);
  // The largest chunk whose codec payload the event loop checks itself (CheckedOnLoop).
  static constexpr uint64_t kLoopCheckMaxChunkBytes = 1u << 20;
  // Codec payloads of one peer's with its transport at once (KickUploads).
  static constexpr uint64_t kPayloadBytesInTransport = 256u << 10;
  // The origin, as the protocol knows it: a peer that seeds this node's share of the chunks. No
  // node has this id (ids are random or given, and this one is reserved).
  static constexpr PeerId kOriginPeer{0xffff'ffff'ffff'ff0eull};
  // Threads that read chunks from an origin (blocking HTTP); the protocol's window for the
  // origin bounds what is asked at once.
  static constexpr size_t kOriginReaders = 4;

  swarm::Time Now() const {
    return std::chrono::duration_cast<swarm::Time>(clock_.Now().time_since_epoch());
  }
  static std::string V(Version v) { return "v" + std::to_string(v.value()); }

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

    std::mutex wmu;
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
  };

  // A connection a peer made to this node (the accept thread's).
  struct Accepted {
    std::unique_ptr<net::Connection> conn;
  };
  // The end of this node's connect to a listed peer (a transport thread's, or a connect
  // thread's for a transport whose connects block).
  struct Connected {
    PeerAddress listed;
    Result<std::unique_ptr<net::Connection>> conn;
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
    bool kept = false;           // an authentic payload kept as it is (TargetData::payloads_only)
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
  // A chunk read from the origin for `version` (a frame as a peer would have sent it), or why
  // not.
  struct OriginRead {
    Version version;
    ChunkIndex chunk;
    Result<net::Frame> frame;
  };
  // A public call's work (OnLoop).
  struct Task {
    std::function<void()> run;
  };
  using Event =
      std::variant<Accepted, Connected, PeerDown, Received, Verified, UploadDone, OriginRead, Task>;
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
    Stopwatch started;  // for the completion log line (the protocol's time is clock_'s)
  };

  Impl(Store& store, net::Transport& transport, SwarmNodeOptions options)
      : store_(store),
        transport_(transport),
        options_(std::move(options)),
        clock_(options_.clock != nullptr ? *options_.clock : net::Clock::Real()),
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

  // swarm_node.cc: the threads, the event loop, the protocol's effects, progress
  // The verified contents of `signed_manifest`, which must be `manifest` (root and version).
  Result<Manifest> VerifyGiven(const Manifest& manifest,
                               std::span<const uint8_t> signed_manifest) const;
  Status Start(std::string_view listen_address);
  void Stop();
  void Push(Event event);
  void EventLoop();
  void MaybeTrace();
  void MaybeFlush();
  void Apply(std::span<const Effect> effects);
  void ApplyOne(const Effect& e);
  std::string CompletionStats() const;
  SwarmProgress Progress() const;
  bool EveryChunkReplicated() const;
  // Runs `fn` on the event thread, after the events queued before it, with mu_ held as every
  // event is handled, and returns its result: the node's state has one owner, the event loop, and
  // each public call that changes it is one more event on it. Before Start and once the loop has
  // stopped, `fn` runs on the calling thread under mu_; on the event thread itself (a callback of
  // the node's that calls the node), at once. Queries (progress, the listed and banned peers,
  // replication) read under mu_ instead: they are made from /metrics scrapes and heartbeats that
  // hold locks of their own (the registry's, the GIL), which a callback on the loop may need
  // (on_bad_chunk registers a counter): a query waiting for the loop there would wait forever.
  template <typename F>
  std::invoke_result_t<F&> OnLoop(F&& fn) {
    using T = std::invoke_result_t<F&>;
    if (std::this_thread::get_id() == loop_thread_.load()) {
      if (loop_holds_mu_) return fn();
      std::lock_guard lock(mu_);
      return fn();
    }
    std::packaged_task<T()> task([&fn] { return fn(); });
    std::future<T> result = task.get_future();
    if (!PushTask(Task{[&task] { task(); }})) {
      std::lock_guard lock(mu_);
      return fn();
    }
    return result.get();
  }
  // mu_, as the event thread takes it: a public call made on that thread meanwhile (a callback of
  // the node's that calls the node) runs at once (OnLoop).
  class LoopLock {
   public:
    explicit LoopLock(Impl& impl) : impl_(impl), lock_(impl.mu_) { impl_.loop_holds_mu_ = true; }
    ~LoopLock() { impl_.loop_holds_mu_ = false; }
    LoopLock(const LoopLock&) = delete;
    LoopLock& operator=(const LoopLock&) = delete;

   private:
    Impl& impl_;
    std::lock_guard<std::mutex> lock_;
  };
  // Queues a public call's task; false when no loop runs to take it.
  bool PushTask(Task task);
  void Handle(Task& e) { e.run(); }
  // Both wait on done_cv_, which the event loop notifies after every batch of events.
  Status WaitComplete(net::Duration timeout);
  Status WaitReplicated(net::Duration timeout);

  // swarm_node_connections.cc
  void AcceptLoop();
  void Handle(Accepted& e);
  void Handle(Connected& e);
  // Makes `conn` a peer, or refuses it (stopping, banned, this node, a transport that cannot
  // push). On the loop.
  void Admit(std::unique_ptr<net::Connection> conn, bool outgoing);
  void DropUnadmitted(std::unique_ptr<net::Connection> conn);
  static void ClosePeer(Peer& p);
  void SendTo(Peer& p, const Message& m);
  std::shared_ptr<Peer> FindPeer(PeerId id, uint64_t gen);
  void Handle(PeerDown& e);
  void Handle(Received& e);
  void SetPeers(std::span<const PeerAddress> list);

  // swarm_node_intake.cc
  void OnChunkFrame(PeerId from, net::Frame frame);
  static bool CheckedOnLoop(const PendingCheck& check);
  Verified Check(const PendingCheck& c);
  void RunLoopChecks();
  Verified VerifyAndStore(TargetData& t, uint64_t epoch,
                          const std::shared_ptr<const net::Frame>& frame, PeerId from,
                          ChunkIndex chunk, PayloadKind kind);
  void Handle(Verified& e);

  // swarm_node_uploads.cc
  std::shared_ptr<UploadSink> MakeUploadSink();
  void KickUploads(const std::shared_ptr<Peer>& p);
  void SendUpload(Peer& p, const UploadItem& item, HeldBytes data, bool payload);
  void UploadNext(Peer& p);
  Result<HeldBytes> ReadForUpload(const UploadItem& item);
  void CorruptForTesting(HeldBytes& data) const;
  void Handle(UploadDone& e);

  // swarm_node_origin.cc
  void SetOriginShare(uint32_t stripe, uint32_t stripes);
  std::shared_ptr<const origin::OriginReader> OriginReaderFor(const Manifest& manifest);
  void RefreshOriginPeer();
  bool OriginEffect(const Effect& e);
  void Handle(OriginRead& e);

  // swarm_node_targets.cc
  Status StartTarget(std::vector<bool> whole, std::vector<bool> payload, std::vector<bool> want,
                     TargetRole role = {});
  void LeaveTarget(std::string_view reason = {});
  Result<std::optional<Manifest>> Committed(Version v);
  Result<std::vector<bool>> HeldChunks(const Manifest& m) const;
  static bool BaseCoversDelta(const Manifest& m, const std::vector<bool>& want,
                              const std::vector<bool>& whole, const std::vector<bool>& base_holds);
  std::optional<Status> CheckReplace(const Manifest& manifest);
  Status Fetch(const Manifest& manifest);
  Status Seed(const Manifest& manifest, std::shared_ptr<const PayloadCache> payloads,
              ChunkReader reader);
  Status SeedPart(const Manifest& manifest, const Manifest& part, uint32_t first_chunk,
                  std::shared_ptr<const PayloadCache> payloads);
  Status SeedFrom(const Manifest& manifest, ChunkReader reader);
  // Makes `manifest` the target as a source that holds every chunk (Seed, SeedFrom; under mu_).
  Status AdoptAsSource(const Manifest& manifest, std::shared_ptr<const PayloadCache> payloads,
                       ChunkReader reader);
  // On an upload worker: a chunk of a SeedFrom target through its reader, checked against the
  // manifest (and kept among the recent chunks).
  Result<HeldBytes> ReadFromSource(TargetData& t, ChunkIndex chunk);
  void NoteSourceFailure(const Status& status);
  Status CommitTarget();
  // Writes the delta file of a target that fetched payloads (live/delta_file.h).
  Status KeepDeltaFile(const TargetData& data);
  // Whether a delta target onto the store's current `base` is fetched as payloads only: the
  // sampler's live tensors hold that base (SetLiveBase) and this node fetches every tensor.
  bool PayloadsOnly(const Manifest& target, const Manifest& base) const;
  void SetLiveBase(Version version, const Digest& root);
  // Adopts `manifest` (Fetch, under mu_).
  Status FetchLocked(const Manifest& manifest);
  // Adopts readopt_ again, if set (under mu_, outside the protocol's effects).
  void ReadoptIfAsked();
  void PreferChunks(Version version, std::vector<ChunkIndex> order);
  Status AbortTarget(std::string_view reason);

  Store& store_;
  net::Transport& transport_;
  SwarmNodeOptions options_;
  const net::Clock& clock_;
  swarm::PeerProtocol protocol_;  // guarded by mu_

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  bool started_ = false;
  bool stopping_ = false;
  std::unique_ptr<net::Listener> listener_;
  std::string address_;
  std::thread event_thread_, accept_thread_;
  std::unique_ptr<ThreadPool> connect_pool_;
  std::set<uint64_t> connecting_;
  std::map<uint64_t, std::shared_ptr<Peer>> peers_;
  std::vector<PeerId> listed_;  // the last SetPeers list's ids, own id left out
  std::vector<std::shared_ptr<Peer>> dead_;
  std::vector<PendingCheck> loop_checks_;  // guarded by mu_; run by the event loop (RunLoopChecks)
  uint64_t next_gen_ = 0;
  Target target_;
  // A streaming reader's chunk order for a version (PreferChunks), applied when it is the target.
  std::optional<std::pair<Version, std::vector<ChunkIndex>>> preferred_;
  // The version this node's sampler holds whole in its live tensors (SetLiveBase; 0: none).
  Version live_base_;
  Digest live_base_root_{};
  // A payloads-only target whose headers did not decode: adopted again, staged whole, by the
  // event loop once the protocol's effects are applied.
  std::optional<Manifest> readopt_;
  uint64_t bytes_sent_at_target_ = 0;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<ThreadPool> upload_pool_;
  std::unique_ptr<ThreadPool> origin_pool_;  // only with options_.origin_http
  // This node's origin share, and whether the protocol knows the origin as a peer now (guarded
  // by mu_).
  struct OriginShare {
    uint32_t stripe = 0;
    uint32_t stripes = 0;
    bool connected = false;
  };
  OriginShare origin_;
  std::shared_ptr<UploadSink> upload_sink_ = MakeUploadSink();
  net::TimePoint next_flush_{};
  net::TimePoint next_trace_{}, last_trace_{};
  uint64_t traced_rx_ = 0, traced_tx_ = 0;
  uint64_t flushed_at_ = 0;
  std::shared_ptr<std::atomic<bool>> flushing_ = std::make_shared<std::atomic<bool>>(false);

  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<Event> queue_;
  bool qstop_ = false;
  bool loop_running_ = false;  // guarded by qmu_: PushTask's tasks will be run
  std::atomic<std::thread::id> loop_thread_{};
  bool loop_holds_mu_ = false;  // read and written by the event thread only

  std::atomic<uint64_t> bytes_received_{0}, bytes_sent_{0}, chunks_verified_{0}, chunks_failed_{0},
      peers_dropped_{0}, delta_chunks_fast_{0}, delta_chunks_sha256_{0}, uploads_from_memory_{0},
      uploads_from_store_{0}, origin_bytes_{0};
  // SeedFrom's first reader failure (OK: none yet); reset by the next SeedFrom.
  mutable std::mutex source_mu_;
  Status source_failure_;
};

}  // namespace weightcast::node
