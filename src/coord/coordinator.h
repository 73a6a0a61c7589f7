// The coordinator: the fleet's control plane (docs/coordinator.md). It keeps membership
// (registrations and heartbeats), builds every node's peer list, keeps each channel's version
// log durably in a state directory, and answers heartbeats with what each node should fetch and
// whether to commit it. It never carries weight bytes.
//
// Threading: Serve runs a sweeper, a pusher and one event loop. A connection whose transport
// pushes frames (TCP: Connection::DeliverFrames) costs no thread: its frames and its end go to
// one event queue that the loop serves, and its parked heartbeat's deadline is a timer there.
// A connection that cannot push (the in-memory test transport, UCX) gets a thread of its own that
// waits in Receive. Both run the same per-frame code (OnFrame). Every request is handled under
// one lock (requests are small; a publish holds it for the fsyncs of its manifest
// and record). Stop is safe from any thread. Time comes from a net::Clock, so tests drive
// liveness with a FakeClock and call Sweep() themselves.
//
// Long polls (Heartbeat.wait_ms, docs/coordinator.md): a heartbeat with nothing new for its node
// is parked in the node's record instead of answered. Whatever changes a node's reply (a publish,
// a decision, a rollback, a rebuilt peer list) bumps a generation and wakes the pusher, which
// answers the parked heartbeats whose generation moved; the connection's loop (or thread) answers
// its parked heartbeat when wait_ms passes or when another request arrives on the connection. A
// parked heartbeat costs a few words in its Node; nothing runs per parked heartbeat while nothing
// changes.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "coord/coord.pb.h"
#include "coord/coordinator_metrics.h"
#include "coord/decide.h"
#include "coord/membership.h"
#include "coord/version_log.h"
#include "manifest/part_assembly.h"
#include "net/clock.h"
#include "net/transport.h"
#include "swarm/tuning.h"
#include "trust/signing_identity.h"
#include "trust/trust_anchor.h"

