// The per-node swarm scheduler: a sans-I/O state machine that decides which chunk to ask of
// which peer, and which request to serve next. It never touches sockets, clocks, threads or
// files. The owner (an agent with real sockets, or the simulator with a virtual clock) feeds it
// events and carries out the actions it returns. docs/swarm.md describes the policy.
//
// Not thread-safe: one owner calls it from one thread (or strand). Every event method returns a
// span over the actions it produced; the span stays valid until the next call on this object.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "swarm/chunk_set.h"

namespace weightcast::swarm {

// Time is a value the owner passes in (nanoseconds since any fixed epoch of its choosing).
using Time = std::chrono::nanoseconds;
using Duration = std::chrono::nanoseconds;

enum class DropReason : uint8_t {
  kNone = 0,
  kBadChunk,       // a chunk from this peer failed its hash check
  kTimeouts,       // this peer let too many requests in a row overrun their deadline
  kProtocolError,  // the peer asked for or announced a chunk outside the snapshot
};
std::string_view DropReasonName(DropReason reason);

enum class ActionKind : uint8_t {
  kSendRequest,    // ask `peer` for `chunk`
  kCancelRequest,  // tell `peer` we no longer want `chunk` (arrived elsewhere, or reissued)
  kSendChunk,      // upload `chunk` to `peer`; report the end with OnUploadDone
  kStopUpload,     // abort the upload of `chunk` to `peer` (it cancelled); no OnUploadDone needed
  kRejectRequest,  // tell `peer` we will not serve `chunk` now (queue full, or spreading first)
  kAnnounceHave,   // tell every connected peer we now hold `chunk` (peer is unset)
  kDropPeer,       // disconnect `peer` for `reason`; the scheduler has already forgotten it
  kComplete,       // every wanted chunk is verified (emitted once)
};
std::string_view ActionKindName(ActionKind kind);

// What a connected peer is to this node. A source (a spreading seed: a whole-version publisher,
// or a rank seeding its part) serves each chunk once and holds repeats back (spread_first), so
// a node does not ask a source for a chunk one of its receiver peers holds: it gets it there,
// and the source's upload stays the fleet's only copy of what nobody else has.
enum class PeerRole : uint8_t {
  kReceiver = 0,
  kSource,
};

struct Action {
  ActionKind kind;
  PeerId peer;
  ChunkIndex chunk;
  DropReason reason = DropReason::kNone;
  friend bool operator==(const Action&, const Action&) = default;
};

struct SchedulerOptions {
  uint32_t chunk_count = 0;
  // Chunks this node holds (verified) at start; the source holds them all.
  ChunkSet initial_have;
  // Chunks this node wants; empty means all of them. A node serves whatever it has, wanted or not.
  ChunkSet want;
  // Requests in flight to one peer (pipelining), and in flight in total (bounded buffers).
  uint32_t window_per_peer = 2;
  uint32_t max_outstanding = 64;
  // Concurrent uploads (slots) and queued requests beyond them; requests past both are rejected.
  uint32_t upload_slots = 4;
  uint32_t serve_queue_limit = 32;
  // Run at least one upload slot per connected peer, whatever upload_slots says. With more
  // peers than slots (a late joiner spliced in, a source's larger degree) some request always waits
  // in the queue for a whole upload to end, and what that peer would forward waits with it: at 200
  // nodes, degree 25 with 24 slots put the median receiver 1.9% behind degree 24 (docs/swarm.md,
  // "Serving"). On in swarm::Tuning; SchedulerOptions alone leaves it off.
  bool slot_per_peer = false;
  // A request not answered by then is cancelled and asked of another peer.
  Duration request_timeout = std::chrono::seconds(30);
  // After this many timeouts in a row from one peer, it is dropped.
  uint32_t max_consecutive_timeouts = 3;
  // A chunk refused by a peer is not asked of that peer again for this long.
  Duration refusal_backoff = std::chrono::seconds(2);
  // In endgame (every missing chunk already requested) a chunk may be asked of this many peers.
  uint32_t endgame_max_requests = 2;
  // Adaptive per-peer window. Each peer's window starts at window_per_peer and then follows how
  // fast that peer answers: a request slot at a peer yields one chunk per (arrival - request)
  // seconds, so the window is window_per_peer x (the peer's speed / the mean speed of the
  // connected peers), rounded, in [1, max_window_per_peer]. Requests move from slow or
  // overloaded peers to fast ones; max_outstanding still bounds the total. A timeout resets the
  // peer's window to 1.
  bool adaptive_window = false;
  uint32_t max_window_per_peer = 4;
  // Source behaviour: refuse requests for chunks already sent once while some chunk has never
  // been sent, so the source's upload spreads distinct chunks (each out once before any repeat).
  // After that first round, a repeat is refused to an asking peer for a while (the longer of
  // refusal_backoff and twice the source's upload time: smoothed over completed uploads, at
  // least the age of the oldest running one; counted from the first refusal of that chunk to
  // that peer): the peer we sent it to passes it on, and the asker gets it
  // there. With fewer chunks than peers the first round ends early, and without this the source
  // would send each chunk to most of the fleet. After the hold (none of the asker's own peers
  // had it to give) it is served.
  bool spread_first = false;
  // The chunks that first round covers; empty means all of them. A chunk outside it never keeps
  // the round open: a delta source names the chunks that have payloads, since a `same` chunk is
  // never asked for and, counted, would keep the round open for good (every repeat refused).
  ChunkSet spread;
  // Chunks wanted first, in this order (a streaming reader's, docs/streaming.md): a pick takes
  // the rarest chunk the peer holds among the next kPreferredWindow chunks of this order that
  // this node still needs, and only when the peer holds none of them the rarest of the rest.
  // Empty: rarest first over all chunks.
  std::vector<ChunkIndex> preferred;
  uint64_t seed = 1;
};

// Counters for tests, metrics and the simulator's report.
struct SchedulerStats {
  uint64_t requests_sent = 0;
  uint64_t duplicate_requests = 0;  // endgame requests for a chunk already requested elsewhere
  uint64_t cancels_sent = 0;
  uint64_t timeouts = 0;
  uint64_t chunks_verified = 0;
  uint64_t chunks_failed = 0;
  uint64_t chunks_uploaded = 0;
  uint64_t requests_rejected = 0;
};

class Scheduler {
 public:
  static Result<Scheduler> Create(SchedulerOptions options);

