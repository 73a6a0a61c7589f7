// The peer protocol of one node for one channel (docs/agent.md, "The peer protocol"): a sans-I/O
// state machine around swarm::Scheduler that holds everything a node decides about its peers:
// what each peer said it holds (have-sets, HAVEs), which peers need a HAVE, the requests it sent
// and the ones it serves, the target's epochs (one scheduler each) and the fall-back from delta
// payloads to whole chunks, the scaling of windows and slots for small items, and bans.
//
// It never touches sockets, clocks, threads or files. Its owner (node::SwarmNode with real
// connections, or the simulator with a virtual clock) passes in parsed messages, chunk arrivals,
// check results and time, and carries out the effects it returns: send a message, upload or stop
// an upload, close a peer, and so on. The bytes themselves (reading, hashing, decoding, storing)
// stay with the owner.
//
// Not thread-safe: one owner calls it from one thread or under one lock. Every event method
// returns a span over the effects it produced, valid until the next call on this object.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "swarm/messages.h"
#include "swarm/scheduler.h"
#include "swarm/tuning.h"

namespace weightcast::swarm {

struct PeerProtocolOptions {
  PeerId node_id;
  // The node seeds (a publisher): its schedulers take the source's upload slots.
  bool source = false;
  Tuning tuning{};
  // A peer that sent a bad chunk is not taken back for this long (the coordinator would list it
  // again at the next heartbeat).
  Duration ban_time = std::chrono::seconds(120);
};

// A version the node fetches or seeds, as the protocol needs to know it.
struct TargetSpec {
  Version version;
  uint32_t chunk_count = 0;
  std::vector<bool> whole;    // chunks held, verified (and served)
  std::vector<bool> payload;  // delta payloads held (and served)
  std::vector<bool> want;     // chunks wanted; a node serves what it holds, wanted or not
  // Seeds this version (a publisher, or a rank seeding its part): spreads distinct chunks first
  // and holds repeats back (SchedulerOptions::spread_first).
  bool source = false;
  // Fetches delta payloads (decoded onto the local base) instead of whole chunks.
  bool fetch_payloads = false;
  // For the item scaling: the version's size and its largest chunk, and per chunk the size of
  // its delta payload (0: a chunk equal to the base's, never sent); empty for a full version.
  uint64_t total_bytes = 0;
  uint64_t chunk_bytes = 0;
  std::vector<uint64_t> payload_bytes;
  uint64_t seed = 1;  // the schedulers' random seed
  // Chunks wanted first, in this order (SchedulerOptions::preferred); empty: none.
  std::vector<ChunkIndex> preferred;
};

enum class EffectKind : uint8_t {
  kSend,  // send `message` to `peer`
  // The node now holds `chunk` (`flags`: kHaveWhole | kHavePayload): send a kHave with those
  // flags to every connected peer for which WantsHave(peer, chunk, flags). One effect for all
  // peers, so that the simulator fans it out at delivery.
  kAnnounce,
  // Upload item `chunk` (`item`: whole chunk or payload) to `peer`; report its end with
  // OnUploadDone(epoch, ...).
  kUpload,
  kStopUpload,  // drop the queued or running upload of `chunk` (of `epoch`) to `peer`
  // Disconnect `peer` (`why`; `ban`: it sent bad data and is banned). Already forgotten here: no
  // OnPeerDisconnected follows.
  kClose,
  // The target (re)started as `epoch` (effects of the new epoch follow). Check results and
  // upload ends of older epochs are ignored from now on; the owner must make sure no worker of
  // an older epoch writes to the staging any more (its blocks could land on a chunk the new
  // epoch verifies).
  kNewEpoch,
  // Delta payloads did not decode onto the base: the target is fetched as whole chunks (before
  // the kNewEpoch of the restart).
  kFetchWhole,
  kComplete,  // every wanted chunk is verified (once per epoch that completes)
  // A chunk verified from the peer it was asked of, `took` after the request (a metric).
  kFetchTime,
  kFailed,  // the target cannot complete: `why` (a store error); it stays failed
};

struct Effect {
  EffectKind kind = EffectKind::kSend;
  PeerId peer;
  ChunkIndex chunk;
  PayloadKind item = PayloadKind::kRaw;
  uint8_t flags = 0;
  bool ban = false;
  uint64_t epoch = 0;
  Duration took{};
  Message message{};
  std::string why{};
};

// What to do with a chunk frame that arrived (OnChunkArrived).
struct Arrival {
  bool check = false;  // check it (and report with OnChunkChecked); false: drop it unread
  uint64_t epoch = 0;
  PayloadKind item = PayloadKind::kRaw;
};

// How checking a received item ended (OnChunkChecked).
enum class CheckOutcome : uint8_t {
  kOk,  // matched the manifest and is stored: the node holds the chunk
  // An authentic payload kept as it is, not decoded (a node whose sampler patches its live
  // tensors from the payloads): the node holds the payload, not the chunk.
  kPayloadKept,
  kCorrupt,      // did not match its manifest hash: the sender's fault
  kUndecodable,  // an authentic payload did not decode onto the local base
  kStoreError,   // ours (disk): the target fails
};

class PeerProtocol {
 public:
  explicit PeerProtocol(PeerProtocolOptions options);