namespace weightcast::coord {

// Counters a daemon exports (the CLI turns them into Prometheus metrics). Safe to read from any
// thread while the coordinator runs.
struct CoordinatorCounters {
  std::atomic<uint64_t> heartbeats{0};
  std::atomic<uint64_t> registrations{0};
  std::atomic<uint64_t> versions_published{0};
  std::atomic<uint64_t> requests_failed{0};
  std::atomic<uint64_t> nodes_died{0};
  std::atomic<uint64_t> peer_list_builds{0};
  // Edges the peer graphs made, and edges between staying nodes they dropped to make room (the
  // connections a membership change costs the rest of the fleet).
  std::atomic<uint64_t> peer_edges_added{0};
  std::atomic<uint64_t> peer_edges_dropped{0};
  std::atomic<uint64_t> members_alive{0};      // a level, not a count
  std::atomic<uint64_t> members_dead{0};       // known, not alive, not left, not yet forgotten
  std::atomic<uint64_t> nodes_left{0};         // Leave requests taken
  std::atomic<uint64_t> heartbeats_held{0};    // parked long polls now (a level)
  std::atomic<uint64_t> heartbeats_pushed{0};  // parked long polls answered because of a change
  // Connections ended for sending too far ahead of the event loop (CoordinatorOptions::
  // loop_queue_frames / loop_queue_bytes).
  std::atomic<uint64_t> connections_flooding{0};
  // Requests by Envelope body case (coord.proto field number), for the "by type" counters.
  std::array<std::atomic<uint64_t>, 16> requests{};
};

struct CoordinatorOptions {
  std::filesystem::path state_dir;
  // Where the version log lives (coord/log_store.h): null, a FileLogStore in state_dir (the
  // embedded default); set (etcd's store), state_dir is not used. Called once by Open.
  std::function<Result<std::unique_ptr<LogStore>>()> open_store;
  std::string secret;  // the cluster secret: verifies published manifests
  // The cluster CA: manifests must be signed by a publisher it certifies for their channel.
  // Null: shared-secret development mode (manifests verify with the cluster secret).
  std::shared_ptr<const trust::TrustAnchor> trust_anchor;
  // With a trust anchor: the coordinator's own certificate and key, with the coordinator role.
  // It signs every commit and abort decision it logs (trust/decision_statement.h); agents take
  // no decision without its signature. Required with `trust_anchor`.
  std::shared_ptr<const trust::SigningIdentity> identity;
  net::Duration heartbeat_timeout = std::chrono::seconds(3);
  net::Duration heartbeat_interval{};  // zero: a third of heartbeat_timeout
  // Peer lists: the defaults are the ones `weightcast sim` runs (swarm/tuning.h).
  uint32_t degree = swarm::Tuning{}.degree;  // peer-list degree of agents (at least 2)
  // How many nodes fetch from an HTTP(S) origin at once, each a disjoint share of an origin
  // version's chunks (HeartbeatReply.origin_stripes): the fleet's cap on origin load.
  uint32_t origin_fetchers = 16;
  // A publisher's bound (it feeds more peers); zero or below `degree`: `degree`.
  uint32_t source_degree = swarm::Tuning{}.source_degree;
  double same_rack_fraction = swarm::Tuning{}.same_rack_fraction;
  uint64_t seed = 1;  // peer lists are a deterministic function of membership and seed
  // A dead node stays listed (alive = false) this long after its last heartbeat, then is
  // forgotten, so restarted nodes with fresh random ids do not pile up.
  net::Duration forget_after = std::chrono::minutes(10);
  const net::Clock* clock = nullptr;  // null: the real steady clock
  std::function<uint64_t()> unix_ms;  // wall clock for timestamps; null: system_clock
  std::shared_ptr<Decider> decider;   // null: EachDecider
  // Sharded publish (docs/sharded_publish.md): a version whose parts have not all arrived this
  // long after its first part is aborted, and its ranks are told why.
  net::Duration part_timeout = std::chrono::seconds(60);
  net::LogFn log = net::LogToStderr;  // one line per event worth an operator's attention
  // How far one connection served by the event loop may get ahead of it: frames, and their
  // bytes, received and not yet answered. A node sends a request and waits for its reply (a few
  // threads of one process may share a connection), so only a flood gets there; that
  // connection is ended, which bounds the loop's queue as TCP's window bounded a thread.
  uint32_t loop_queue_frames = 256;
  uint64_t loop_queue_bytes = uint64_t{64} << 20;
  // Where the per-channel metrics go (ChannelMetrics); must outlive the coordinator. Null: none.
  metrics::Registry* metrics = nullptr;
};

class Coordinator {
 public:
  // Validates the options and recovers the state directory (see VersionLog::Open). Blocks on
  // disk reads.
  static Result<std::unique_ptr<Coordinator>> Open(CoordinatorOptions options);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Accepts connections on `listener` and serves them on the event loop until Stop() (or the
  // listener fails). Blocks; returns after
  // every connection ended and every thread it started was joined. Call at most once.
  void Serve(net::Listener& listener);
  // Closes the listener and every connection; Serve returns. Idempotent; any thread.
  void Stop();

  // The testable core: answers one request that arrived on connection `session` from `peer`.
  // Never fails as a call: errors become an Envelope carrying Error. Never holds a heartbeat
  // (wait_ms is ignored; Serve holds them). Thread-safe.
  wire::Envelope Handle(uint64_t session, const net::PeerInfo& peer, const wire::Envelope& request);
  // The connection `session` ended (its node stays alive until its heartbeat times out; a
  // heartbeat it had parked is dropped).
  void Disconnected(uint64_t session);
  // Marks silent nodes dead, forgets long-dead ones, rebuilds peer lists when membership
  // changed and asks the Decider. Serve's sweeper calls it; tests call it after moving a fake
  // clock. Thread-safe.
  void Sweep();

  const CoordinatorCounters& counters() const { return counters_; }
  net::Duration heartbeat_interval() const { return options_.heartbeat_interval; }
  const VersionLog::Recovery& recovery() const;

 private:
  struct Node;
  explicit Coordinator(CoordinatorOptions options);

  Result<wire::RegisterReply> OnRegister(uint64_t session, const net::PeerInfo& peer,
                                         const wire::Register& request,
                                         std::optional<uint64_t>* replaced,
                                         std::vector<uint64_t>* fenced_sessions);

  // One writer per channel (docs/coordinator.md "Writers"), with mu_ held. What a
  // publisher's registration gets for one channel: the epoch it may publish with, and, when the
  // lease moves, the record to log and the node it fences.
  struct WriterGrant {
    std::string channel;
    uint64_t epoch = 0;
    std::optional<wire::ChannelWriter> record;  // to log: the epoch moved
    std::optional<PeerId> fenced;               // the live holder it takes the lease from
    std::vector<PeerId> fenced_ranks;           // a sharded holder: its other live ranks
    std::string how;                            // for the log line
  };
  Result<WriterGrant> GrantWriterLocked(const std::string& channel, const net::PeerInfo& peer,
                                        const wire::Register& request, net::TimePoint now) const;
  // Whether the holder of `writer` still holds the lease: registered for the channel and alive,
  // or, not seen since this coordinator started, still within its heartbeat timeout of the start.
  bool WriterLiveLocked(std::string_view channel, const wire::ChannelWriter& writer,
                        net::TimePoint now) const;
  // Refuses a publisher `node` that is not the holder of `channel`'s lease (a fenced one).
  Status CheckNotFencedLocked(std::string_view channel, PeerId node, uint64_t held_epoch) const;
  // What one request on a served connection gets: a reply to send now, or none (a heartbeat
  // parked for a long poll, or a wake); for a parked heartbeat, `*held_until` is its deadline.
  std::optional<wire::Envelope> Dispatch(uint64_t session, const net::PeerInfo& peer,
                                         const wire::Envelope& request, bool may_hold,
                                         std::optional<net::TimePoint>* held_until);
  // Null reply with OK: parked (only when `may_hold`) or a wake.
  Result<std::optional<wire::HeartbeatReply>> OnHeartbeat(
      uint64_t session, const net::PeerInfo& peer, uint64_t request_id,
      const wire::Heartbeat& request, bool may_hold, std::optional<net::TimePoint>* held_until);
  Result<wire::PublishReply> OnPublish(const net::PeerInfo& peer, const wire::Publish& request);
  // The parts of sharded versions (coordinator_parts.cc, docs/sharded_publish.md), with mu_
  // held. A part of `manifest`'s version from rank `part` of the channel's sharded writer.
  Result<wire::PublishReply> OnPublishPartLocked(const net::PeerInfo& peer,
                                                 const wire::Publish& request,
                                                 const Manifest& manifest, PartId part,
                                                 net::TimePoint now);
  // Logs a verified publish (assembled or not) and starts its rollout.
  Result<wire::VersionEntry> RecordPublishLocked(const VerifiedPublish& verified, PeerId from);
  // Aborts the assemblies whose deadline passed.
  void ExpirePartsLocked(net::TimePoint now);
  void AbortAssemblyLocked(const std::string& channel, std::string reason);
  // The sharded writer's side of GrantWriterLocked: `current` is the channel's lease, non-null;
  // the request or the lease is sharded.
  Result<WriterGrant> GrantShardedWriterLocked(const std::string& channel,
                                               const net::PeerInfo& peer,
                                               const wire::Register& request,
                                               const wire::ChannelWriter& current,
                                               net::TimePoint now) const;
  // After a registration's grants are logged: who holds each rank of a sharded lease.
  void NoteRanksLocked(const net::PeerInfo& peer, const wire::Register& request,
                       const WriterGrant& grant);
  Result<wire::ManifestReply> OnGetManifest(const wire::GetManifest& request);
  wire::FleetStatus OnGetStatus(const wire::GetStatus& request);
  Status OnLeave(uint64_t session, const net::PeerInfo& peer);
  Result<uint64_t> OnRollback(const net::PeerInfo& peer, const wire::Rollback& request);
  // Certificate mode: the operator's order that must come with a rollback (who signed it, for the
  // log). kUnauthenticated naming the reason.
  Result<std::string> CheckRollbackOrderLocked(const wire::Rollback& request);
  Status CheckRollbackReachableLocked(const std::string& channel, uint64_t target) const;

  // With mu_ held. Requests sweep at most once per sweep_period_ of clock time (the scan and a
  // peer-list rebuild are O(nodes)): a thousand nodes joining at once cost a few rebuilds, not a
  // thousand. Sweep() always sweeps.
  void MaybeSweepLocked(net::TimePoint now);
  void SweepLocked(net::TimePoint now);
  void UpdatePeerListsLocked();
  void DecideLocked(const std::string& channel, net::TimePoint now);
  // Member counts, and per channel the failed, lagging and dead agents (ChannelMetrics).
  void CountMembersLocked();
  uint64_t UnixMs() const;

  // Long polls, with mu_ held. The generation of node's reply: the newest change among the
  // channels it follows, its peer list and its registration.
  uint64_t NodeGenerationLocked(const Node& node) const;
  wire::HeartbeatReply HeartbeatReplyLocked(const Node& node) const;
  // Something in some replies changed: the pusher looks at the parked heartbeats.
  // A heartbeat's banned_peers: handed to the membership core, logged when they change.
  void NoteBansLocked(PeerId reporter, const wire::Heartbeat& request);
  void ChannelChangedLocked(const std::string& channel);
  // Unparks node's heartbeat and builds its reply.
  wire::Envelope UnparkLocked(Node& node);
  // The connection thread's side: answers the heartbeat parked by `node` on `session` when
  // `force` or its deadline passed; `*held_until` is left set while it stays parked.
  std::optional<wire::Envelope> TakeParked(uint64_t session, PeerId node, bool force,
                                           std::optional<net::TimePoint>* held_until);
  // Sends a reply from a thread other than the connection's own (the pusher); a connection
  // that cannot take it is closed.
  void SendToSession(uint64_t session, const wire::Envelope& reply);
  void PushLoop();
  // What the event loop does with one frame of `session`: answers a parked heartbeat first when one
  // is held, then the request. `*held_until` is the deadline of the heartbeat this connection has
  // parked. False: the connection must be closed (a bad frame, or a reply that could not be
  // queued within `send_timeout`).
  bool OnFrame(uint64_t session, const net::PeerInfo& peer, net::Connection& connection,
               const net::Frame& frame, std::optional<net::TimePoint>* held_until,
               net::Duration send_timeout);
  // `*held_until` passed (on clock_): answers the parked heartbeat, or leaves `*held_until` at a
  // later deadline. False: the reply could not be queued.
  bool OnHeldDeadline(uint64_t session, const net::PeerInfo& peer, net::Connection& connection,
                      std::optional<net::TimePoint>* held_until, net::Duration send_timeout);

  // The event loop (connections that push). The transport's handler only queues; the loop
  // thread answers. Events of one session keep their order (one queue, one thread).
  struct LoopEvent {
    uint64_t session = 0;
    std::shared_ptr<net::Connection> started;  // set: the session begins (before its frames)
    std::optional<Result<net::Frame>> frame;   // a frame, or (not OK) the connection's end
  };
  struct LoopSession {
    std::shared_ptr<net::Connection> connection;
    net::PeerInfo peer;
    std::optional<net::TimePoint> held_until;  // a timer in loop_timers_ while set
    bool closing = false;                      // closed by the loop: later frames are dropped
  };
  void PushEvent(LoopEvent event);
  void EventLoop();
  // Serves `connection` on the loop; false: it cannot push (serve it on a thread).
  bool ServeOnLoop(uint64_t session, const std::shared_ptr<net::Connection>& connection);

  void CloseSession(uint64_t session);

  CoordinatorOptions options_;
  const net::Clock& clock_;
  const net::Duration sweep_period_;  // the smaller of heartbeat_interval / 4 and 100 ms
  const net::TimePoint started_;      // writers logged before a restart get a timeout from here
  CoordinatorCounters counters_;

  mutable std::mutex mu_;
  std::unique_ptr<VersionLog> log_;
  ChannelMetrics channel_metrics_;
  std::map<PeerId, std::unique_ptr<Node>> nodes_;
  Membership membership_;  // who is alive, and the peer graphs (the pure core of membership)
  net::TimePoint last_sweep_{};
  bool membership_changed_ = true;  // peer lists must be rebuilt before they are served
  // Membership::Settling as of the last registration or sweep: replies say keep_peers.
  bool settling_ = false;
  std::map<PeerId, std::vector<wire::PeerEntry>> peer_lists_;
  // Each granted node's share of origin versions (HeartbeatReply.origin_stripe), drawn with the
  // peer lists.
  struct OriginGrant {
    uint32_t stripe = 0;
    uint32_t stripes = 0;
    bool operator==(const OriginGrant&) const = default;
  };
  std::map<PeerId, OriginGrant> origin_grants_;
  std::map<PeerId, OriginGrant> OriginGrantsLocked() const;
  std::set<std::string> channels_to_decide_;
  std::string last_decision_failure_;  // the last decision the store refused, logged once
  // Sharded publish. The version being assembled per channel (at most one), the reasons of the
  // latest aborted assemblies (a rank asking again learns why), and which node holds each rank
  // of a channel's sharded writer lease (not logged: ranks register again after a restart).
  std::map<std::string, PartAssembly, std::less<>> assemblies_;
  std::map<std::string, std::map<uint64_t, std::string>, std::less<>> aborted_parts_;
  // Nonces of the operators' rollback orders taken, with their issue time (unix ms): an order is
  // taken once. Entries leave once their order is too old to be taken anyway.
  std::map<std::string, int64_t, std::less<>> rollback_nonces_;
  std::map<std::string, std::map<uint32_t, PeerId>, std::less<>> rank_holders_;
  // Long polls. Invariant: a Node's generation values never exceed generation_, and each change
  // that alters a node's reply takes a new value from it.
  uint64_t generation_ = 0;
  std::map<std::string, uint64_t, std::less<>> channel_generation_;
  bool push_pending_ = false;  // a generation moved since the pusher last looked
  bool push_stop_ = false;
  std::condition_variable push_cv_;  // with mu_

  // Serve's connections, so that Stop and a replacing registration can close them.
  std::mutex sessions_mu_;
  std::map<uint64_t, std::shared_ptr<net::Connection>> sessions_;
  uint64_t next_session_ = 1;
  net::Listener* listener_ = nullptr;
  bool stopping_ = false;
  std::condition_variable stop_cv_;

  // The event loop's queue (any thread pushes; the loop takes).
  std::mutex loop_mu_;
  std::condition_variable loop_cv_;
  std::deque<LoopEvent> loop_events_;
  // Frames of each session queued and not yet taken by the loop (options_.loop_queue_frames).
  struct Queued {
    uint32_t frames = 0;
    uint64_t bytes = 0;
    bool overflowed = false;  // its end is queued; later frames are dropped
  };
  std::map<uint64_t, Queued> loop_queued_;
  bool loop_stop_ = false;  // Serve closed everything: end once every session ended
};

}  // namespace weightcast::coord