  std::span<const Action> OnPeerConnected(Time now, PeerId peer, const ChunkSet& peer_has,
                                          PeerRole role = PeerRole::kReceiver);
  std::span<const Action> OnPeerDisconnected(Time now, PeerId peer);
  // `peer` announces it holds a verified `chunk`. `slot_hint`: slot(peer) when the caller keeps
  // it (saves the lookup; any other value is looked up).
  std::span<const Action> OnHave(Time now, PeerId peer, ChunkIndex chunk,
                                 uint32_t slot_hint = UINT32_MAX);
  // `chunk` arrived from `from` and matched its hash (the owner stored it).
  std::span<const Action> OnChunkVerified(Time now, ChunkIndex chunk, PeerId from);
  // `chunk` arrived from `from` and did not match its hash: the peer is dropped, the chunk
  // asked of someone else.
  std::span<const Action> OnChunkFailed(Time now, ChunkIndex chunk, PeerId from);
  // `peer` refused our request for `chunk`.
  std::span<const Action> OnRequestRejected(Time now, PeerId peer, ChunkIndex chunk);
  // `peer` asks us for `chunk`.
  std::span<const Action> OnRequestReceived(Time now, PeerId peer, ChunkIndex chunk);
  // `peer` no longer wants `chunk` from us.
  std::span<const Action> OnCancelReceived(Time now, PeerId peer, ChunkIndex chunk);
  // The upload of `chunk` to `peer` finished (or failed); its slot is free.
  std::span<const Action> OnUploadDone(Time now, PeerId peer, ChunkIndex chunk);
  // Periodic tick: reissues requests past their deadline.
  std::span<const Action> OnTimer(Time now);

  // Replaces SchedulerOptions::preferred (requests in flight stay).
  std::span<const Action> SetPreferred(Time now, std::span<const ChunkIndex> order);