  // ---- peers ----
  // Whether a connection from or to `peer` is taken (not this node, not banned).
  bool Admits(Time now, PeerId peer) const;
  // The peers banned at `now` (for bad data, ban_time each), by id: what an agent reports to the
  // coordinator, which keeps it apart from them in the peer graph.
  std::vector<PeerId> Banned(Time now) const;
  // A connection to `peer` is up (a reconnect: call OnPeerDisconnected for the old one first).
  std::span<const Effect> OnPeerConnected(Time now, PeerId peer);
  std::span<const Effect> OnPeerDisconnected(Time now, PeerId peer);
  // A control message from `peer` (serve/fetch messages are ignored).
  std::span<const Effect> OnMessage(Time now, PeerId peer, const Message& message);
  // `peer` sent bytes that are not a message: it is closed.
  std::span<const Effect> OnMalformed(Time now, PeerId peer, const std::string& why);

  // ---- chunks ----
  // A chunk frame from `peer` for `version`, `encoding` its ChunkHeader::encoding: whether it
  // answers a request of the current epoch and is to be checked.
  Arrival OnChunkArrived(Time now, PeerId peer, Version version, ChunkIndex chunk,
                         uint8_t encoding);
  // The end of checking an item OnChunkArrived handed out.
  std::span<const Effect> OnChunkChecked(Time now, uint64_t epoch, PeerId from, ChunkIndex chunk,
                                         CheckOutcome outcome, const std::string& why);
  // The upload of `chunk` to `peer` (an effect of `epoch`) ended, sent or not.
  std::span<const Effect> OnUploadDone(Time now, uint64_t epoch, PeerId peer, ChunkIndex chunk);
  // Periodic tick (a few per second): reissues requests past their deadline.
  std::span<const Effect> OnTick(Time now);

  // ---- the target ----
  // Makes `spec` the target (replacing any): a new scheduler, have-sets to every peer.
  Result<std::span<const Effect>> SetTarget(Time now, TargetSpec spec);
  // No target afterwards; peers stay connected.
  void LeaveTarget();
  // The target's chunks are wanted first in `order` from now on (TargetSpec::preferred); nothing
  // without a target.
  std::span<const Effect> Prefer(Time now, std::vector<ChunkIndex> order);

  bool has_target() const { return target_.has_value(); }
  Version target_version() const { return target_ ? target_->spec.version : Version(); }
  // The target's chunks held, payloads held, chunks wanted (empty without a target).
  const std::vector<bool>& whole() const { return target_ ? target_->spec.whole : kNoBits; }
  const std::vector<bool>& payload() const { return target_ ? target_->spec.payload : kNoBits; }
  const std::vector<bool>& want() const { return target_ ? target_->spec.want : kNoBits; }
  bool fetching_payloads() const { return target_ && target_->spec.fetch_payloads; }
  bool complete() const { return target_ && target_->complete; }
  const std::string& error() const { return error_; }
  uint64_t epoch() const { return target_ ? target_->epoch : 0; }
  // The scheduler's requests in flight per peer, after the item scaling (for progress).
  uint32_t window() const { return target_ ? target_->window : 0; }
  const Scheduler* scheduler() const {
    return target_ && target_->scheduler ? &*target_->scheduler : nullptr;
  }
  uint64_t refusals_received() const { return refusals_received_; }
  size_t peer_count() const { return peer_ids_.size(); }

