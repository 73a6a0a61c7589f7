#include "swarm/peer_protocol.h"

#include <algorithm>
#include <utility>

namespace weightcast::swarm {
namespace {

// The shortest refusal backoff of a delta target's payloads (Restart): a few round trips.
constexpr Duration kMinRefusalBackoff = std::chrono::milliseconds(10);

}  // namespace

PeerProtocol::PeerProtocol(PeerProtocolOptions options) : options_(options) {}

Effect& PeerProtocol::Emit(EffectKind kind) {
  Effect& e = effects_.emplace_back();
  e.kind = kind;
  return e;
}

void PeerProtocol::Send(PeerId peer, Message message) {
  Effect& e = Emit(EffectKind::kSend);
  e.peer = peer;
  e.message = std::move(message);
}

const PeerProtocol::PeerState* PeerProtocol::Find(PeerId id) const {
  auto it = std::lower_bound(peer_ids_.begin(), peer_ids_.end(), id.value());
  if (it == peer_ids_.end() || *it != id.value()) return nullptr;
  return &peer_states_[static_cast<size_t>(it - peer_ids_.begin())];
}

PeerProtocol::PeerState* PeerProtocol::Find(PeerId id) {
  return const_cast<PeerState*>(std::as_const(*this).Find(id));
}

PeerProtocol::PeerState& PeerProtocol::Add(PeerId id) {
  auto it = std::lower_bound(peer_ids_.begin(), peer_ids_.end(), id.value());
  const auto k = static_cast<size_t>(it - peer_ids_.begin());
  if (it != peer_ids_.end() && *it == id.value()) {
    peer_states_[k] = PeerState{};
    suppress_slots_[k] = kNoSlot;
  } else {
    peer_ids_.insert(it, id.value());
    peer_states_.insert(peer_states_.begin() + static_cast<std::ptrdiff_t>(k), PeerState{});
    suppress_slots_.insert(suppress_slots_.begin() + static_cast<std::ptrdiff_t>(k), kNoSlot);
  }
  return peer_states_[k];
}

bool PeerProtocol::Remove(PeerId id) {
  auto it = std::lower_bound(peer_ids_.begin(), peer_ids_.end(), id.value());
  if (it == peer_ids_.end() || *it != id.value()) return false;
  const auto k = it - peer_ids_.begin();
  peer_ids_.erase(it);
  peer_states_.erase(peer_states_.begin() + k);
  suppress_slots_.erase(suppress_slots_.begin() + k);
  return true;
}

bool PeerProtocol::PeerState::Requested(uint32_t chunk) const {
  return std::find(requested.begin(), requested.end(), chunk) != requested.end();
}

bool PeerProtocol::PeerState::EraseRequested(uint32_t chunk) {
  auto it = std::find(requested.begin(), requested.end(), chunk);
  if (it == requested.end()) return false;
  *it = requested.back();
  requested.pop_back();
  return true;
}

const std::pair<uint32_t, PayloadKind>* PeerProtocol::PeerState::FindServing(uint32_t chunk) const {
  for (const auto& entry : serving) {
    if (entry.first == chunk) return &entry;
  }
  return nullptr;
}

PayloadKind PeerProtocol::PeerState::TakeServing(uint32_t chunk) {
  for (auto& entry : serving) {
    if (entry.first != chunk) continue;
    const PayloadKind kind = entry.second;
    entry = serving.back();
    serving.pop_back();
    return kind;
  }
  return PayloadKind::kRaw;
}

bool PeerProtocol::Admits(Time now, PeerId peer) const {
  if (peer == options_.node_id) return false;
  auto ban = banned_.find(peer.value());
  return ban == banned_.end() || now >= ban->second;
}

std::vector<PeerId> PeerProtocol::Banned(Time now) const {
  std::vector<PeerId> out;
  for (const auto& [peer, until] : banned_) {
    if (now < until) out.push_back(PeerId(peer));
  }
  return out;
}

// ---- peers ----

std::span<const Effect> PeerProtocol::OnPeerConnected(Time now, PeerId peer) {
  effects_.clear();
  if (PeerState* old = Find(peer)) Unregister(now, peer, *old);  // a reconnect
  Add(peer);
  SendHaveSet(peer);
  return Flush();
}

std::span<const Effect> PeerProtocol::OnPeerDisconnected(Time now, PeerId peer) {
  effects_.clear();
  if (PeerState* p = Find(peer)) {
    Unregister(now, peer, *p);
    Remove(peer);
  }
  return Flush();
}

std::span<const Effect> PeerProtocol::OnMalformed(Time now, PeerId peer, const std::string& why) {
  effects_.clear();
  if (PeerState* p = Find(peer)) {
    Unregister(now, peer, *p);
    Close(peer, why, /*ban=*/false, now);
  }
  return Flush();
}

void PeerProtocol::Forget(PeerState& p) {
  suppress_slots_[static_cast<size_t>(&p - peer_states_.data())] = kNoSlot;
  p.registered_epoch = 0;
  p.requested.clear();
  p.serving.clear();
}

void PeerProtocol::Reclaim(PeerId id, PeerState& p) {
  const bool payload = target_ && target_->scheduler_fetches_payloads;
  const std::optional<ChunkSetView> kept = Delegated(id, p, payload);
  if (!kept) return;
  std::vector<bool>& bits = payload ? p.payload : p.whole;
  for (uint32_t i = 0; i < bits.size(); ++i) bits[i] = kept->Contains(ChunkIndex(i));
}

void PeerProtocol::Unregister(Time now, PeerId id, PeerState& p) {
  Reclaim(id, p);
  if (Registered(p) && target_->scheduler) {
    Execute(now, target_->scheduler->OnPeerDisconnected(now, id));
  }
  Forget(p);
}

// Forgets `id` (the scheduler already has, or Unregister did) and tells the owner to close it.
void PeerProtocol::Close(PeerId id, std::string why, bool ban, Time now) {
  if (ban) banned_[id.value()] = now + options_.ban_time;
  if (!Remove(id)) return;
  Effect& e = Emit(EffectKind::kClose);
  e.peer = id;
  e.ban = ban;
  e.why = std::move(why);
}

void PeerProtocol::Register(Time now, PeerId id, PeerState& p) {
  if (!target_ || !target_->scheduler || p.remote_version != target_->spec.version ||
      Registered(p) || p.whole.size() != target_->spec.chunk_count) {
    return;
  }
  const std::vector<bool>& bits = FetchKind() == PayloadKind::kCodec ? p.payload : p.whole;
  ChunkSet has(target_->spec.chunk_count);
  for (uint32_t i = 0; i < bits.size(); ++i) {
    if (bits[i]) has.Insert(ChunkIndex(i));
  }
  p.registered_epoch = target_->epoch;
  const std::span<const Action> actions = target_->scheduler->OnPeerConnected(
      now, id, has, p.source ? PeerRole::kSource : PeerRole::kReceiver);
  // From here the scheduler's have-set is the record of the fetched kind (Delegated). When it
  // dropped the peer at once there is no slot, and the kDropPeer below forgets the peer.
  const std::optional<uint32_t> slot = target_->scheduler->slot(id);
  p.slot = slot.value_or(0);
  suppress_slots_[static_cast<size_t>(&p - peer_states_.data())] =
      slot && p.skips_held ? *slot : kNoSlot;
  Execute(now, actions);
}

void PeerProtocol::SendHaveSet(PeerId id) {
  if (!target_) return;
  const TargetSpec& t = target_->spec;
  Message m{.type = MessageType::kSwarmHave,
            .version = t.version.value(),
            .chunk = t.chunk_count,
            .code = static_cast<uint8_t>(
                (t.fetch_payloads && !target_->complete ? kHaveFetchingPayloads : 0) |
                (t.source ? kHaveSource : kHaveSkipHeld))};
  m.blob = PackBits(t.whole);
  const std::vector<uint8_t> payload = PackBits(t.payload);
  m.blob.insert(m.blob.end(), payload.begin(), payload.end());
  Send(id, std::move(m));
}

std::span<const Effect> PeerProtocol::OnMessage(Time now, PeerId peer, const Message& m) {
  effects_.clear();
  PeerState* found = Find(peer);
  if (found == nullptr) return Flush();
  PeerState& p = *found;
  const Version v(m.version);
  switch (m.type) {
    case MessageType::kSwarmHave: {
      const size_t bytes = (size_t{m.chunk} + 7) / 8;
      const std::span<const uint8_t> blob(m.blob);
      auto whole = UnpackBits(blob.first(std::min(blob.size(), bytes)), m.chunk);
      auto payload = UnpackBits(blob.subspan(std::min(blob.size(), bytes)), m.chunk);
      if (!whole.ok() || !payload.ok()) {
        Unregister(now, peer, p);
        Close(peer, "malformed have-set", /*ban=*/false, now);
        return Flush();
      }
      if (p.registered_epoch != 0) Unregister(now, peer, p);
      p.remote_version = v;
      p.fetching_payloads = (m.code & kHaveFetchingPayloads) != 0;
      p.skips_held = (m.code & kHaveSkipHeld) != 0;
      p.source = (m.code & kHaveSource) != 0;
      p.whole = std::move(whole).value();
      p.payload = std::move(payload).value();
      Register(now, peer, p);
      return Flush();
    }
    case MessageType::kHave: {
      if (v != p.remote_version || m.chunk >= p.whole.size()) return Flush();
      const bool whole = (m.code & kHaveWhole) != 0;
      const bool payload = (m.code & kHavePayload) != 0;
      // The fetched kind of a registered peer is recorded by the scheduler's OnHave alone.
      const bool delegated = OnTarget(v) && Registered(p);
      const bool fetched_payloads = delegated && target_->scheduler_fetches_payloads;
      if (whole && (!delegated || fetched_payloads)) p.whole[m.chunk] = true;
      if (payload && (!delegated || !fetched_payloads)) p.payload[m.chunk] = true;
      if (delegated && (fetched_payloads ? payload : whole)) {
        Execute(now, target_->scheduler->OnHave(now, peer, ChunkIndex(m.chunk), p.slot));
      }
      return Flush();
    }
    case MessageType::kRequest: {
      const auto kind = static_cast<PayloadKind>(m.code);
      auto reject = [&] {
        Send(
            peer,
            {.type = MessageType::kReject, .version = m.version, .chunk = m.chunk, .code = m.code});
        return Flush();
      };
      if (!OnTarget(v) || !Registered(p)) return reject();
      const uint32_t n = target_->spec.chunk_count;
      if (m.chunk >= n) {
        Unregister(now, peer, p);
        Close(peer, "asked for chunk " + std::to_string(m.chunk) + " of " + std::to_string(n),
              /*ban=*/false, now);
        return Flush();
      }
      if (kind == PayloadKind::kCodec) {
        if (!target_->spec.payload[m.chunk]) return reject();
      } else if (kind != PayloadKind::kRaw) {
        return reject();
      }
      p.TakeServing(m.chunk);  // asked again: the latest kind
      p.serving.emplace_back(m.chunk, kind);
      Execute(now, target_->scheduler->OnRequestReceived(now, peer, ChunkIndex(m.chunk)));
      return Flush();
    }
    case MessageType::kCancel:
      if (OnTarget(v) && Registered(p)) {
        Execute(now, target_->scheduler->OnCancelReceived(now, peer, ChunkIndex(m.chunk)));
      }
      return Flush();
    case MessageType::kReject:
      if (OnTarget(v) && Registered(p) && p.EraseRequested(m.chunk)) {
        ++refusals_received_;
        Execute(now, target_->scheduler->OnRequestRejected(now, peer, ChunkIndex(m.chunk)));
      }
      return Flush();
    default:
      return Flush();  // serve/fetch messages have no meaning here
  }
}

bool PeerProtocol::WantsHave(PeerId peer, ChunkIndex chunk, uint8_t flags) const {
  const PeerState* p = Find(peer);
  return p != nullptr && !HoldsAnnounced(peer, *p, chunk.value(), flags);
}

bool PeerProtocol::EveryChunkReplicated() const {
  if (!target_) return false;
  const TargetSpec& t = target_->spec;
  const uint32_t n = t.chunk_count;
  std::vector<bool> whole(n, false), payload(n, false);
  bool payloads_needed = false;
  for (size_t k = 0; k < peer_ids_.size(); ++k) {
    const PeerState& p = peer_states_[k];
    const PeerId id(peer_ids_[k]);
    if (p.remote_version != t.version || p.whole.size() != n) continue;
    payloads_needed = payloads_needed || p.fetching_payloads;
    for (uint32_t i = 0; i < n; ++i) {
      if (Holds(id, p, i, /*payload=*/false)) whole[i] = true;
      if (Holds(id, p, i, /*payload=*/true)) payload[i] = true;
    }
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (!t.want[i]) continue;  // a rank seeding its part: another rank's to replicate
    if (!whole[i]) return false;
    if (payloads_needed && t.payload[i] && !payload[i]) return false;
  }
  return true;
}

// ---- chunks ----

Arrival PeerProtocol::OnChunkArrived(Time now, PeerId peer, Version version, ChunkIndex chunk,
                                     uint8_t encoding) {
  (void)now;
  Arrival out;
  PeerState* p = Find(peer);
  if (p == nullptr || !OnTarget(version)) return out;  // a reply for a target we left
  const uint32_t c = chunk.value();
  if (c >= target_->spec.chunk_count || encoding != static_cast<uint8_t>(FetchKind())) {
    // Of another kind: a reply to a request from before a restart (payloads -> whole chunks).
    // It must not count as the reply to the request for the same chunk sent since.
    return out;
  }
  if (!p->EraseRequested(c)) return out;  // cancelled on the way, or never asked for
  // An endgame duplicate: the scheduler cancels it once the first copy verifies.
  if (target_->spec.whole[c] || target_->checking[c]) return out;
  target_->checking[c] = true;
  out.check = true;
  out.epoch = target_->epoch;
  out.item = FetchKind();
  return out;
}

std::span<const Effect> PeerProtocol::OnChunkChecked(Time now, uint64_t epoch, PeerId from,
                                                     ChunkIndex chunk, CheckOutcome outcome,
                                                     const std::string& why) {
  effects_.clear();
  if (!target_ || epoch != target_->epoch) return Flush();
  const uint32_t c = chunk.value();
  target_->checking[c] = false;
  switch (outcome) {
    case CheckOutcome::kOk:
    case CheckOutcome::kPayloadKept: {
      if (outcome == CheckOutcome::kOk) target_->spec.whole[c] = true;
      if (FetchKind() == PayloadKind::kCodec) target_->spec.payload[c] = true;
      Execute(now, target_->scheduler->OnChunkVerified(now, chunk, from));
      const Duration took = target_->scheduler->last_fetch_time();
      if (took >= Duration::zero()) {
        Effect& e = Emit(EffectKind::kFetchTime);
        e.peer = from;
        e.chunk = chunk;
        e.took = took;
      }
      return Flush();
    }
    case CheckOutcome::kUndecodable: {
      Emit(EffectKind::kFetchWhole).why = why;
      target_->spec.fetch_payloads = false;
      const Status restarted = Restart(now, PayloadKind::kCodec);
      if (!restarted.ok()) Fail(restarted.ToString());
      return Flush();
    }
    case CheckOutcome::kCorrupt:
      banned_[from.value()] = now + options_.ban_time;
      Execute(now, target_->scheduler->OnChunkFailed(now, chunk, from));
      return Flush();
    case CheckOutcome::kStoreError:
      Fail(why);
      return Flush();
  }
  return Flush();
}

std::span<const Effect> PeerProtocol::OnUploadDone(Time now, uint64_t epoch, PeerId peer,
                                                   ChunkIndex chunk) {
  effects_.clear();
  if (!target_ || epoch != target_->epoch) return Flush();
  if (PeerState* p = Find(peer)) p->TakeServing(chunk.value());
  Execute(now, target_->scheduler->OnUploadDone(now, peer, chunk));
  return Flush();
}

std::span<const Effect> PeerProtocol::Prefer(Time now, std::vector<ChunkIndex> order) {
  effects_.clear();
  if (!target_) return Flush();
  target_->spec.preferred = std::move(order);
  if (target_->scheduler)
    Execute(now, target_->scheduler->SetPreferred(now, target_->spec.preferred));
  return Flush();
}

std::span<const Effect> PeerProtocol::OnTick(Time now) {
  effects_.clear();
  if (target_ && target_->scheduler) Execute(now, target_->scheduler->OnTimer(now));
  return Flush();
}

void PeerProtocol::Fail(const std::string& why) {
  if (error_.empty()) error_ = why;
  Emit(EffectKind::kFailed).why = why;
}

// ---- the scheduler's actions ----

void PeerProtocol::Execute(Time now, std::span<const Action> actions) {
  // Copied: carrying out an action may call the scheduler again (a drop unregisters nothing
  // today, but the span must not be read after such a call).
  const size_t first = actions_.size();
  actions_.insert(actions_.end(), actions.begin(), actions.end());
  for (size_t i = first; i < actions_.size(); ++i) ExecuteOne(now, actions_[i]);
  actions_.resize(first);
}

void PeerProtocol::ExecuteOne(Time now, const Action& a) {
  const uint64_t version = target_->spec.version.value();
  PeerState* p = a.kind == ActionKind::kAnnounceHave || a.kind == ActionKind::kComplete
                     ? nullptr
                     : Find(a.peer);
  const uint32_t c = a.chunk.value();
  switch (a.kind) {
    case ActionKind::kSendRequest:
      if (p != nullptr) {
        if (!p->Requested(c)) p->requested.push_back(c);
        Send(a.peer, {.type = MessageType::kRequest,
                      .version = version,
                      .chunk = c,
                      .code = static_cast<uint8_t>(FetchKind())});
      }
      return;
    case ActionKind::kCancelRequest:
      if (p != nullptr) {
        p->EraseRequested(c);
        Send(a.peer, {.type = MessageType::kCancel,
                      .version = version,
                      .chunk = c,
                      .code = static_cast<uint8_t>(FetchKind())});
      }
      return;
    case ActionKind::kSendChunk: {
      if (p == nullptr) {
        // Gone since it asked: the slot frees at once.
        Execute(now, target_->scheduler->OnUploadDone(now, a.peer, a.chunk));
        return;
      }
      const auto* serving = p->FindServing(c);
      Effect& e = Emit(EffectKind::kUpload);
      e.peer = a.peer;
      e.chunk = a.chunk;
      e.item = serving == nullptr ? PayloadKind::kRaw : serving->second;
      e.epoch = target_->epoch;
      return;
    }
    case ActionKind::kStopUpload:
      if (p != nullptr) p->TakeServing(c);
      {
        Effect& e = Emit(EffectKind::kStopUpload);
        e.peer = a.peer;
        e.chunk = a.chunk;
        e.epoch = target_->epoch;
      }
      return;
    case ActionKind::kRejectRequest: {
      PayloadKind kind = PayloadKind::kRaw;
      if (p != nullptr) {
        kind = p->TakeServing(c);
        Send(a.peer, {.type = MessageType::kReject,
                      .version = version,
                      .chunk = c,
                      .code = static_cast<uint8_t>(kind)});
      }
      return;
    }
    case ActionKind::kAnnounceHave: {
      Effect& e = Emit(EffectKind::kAnnounce);
      e.chunk = a.chunk;
      e.flags = static_cast<uint8_t>((target_->spec.whole[c] ? kHaveWhole : 0) |
                                     (target_->spec.payload[c] ? kHavePayload : 0));
      return;
    }
    case ActionKind::kDropPeer:
      // The scheduler has forgotten it already.
      if (p != nullptr) Forget(*p);
      Close(a.peer, std::string(DropReasonName(a.reason)), a.reason == DropReason::kBadChunk, now);
      return;
    case ActionKind::kComplete:
      target_->complete = true;
      Emit(EffectKind::kComplete);
      return;
  }
}

// ---- the target ----

Result<std::span<const Effect>> PeerProtocol::SetTarget(Time now, TargetSpec spec) {
  effects_.clear();
  const uint32_t n = spec.chunk_count;
  if (spec.whole.size() != n || spec.payload.size() != n || spec.want.size() != n ||
      (!spec.payload_bytes.empty() && spec.payload_bytes.size() != n)) {
    return InvalidArgument("target spec: bitsets of another size than the chunk count");
  }
  LeaveTarget();
  target_.emplace();
  target_->spec = std::move(spec);
  if (Status s = Restart(now, FetchKind()); !s.ok()) {
    target_.reset();
    return s;
  }
  return Flush();
}

void PeerProtocol::LeaveTarget() {
  for (size_t k = 0; k < peer_ids_.size(); ++k) Reclaim(PeerId(peer_ids_[k]), peer_states_[k]);
  for (PeerState& state : peer_states_) Forget(state);
  target_.reset();
  error_.clear();
}

uint32_t PeerProtocol::ItemScale() const {
  const TargetSpec& t = target_->spec;
  const bool serves_payloads =
      t.source && std::find(t.payload.begin(), t.payload.end(), true) != t.payload.end();
  if ((!t.fetch_payloads && !serves_payloads) || t.payload_bytes.empty() || t.chunk_count == 0) {
    return 1;
  }
  uint64_t payload_bytes = 0, items = 0;
  for (const uint64_t size : t.payload_bytes) {
    if (size == 0) continue;
    payload_bytes += size;
    ++items;
  }
  if (items == 0) return 1;
  const uint64_t mean_chunk = t.total_bytes / t.chunk_count;
  const uint64_t mean_payload = std::max<uint64_t>(payload_bytes / items, 1);
  return static_cast<uint32_t>(std::clamp<uint64_t>(mean_chunk / mean_payload, 1, 256));
}

Status PeerProtocol::Restart(Time now, PayloadKind abandoned) {
  Target& t = *target_;
  const uint32_t n = t.spec.chunk_count;
  // The old scheduler's have-sets go with it: first back into the peers' own bits.
  for (size_t k = 0; k < peer_ids_.size(); ++k) Reclaim(PeerId(peer_ids_[k]), peer_states_[k]);
  t.epoch = ++next_epoch_;
  Emit(EffectKind::kNewEpoch).epoch = t.epoch;
  // The old epoch's requests are abandoned: cancel them. A peer still holding one (queued, or
  // uploading the old kind) would take the new epoch's request for that chunk as a duplicate,
  // and the chunk would wait out the request timeout.
  for (size_t k = 0; k < peer_ids_.size(); ++k) {
    for (const uint32_t chunk : peer_states_[k].requested) {
      Send(PeerId(peer_ids_[k]), {.type = MessageType::kCancel,
                                  .version = t.spec.version.value(),
                                  .chunk = chunk,
                                  .code = static_cast<uint8_t>(abandoned)});
    }
  }
  for (PeerState& state : peer_states_) Forget(state);
  t.checking.assign(n, false);
  SchedulerOptions so;
  so.chunk_count = n;
  so.initial_have = ChunkSet(n);
  so.want = ChunkSet(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (t.spec.whole[i]) so.initial_have.Insert(ChunkIndex(i));
    if (t.spec.want[i]) so.want.Insert(ChunkIndex(i));
  }
  // The knobs count items. A delta's items are payloads of a few KB where a chunk is hundreds:
  // a window of two payloads per peer would make the step a chain of round trips, and a serve
  // queue of 32 would refuse most of a peer's requests (each refusal parks the chunk for the
  // refusal backoff). Windows, slots and queues keep the bytes they would hold for whole
  // chunks, in as many items as that makes (bounded).
  ApplyTuning(options_.tuning, options_.source || t.spec.source, so);
  const uint32_t scale = ItemScale();
  const uint32_t window = std::max<uint32_t>(so.window_per_peer, 1);
  const uint32_t outstanding = std::max<uint32_t>(so.max_outstanding, 1);
  const uint32_t slots = so.upload_slots;
  so.window_per_peer = std::min<uint32_t>(window * scale, std::max<uint32_t>(window, 64));
  so.max_window_per_peer = std::max(
      so.window_per_peer, std::min<uint32_t>(so.max_window_per_peer * scale,
                                             std::max<uint32_t>(so.max_window_per_peer, 256)));
  so.max_outstanding =
      std::min<uint32_t>(outstanding * scale, std::max<uint32_t>(outstanding, 1024));
  // A delta target still serves whole chunks to peers not on the base (late joiners), and each
  // running upload holds its chunk in memory: the scaled slots are bounded so that they hold at
  // most kUploadBudget of whole chunks (never fewer than the configured slots).
  constexpr uint64_t kUploadBudget = uint64_t{256} << 20;
  const uint64_t max_chunk = std::max<uint64_t>(t.spec.chunk_bytes, 1);
  const uint32_t budget_slots =
      static_cast<uint32_t>(std::min<uint64_t>(kUploadBudget / max_chunk, 64));
  so.upload_slots = std::max<uint32_t>(slots, std::min<uint32_t>(slots * scale, budget_slots));
  so.serve_queue_limit = std::min<uint32_t>(so.serve_queue_limit * scale, 1024);
  // The refusal backoff (and a source's hold on repeats, at least as long) is sized for whole
  // chunks: the time a peer that got the chunk needs to pass it on. A payload passes on `scale`
  // times sooner; held for the whole chunk's time, each refusal of a delta step parked its
  // asker for 2 s while the step's payloads took 44 ms at 1,000 nodes (docs/simulator.md).
  so.refusal_backoff =
      std::max<Duration>(kMinRefusalBackoff, so.refusal_backoff / static_cast<int64_t>(scale));
  so.spread_first = t.spec.source;
  if (t.spec.source && !t.spec.payload_bytes.empty()) {
    // Only chunks with a payload are ever asked of a delta source by nodes on the base.
    so.spread = ChunkSet(n);
    for (uint32_t i = 0; i < n; ++i) {
      if (t.spec.payload_bytes[i] != 0) so.spread.Insert(ChunkIndex(i));
    }
  }
  so.seed = t.spec.seed;
  so.preferred = t.spec.preferred;
  const uint32_t scaled_window = so.window_per_peer;
  WC_ASSIGN_OR_RETURN(Scheduler scheduler, Scheduler::Create(std::move(so)));
  t.window = scaled_window;
  t.scheduler.emplace(std::move(scheduler));
  t.scheduler_fetches_payloads = t.spec.fetch_payloads;
  t.complete = t.scheduler->complete();
  for (const uint64_t id : peer_ids_) SendHaveSet(PeerId(id));
  // By index: registering may drop a peer (a scheduler action), which shifts the arrays.
  for (size_t k = 0; k < peer_ids_.size(); ++k) {
    const uint64_t id = peer_ids_[k];
    Register(now, PeerId(id), peer_states_[k]);
    if (k < peer_ids_.size() && peer_ids_[k] != id) --k;  // this one was removed
  }
  return Status::Ok();
}

}  // namespace weightcast::swarm