  const ChunkSet& have() const { return have_; }
  bool complete() const { return missing_ == 0; }
  uint32_t missing() const { return missing_; }
  bool in_endgame() const { return in_endgame_; }
  const SchedulerStats& stats() const { return stats_; }
  // Request to verification of the chunk the last OnChunkVerified call accepted from the peer
  // that had been asked for it; negative when that call matched no request of that peer (a
  // chunk nobody asked for, or a verification after the request was reissued elsewhere).
  Duration last_fetch_time() const { return last_fetch_time_; }
  // How many connected peers hold `chunk` (what rarest-first ranks by).
  uint32_t availability(ChunkIndex chunk) const { return Availability(chunk.value()); }
  // How many connected receiver peers (PeerRole::kReceiver) hold `chunk`: while any does, the
  // chunk is not asked of a source.
  uint32_t receiver_holders(ChunkIndex chunk) const;
  // How many times this node started uploading `chunk`.
  uint32_t times_sent(ChunkIndex chunk) const { return sent_count_[chunk.value()]; }
  size_t outstanding_requests() const { return outstanding_; }
  size_t connected_peers() const { return live_peers_; }
  // Uploads in progress and requests queued behind them.
  size_t uploads_active() const { return uploading_.size(); }
  size_t serve_queue_size() const { return serve_queue_.size(); }
  // The current request window of a connected peer (0 when not connected).
  uint32_t window(PeerId peer) const;
  // The slot of connected `peer` (fixed while it stays connected), or nullopt.
  std::optional<uint32_t> slot(PeerId peer) const;
  // Which slots hold `chunk`: bit s % 64 of word s / 64, holder_words() words. Chunk-major, so
  // that the peer protocol finds which of its peers lack a chunk it announces in one word, not in
  // every peer's have-set.
  const uint64_t* holder_slots(ChunkIndex chunk) const {
    return &holders_[size_t{chunk.value()} * holder_words_];
  }
  uint32_t holder_words() const { return holder_words_; }
  // The have-set kept of the peer in `slot`, while that slot is still `peer`'s (nullopt
  // otherwise). The peer protocol reads a registered peer's bits here instead of keeping a second
  // copy: one record per peer, so a HAVE sets one bit (the simulator delivers N x C x degree).
  std::optional<ChunkSetView> peer_has(uint32_t slot, PeerId peer) const {
    if (slot >= peers_.size() || !peers_[slot].live || peers_[slot].id != peer) return std::nullopt;
    return ChunkSetView(HasWords(slot), n_);
  }
  // The earliest deadline of an outstanding request, or Time::max() when none; an owner can
  // arm its timer for it instead of ticking.
  Time next_deadline() const;

 private:
  struct Request {
    ChunkIndex chunk;
    Time deadline;
    Time sent;
  };
  struct Peer {
    PeerId id;
    bool live = false;
    bool source = false;  // PeerRole::kSource (its have-set: HasWords of its slot)
    ChunkSet refused;
    Time refused_until{0};
    // spread_first: when a repeat of each chunk was first refused to this peer (Time::min():
    // never); empty until the first such refusal.
    std::vector<Time> held_since;
    std::vector<Request> inflight;
    uint32_t consecutive_timeouts = 0;
    uint32_t window = 1;
    // Smoothed seconds from request to arrival (0: no sample yet); its inverse is the speed.
    double service_s = 0;
  };
  struct ServeItem {
    PeerId peer;
    ChunkIndex chunk;
    uint64_t arrival;
    Time started{0};  // when its upload began (uploading_ only)
  };