  // Whether `peer` needs a kHave of `chunk` with `flags`: a peer that said it needs none for
  // chunks it holds (kHaveSkipHeld) and holds what is announced is skipped. About half the HAVEs
  // of a step go unsent; a source never sets the flag (its EveryChunkReplicated counts them).
  bool WantsHave(PeerId peer, ChunkIndex chunk, uint8_t flags) const;
  // Calls `f(PeerId)` for every connected peer that WantsHave(peer, chunk, flags), in id order
  // (one pass over the peer states, for a kAnnounce fan-out).
  template <typename F>
  void ForEachHaveRecipient(ChunkIndex chunk, uint8_t flags, F&& f) const {
    // A whole chunk announced while the scheduler records whole chunks: whether a registered
    // peer that skips held chunks holds it is one bit of the scheduler's holder word of the
    // chunk (the peers' own states and have-sets stay untouched; the simulator fans out
    // N x C HAVEs). Anything else asks HoldsAnnounced.
    const uint64_t* held = nullptr;
    if (target_ && target_->scheduler && !target_->scheduler_fetches_payloads &&
        (flags & kHavePayload) == 0 && chunk.value() < target_->spec.chunk_count) {
      held = target_->scheduler->holder_slots(chunk);
    }
    for (size_t k = 0; k < peer_ids_.size(); ++k) {
      const PeerId id(peer_ids_[k]);
      const uint32_t s = suppress_slots_[k];
      const bool skip = held != nullptr && s != kNoSlot
                            ? ((held[s / 64] >> (s % 64)) & 1) != 0
                            : HoldsAnnounced(id, peer_states_[k], chunk.value(), flags);
      if (!skip) f(id);
    }
  }
  // Whether every wanted chunk of the target (and every payload held, while some peer fetches
  // payloads) is held by at least one connected peer.
  bool EveryChunkReplicated() const;

 private:
  struct PeerState {
    // What the peer said it holds, of its own target version.
    Version remote_version;
    bool fetching_payloads = false;
    bool skips_held = false;
    bool source = false;
    // Its chunks and payloads, of remote_version. While it is registered, the bits of the kind
    // the target fetches are the scheduler's have-set of it (Delegated), and these go stale
    // until Reclaim copies them back.
    std::vector<bool> whole, payload;
    uint64_t registered_epoch = 0;  // the epoch whose scheduler knows this peer (0: none)
    uint32_t slot = 0;              // its slot in that scheduler (Scheduler::slot)
    // Requests we sent it and it has not answered, and requests of its that we serve (by kind).
    // Flat lists: a window and a serve queue long (a few, up to hundreds for payloads).
    std::vector<uint32_t> requested;
    std::vector<std::pair<uint32_t, PayloadKind>> serving;
    bool Requested(uint32_t chunk) const;
    bool EraseRequested(uint32_t chunk);
    // The kind `chunk` is served as (kRaw when not asked for), and forgets the request.
    PayloadKind TakeServing(uint32_t chunk);
    const std::pair<uint32_t, PayloadKind>* FindServing(uint32_t chunk) const;
  };
  // No default member initializers: clang (14) then finds std::optional<Target> not
  // constructible inside this class. target_.emplace() value-initializes (zeroes) the scalars.
  struct Target {
    TargetSpec spec;
    std::optional<Scheduler> scheduler;
    // The kind that scheduler fetches (payloads or whole chunks): the kind of the peers' bits
    // its have-sets record. spec.fetch_payloads changes (the fall-back) before it is replaced.
    bool scheduler_fetches_payloads;
    uint64_t epoch;
    std::vector<bool> checking;  // arrived and being checked
    bool complete;
    uint32_t window;
  };

  std::span<const Effect> Flush() { return {effects_.data(), effects_.size()}; }
  Effect& Emit(EffectKind kind);
  void Send(PeerId peer, Message message);
  void SendHaveSet(PeerId id);
  PayloadKind FetchKind() const {
    return target_->spec.fetch_payloads ? PayloadKind::kCodec : PayloadKind::kRaw;
  }
  bool OnTarget(Version v) const { return target_ && target_->spec.version == v; }
  bool Registered(const PeerState& p) const {
    return target_ && p.registered_epoch == target_->epoch;
  }
  PeerState* Find(PeerId id);
  const PeerState* Find(PeerId id) const;
  // Whether `p` asked to skip HAVEs of held chunks and is known to hold what is announced.
  bool HoldsAnnounced(PeerId id, const PeerState& p, uint32_t chunk, uint8_t flags) const {
    return p.skips_held && target_ && p.remote_version == target_->spec.version &&
           chunk < p.whole.size() && Holds(id, p, chunk, /*payload=*/false) &&
           ((flags & kHavePayload) == 0 || Holds(id, p, chunk, /*payload=*/true));
  }
  // Whether `p` (`id`) holds `chunk` whole (payload false) or its payload.
  bool Holds(PeerId id, const PeerState& p, uint32_t chunk, bool payload) const {
    if (const auto kept = Delegated(id, p, payload)) return kept->Contains(ChunkIndex(chunk));
    return payload ? p.payload[chunk] : p.whole[chunk];
  }
  // The scheduler's have-set of registered `p` when it records the bits of that kind (the kind
  // the target fetches), else none: then p's own bits are current.
  std::optional<ChunkSetView> Delegated(PeerId id, const PeerState& p, bool payload) const {
    if (!Registered(p) || !target_->scheduler || payload != target_->scheduler_fetches_payloads) {
      return std::nullopt;
    }
    return target_->scheduler->peer_has(p.slot, id);
  }
  // Copies the delegated bits of `p` back into its own, before the scheduler forgets it.
  void Reclaim(PeerId id, PeerState& p);
  PeerState& Add(PeerId id);  // a fresh state (replacing any)
  bool Remove(PeerId id);
  void Register(Time now, PeerId id, PeerState& p);
  void Unregister(Time now, PeerId id, PeerState& p);
  void Forget(PeerState& p);
  void Close(PeerId id, std::string why, bool ban, Time now);
  // (Re)creates the target's scheduler from what it holds, in a new epoch; the requests of the
  // old one (of kind `abandoned`) are cancelled.
  Status Restart(Time now, PayloadKind abandoned);
  // How many items fit where one whole chunk would (payloads are far smaller).
  uint32_t ItemScale() const;
  void Execute(Time now, std::span<const Action> actions);
  void ExecuteOne(Time now, const Action& action);
  void Fail(const std::string& why);

  static inline const std::vector<bool> kNoBits{};
  PeerProtocolOptions options_;
  // Connected peers, by id: the ids ascending in one flat array and their states in another, in
  // the same order (the lookups of every message touch a few cache lines, not a tree). A state's
  // address changes when a peer is added or removed: no PeerState& is held across a call that
  // may add or remove one (the scheduler drops only the peer of the event it is handling, after
  // which its state is not read again).
  std::vector<uint64_t> peer_ids_;
  std::vector<PeerState> peer_states_;
  // Beside them: the scheduler slot of each peer that is registered and skips HAVEs of held
  // chunks (kNoSlot for the others), for ForEachHaveRecipient's one-word test.
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  std::vector<uint32_t> suppress_slots_;
  std::map<uint64_t, Time> banned_;  // peer -> until
  std::optional<Target> target_;
  uint64_t next_epoch_ = 0;
  uint64_t refusals_received_ = 0;
  std::string error_;
  std::vector<Effect> effects_;
  std::vector<Action> actions_;  // a copy of the scheduler's, while they are carried out
};

}  // namespace weightcast::swarm