  explicit Scheduler(SchedulerOptions options);
  std::span<const Action> Flush() { return {actions_.data(), actions_.size()}; }
  void Emit(ActionKind kind, PeerId peer, ChunkIndex chunk, DropReason r = DropReason::kNone) {
    actions_.push_back(Action{kind, peer, chunk, r});
  }
  Peer* FindPeer(PeerId id);
  size_t SlotOf(const Peer& p) const { return static_cast<size_t>(&p - peers_.data()); }
  // The have-set of the peer in `slot`: set_words_ words of peer_has_.
  uint64_t* HasWords(size_t slot) { return peer_has_.data() + slot * set_words_; }
  const uint64_t* HasWords(size_t slot) const { return peer_has_.data() + slot * set_words_; }
  bool Needed(ChunkIndex c) const { return need_.Contains(c); }
  bool Requested(Peer& p, ChunkIndex c) const;
  void AddRequest(Time now, Peer& p, ChunkIndex c);
  // Removes the request for `c` from `p`'s in-flight list; returns whether it was there.
  bool RemoveRequest(Peer& p, ChunkIndex c);
  // Fills `p`'s free window with rarest-first picks.
  void Fill(Time now, Peer& p);
  // Fills every peer's window, starting at a random peer so no peer is always first.
  void FillAll(Time now);
  // Picks a chunk `p` has that we still need and may ask it for; ChunkIndex(chunk_count) if none.
  // Of a source, only chunks no receiver peer holds.
  ChunkIndex Pick(Peer& p, bool endgame);
  void ForgetPeer(Time now, Peer& p);
  // Records `p`'s holding of `c` (delta +1) or its end (-1) in holders_ and receiver_held_.
  void CountHolder(const Peer& p, uint32_t c, int delta);
  uint32_t Availability(uint32_t c) const {
    uint32_t a = 0;
    for (uint32_t w = 0; w < holder_words_; ++w) a += CountBits(holders_[c * holder_words_ + w]);
    return a;
  }
  // Widens holders_ and source_slots_ to `words` words (more than 64 * holder_words_ slots).
  void WidenHolders(uint32_t words);
  void DropPeer(Time now, Peer& p, DropReason reason);
  void UpdateEndgame();
  // Adaptive window: records a delivery from `p` of a request sent at `sent`, resizes its window.
  void RecordDelivery(Time now, Peer& p, Time sent);
  void TryServe(Time now);
  // Uploads that may run at once: upload_slots (with slot_per_peer, at least the peers).
  size_t UploadSlots() const {
    return options_.slot_per_peer ? std::max<size_t>(options_.upload_slots, live_peers_)
                                  : options_.upload_slots;
  }
  bool FirstRoundOpen() const { return never_sent_ > 0; }
  // spread_first: whether `peer`'s request for `chunk` is refused as a repeat (see the option).
  // Records the first refusal after the first round.
  bool HoldRepeat(Time now, PeerId peer, ChunkIndex chunk);

  SchedulerOptions options_;
  uint32_t n_;
  ChunkSet have_;
  // The preferred order's chunks still needed are among order[preferred_from_, ...): the pick
  // window starts there.
  size_t preferred_from_ = 0;
  // The rarest chunk of the preferred window that `has` and `candidate` allow (n_: none).
  template <typename Candidate>
  ChunkIndex PickPreferred(const uint64_t* has, const Candidate& candidate);
  ChunkSet need_;              // wanted and not yet verified
  ChunkSet need_unrequested_;  // needed and asked of nobody right now
  Duration last_fetch_time_{-1};
  uint32_t missing_ = 0;
  bool in_endgame_ = false;
  bool complete_emitted_ = false;
  // Per chunk, holder_words_ words: the slots whose has-set holds it (holder_slots). A chunk's
  // availability is the count of its bits, its receiver holders those outside source_slots_: a
  // HAVE touches one word here, not three counters.
  std::vector<uint64_t> holders_;
  std::vector<uint64_t> source_slots_;  // holder_words_ words: the slots of PeerRole::kSource
  uint32_t holder_words_ = 1;
  ChunkSet receiver_held_;              // the chunks with receiver holders
  std::vector<uint8_t> request_count_;  // outstanding requests per chunk
  size_t outstanding_ = 0;
  std::vector<Peer> peers_;
  // Every peer's have-set, set_words_ words per slot, in one array: a HAVE's word is found from
  // the slot alone, so its cache miss overlaps the one on the peer's record instead of waiting
  // for a pointer kept there (the simulator delivers N x C x degree HAVEs).
  uint32_t set_words_;
  std::vector<uint64_t> peer_has_;
  std::vector<uint32_t> free_slots_;
  // Slot of each connected peer, parallel to peers_ (a free slot's entry is stale;
  // Peer::live tells). A linear scan
  // over a few dozen ids beats hashing on the per-message path.
  std::vector<PeerId> peer_ids_;
  size_t live_peers_ = 0;
  std::vector<ServeItem> serve_queue_;
  std::vector<ServeItem> uploading_;
  std::vector<uint32_t> sent_count_;
  uint32_t never_sent_ = 0;  // chunks in options_.spread we hold and never started uploading
  double upload_s_ = 0;      // smoothed seconds from kSendChunk to OnUploadDone (0: none yet)
  uint64_t arrivals_ = 0;
  std::mt19937_64 rng_;
  std::vector<Action> actions_;
  std::vector<uint32_t> pick_counts_;  // Pick's candidates per word (kept: no allocation)
  SchedulerStats stats_;
};

}  // namespace weightcast::swarm
