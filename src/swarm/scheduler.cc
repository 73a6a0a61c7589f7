#include "swarm/scheduler.h"

#include <algorithm>
#include <bit>
#include <string>

namespace weightcast::swarm {

std::string_view DropReasonName(DropReason reason) {
  switch (reason) {
    case DropReason::kNone:
      return "none";
    case DropReason::kBadChunk:
      return "bad_chunk";
    case DropReason::kTimeouts:
      return "timeouts";
    case DropReason::kProtocolError:
      return "protocol_error";
  }
  return "unknown";
}

std::string_view ActionKindName(ActionKind kind) {
  switch (kind) {
    case ActionKind::kSendRequest:
      return "send_request";
    case ActionKind::kCancelRequest:
      return "cancel_request";
    case ActionKind::kSendChunk:
      return "send_chunk";
    case ActionKind::kStopUpload:
      return "stop_upload";
    case ActionKind::kRejectRequest:
      return "reject_request";
    case ActionKind::kAnnounceHave:
      return "announce_have";
    case ActionKind::kDropPeer:
      return "drop_peer";
    case ActionKind::kComplete:
      return "complete";
  }
  return "unknown";
}

Result<Scheduler> Scheduler::Create(SchedulerOptions options) {
  const uint32_t n = options.chunk_count;
  if (n == 0) return InvalidArgument("swarm: chunk_count must be positive");
  // size() is the universe a set ranges over (0: not given), not its member count.
  if (options.initial_have.size() == 0) options.initial_have = ChunkSet(n);  // NOLINT
  if (options.want.size() == 0) options.want = ChunkSet::Full(n);            // NOLINT
  if (options.spread.size() == 0) options.spread = ChunkSet::Full(n);        // NOLINT
  if (options.initial_have.size() != n || options.want.size() != n || options.spread.size() != n) {
    return InvalidArgument(
        "swarm: initial_have/want/spread sized " + std::to_string(options.initial_have.size()) +
        "/" + std::to_string(options.want.size()) + "/" + std::to_string(options.spread.size()) +
        ", expected " + std::to_string(n) + " chunks");
  }
  if (options.window_per_peer == 0 || options.max_outstanding == 0) {
    return InvalidArgument("swarm: window_per_peer and max_outstanding must be positive");
  }
  if (options.adaptive_window && options.max_window_per_peer < options.window_per_peer) {
    return InvalidArgument("swarm: max_window_per_peer must be at least window_per_peer");
  }
  if (options.endgame_max_requests == 0 || options.endgame_max_requests > 255) {
    return InvalidArgument("swarm: endgame_max_requests must be in [1, 255]");
  }
  return Scheduler(std::move(options));
}

Scheduler::Scheduler(SchedulerOptions options)
    : options_(std::move(options)),
      n_(options_.chunk_count),
      have_(options_.initial_have),
      need_(n_),
      need_unrequested_(n_),
      holders_(n_, 0),
      source_slots_(1, 0),
      receiver_held_(n_),
      request_count_(n_, 0),
      set_words_((n_ + 63) / 64),
      sent_count_(n_, 0),
      rng_(options_.seed) {
  for (uint32_t i = 0; i < n_; ++i) {
    const ChunkIndex c(i);
    if (options_.want.Contains(c) && !have_.Contains(c)) {
      need_.Insert(c);
      need_unrequested_.Insert(c);
    }
  }
  missing_ = need_.count();
  for (uint32_t i = 0; i < n_; ++i) {
    if (have_.Contains(ChunkIndex(i)) && options_.spread.Contains(ChunkIndex(i))) ++never_sent_;
  }
  actions_.reserve(64);
}

Scheduler::Peer* Scheduler::FindPeer(PeerId id) {
  for (size_t i = 0; i < peer_ids_.size(); ++i) {
    if (peer_ids_[i] == id && peers_[i].live) return &peers_[i];
  }
  return nullptr;
}

bool Scheduler::Requested(Peer& p, ChunkIndex c) const {
  for (const Request& r : p.inflight) {
    if (r.chunk == c) return true;
  }
  return false;
}

void Scheduler::AddRequest(Time now, Peer& p, ChunkIndex c) {
  if (request_count_[c.value()] > 0) ++stats_.duplicate_requests;
  p.inflight.push_back(Request{c, now + options_.request_timeout, now});
  ++request_count_[c.value()];
  ++outstanding_;
  need_unrequested_.Erase(c);
  ++stats_.requests_sent;
  Emit(ActionKind::kSendRequest, p.id, c);
  UpdateEndgame();
}

bool Scheduler::RemoveRequest(Peer& p, ChunkIndex c) {
  for (size_t i = 0; i < p.inflight.size(); ++i) {
    if (p.inflight[i].chunk != c) continue;
    p.inflight[i] = p.inflight.back();
    p.inflight.pop_back();
    --request_count_[c.value()];
    --outstanding_;
    if (request_count_[c.value()] == 0 && need_.Contains(c)) need_unrequested_.Insert(c);
    UpdateEndgame();
    return true;
  }
  return false;
}

void Scheduler::UpdateEndgame() { in_endgame_ = missing_ > 0 && need_unrequested_.empty(); }

void Scheduler::RecordDelivery(Time now, Peer& p, Time sent) {
  if (!options_.adaptive_window) return;
  const double took = std::max(1e-9, std::chrono::duration<double>(now - sent).count());
  // Smoothing 0.3: a few arrivals move the estimate, one odd arrival does not.
  p.service_s = p.service_s == 0 ? took : 0.7 * p.service_s + 0.3 * took;
  double sum = 0;
  uint32_t measured = 0;
  for (const Peer& q : peers_) {
    if (!q.live || q.service_s == 0) continue;
    sum += 1.0 / q.service_s;
    ++measured;
  }
  if (measured < 2) return;  // nothing to compare with yet
  const double mean = sum / measured;
  const double w = double(options_.window_per_peer) * (1.0 / p.service_s) / mean;
  p.window = static_cast<uint32_t>(
      std::clamp(std::lround(w), 1L, static_cast<long>(options_.max_window_per_peer)));
}

std::optional<uint32_t> Scheduler::slot(PeerId peer) const {
  for (size_t i = 0; i < peer_ids_.size(); ++i) {
    if (peer_ids_[i] == peer && peers_[i].live) return static_cast<uint32_t>(i);
  }
  return std::nullopt;
}

uint32_t Scheduler::window(PeerId peer) const {
  for (size_t i = 0; i < peer_ids_.size(); ++i) {
    if (peer_ids_[i] == peer && peers_[i].live) return peers_[i].window;
  }
  return 0;
}

std::span<const Action> Scheduler::SetPreferred(Time now, std::span<const ChunkIndex> order) {
  actions_.clear();
  options_.preferred.clear();
  for (ChunkIndex c : order) {
    if (c.value() < n_) options_.preferred.push_back(c);
  }
  preferred_from_ = 0;
  FillAll(now);
  return actions_;
}

template <typename Candidate>
ChunkIndex Scheduler::PickPreferred(const uint64_t* has, const Candidate& candidate) {
  // Wide enough to keep every peer's window full from the front of the order, narrow enough
  // that the front comes first.
  constexpr size_t kPreferredWindow = 64;
  const std::vector<ChunkIndex>& order = options_.preferred;
  while (preferred_from_ < order.size() && !need_.Contains(order[preferred_from_])) {
    ++preferred_from_;
  }
  ChunkIndex best(n_);
  uint32_t best_avail = UINT32_MAX;
  const size_t end = std::min(order.size(), preferred_from_ + kPreferredWindow);
  for (size_t r = preferred_from_; r < end; ++r) {
    const uint32_t i = order[r].value();
    if (((has[i >> 6] >> (i & 63)) & 1) == 0 || !candidate(i)) continue;
    const uint32_t a = Availability(i);
    if (a < best_avail) {
      best_avail = a;
      best = order[r];
    }
  }
  return best;
}

ChunkIndex Scheduler::Pick(Peer& p, bool endgame) {
  const ChunkIndex none(n_);
  if (!options_.preferred.empty()) {
    const uint64_t* peer_has = HasWords(SlotOf(p));
    const std::vector<uint64_t>& wanted = endgame ? need_.words() : need_unrequested_.words();
    const std::vector<uint64_t>& refused_words = p.refused.words();
    const std::vector<uint64_t>& held_words = receiver_held_.words();
    const ChunkIndex c = PickPreferred(peer_has, [&](uint32_t i) {
      const size_t w = i >> 6;
      const uint64_t bit = uint64_t{1} << (i & 63);
      if ((wanted[w] & bit) == 0 || (refused_words[w] & bit) != 0) return false;
      if (p.source && (held_words[w] & bit) != 0) return false;
      return !endgame ||
             (request_count_[i] < options_.endgame_max_requests && !Requested(p, ChunkIndex(i)));
    });
    if (c.value() < n_) return c;
  }
  const std::vector<uint64_t>& want_words = endgame ? need_.words() : need_unrequested_.words();
  const uint64_t* has = HasWords(SlotOf(p));
  const std::vector<uint64_t>& refused = p.refused.words();
  const std::vector<uint64_t>& receiver_held = receiver_held_.words();
  const size_t nw = want_words.size();
  if (nw == 0) return none;
  auto candidates = [&](size_t w) {
    uint64_t bits = want_words[w] & has[w] & ~refused[w];
    // A source holds repeats back; a receiver peer that holds the chunk passes it on instead.
    if (p.source) bits &= ~receiver_held[w];
    return bits;
  };
  // Random tie-break: scan from a random candidate, wrapping around, and keep the first chunk of
  // the lowest availability. Two nodes looking at the same candidates start at different places.
  // The start is drawn among the candidates, not among all chunk indices: a peer holding one
  // contiguous range (a rank seeding its part) would otherwise be asked for the first chunk of
  // its range by every node whose start fell outside it, and all but one of them refused.
  pick_counts_.resize(nw);
  uint64_t total = 0;
  for (size_t w = 0; w < nw; ++w) {
    pick_counts_[w] = CountBits(candidates(w));
    total += pick_counts_[w];
  }
  if (total == 0) return none;
  uint64_t rank = rng_() % total;
  uint32_t start = 0;
  for (size_t w = 0; w < nw; ++w) {
    const uint64_t count = pick_counts_[w];
    if (rank >= count) {
      rank -= count;
      continue;
    }
    uint64_t bits = candidates(w);
    for (; rank > 0; --rank) bits &= bits - 1;
    start = static_cast<uint32_t>(w * 64 + std::countr_zero(bits));
    break;
  }
  const size_t w0 = start >> 6;
  const uint64_t low_mask = (uint64_t{1} << (start & 63)) - 1;
  uint32_t best_avail = UINT32_MAX;
  ChunkIndex best = none;
  for (size_t k = 0; k <= nw; ++k) {
    const size_t w = (w0 + k) % nw;
    uint64_t bits = candidates(w);
    if (k == 0) bits &= ~low_mask;
    if (k == nw) bits &= low_mask;
    while (bits != 0) {
      const uint32_t i = static_cast<uint32_t>(w * 64 + std::countr_zero(bits));
      bits &= bits - 1;
      const ChunkIndex c(i);
      if (endgame && (request_count_[i] >= options_.endgame_max_requests || Requested(p, c))) {
        continue;
      }
      const uint32_t a = Availability(i);
      if (a < best_avail) {
        best_avail = a;
        best = c;
        // The peer itself holds it, so availability 1 is the floor: nothing is rarer.
        if (a <= 1) return best;
      }
    }
  }
  return best;
}

void Scheduler::Fill(Time now, Peer& p) {
  if (missing_ == 0 || !p.live) return;
  if (!p.refused.empty() && now >= p.refused_until) p.refused = ChunkSet(n_);
  while (p.inflight.size() < p.window) {
    if (outstanding_ >= options_.max_outstanding) return;
    const ChunkIndex c = Pick(p, in_endgame_);
    if (c.value() >= n_) return;
    AddRequest(now, p, c);
  }
}

void Scheduler::FillAll(Time now) {
  if (missing_ == 0 || peers_.empty()) return;
  const size_t start = rng_() % peers_.size();
  for (size_t k = 0; k < peers_.size(); ++k) {
    Peer& p = peers_[(start + k) % peers_.size()];
    if (p.live) Fill(now, p);
  }
}

uint32_t Scheduler::receiver_holders(ChunkIndex chunk) const {
  uint32_t n = 0;
  for (uint32_t w = 0; w < holder_words_; ++w) {
    n += CountBits(holders_[size_t{chunk.value()} * holder_words_ + w] & ~source_slots_[w]);
  }
  return n;
}

void Scheduler::CountHolder(const Peer& p, uint32_t c, int delta) {
  const auto slot = static_cast<size_t>(&p - peers_.data());
  uint64_t& word = holders_[size_t{c} * holder_words_ + slot / 64];
  const uint64_t bit = uint64_t{1} << (slot % 64);
  word = delta > 0 ? word | bit : word & ~bit;
  if (p.source) return;
  if (delta > 0) {
    receiver_held_.Insert(ChunkIndex(c));
  } else if (receiver_holders(ChunkIndex(c)) == 0) {
    receiver_held_.Erase(ChunkIndex(c));
  }
}

void Scheduler::WidenHolders(uint32_t words) {
  std::vector<uint64_t> wider(size_t{n_} * words, 0);
  for (size_t c = 0; c < n_; ++c) {
    for (size_t w = 0; w < holder_words_; ++w) {
      wider[c * words + w] = holders_[c * holder_words_ + w];
    }
  }
  holders_ = std::move(wider);
  source_slots_.resize(words, 0);
  holder_words_ = words;
}

void Scheduler::ForgetPeer(Time /*now*/, Peer& p) {
  uint64_t* words = HasWords(SlotOf(p));
  for (size_t w = 0; w < set_words_; ++w) {
    uint64_t bits = words[w];
    while (bits != 0) {
      CountHolder(p, static_cast<uint32_t>(w * 64 + std::countr_zero(bits)), -1);
      bits &= bits - 1;
    }
    words[w] = 0;
  }
  while (!p.inflight.empty()) RemoveRequest(p, p.inflight.back().chunk);
  auto gone = [&](const ServeItem& s) { return s.peer == p.id; };
  serve_queue_.erase(std::remove_if(serve_queue_.begin(), serve_queue_.end(), gone),
                     serve_queue_.end());
  uploading_.erase(std::remove_if(uploading_.begin(), uploading_.end(), gone), uploading_.end());
  if (p.live) {
    const size_t slot = static_cast<size_t>(&p - peers_.data());
    free_slots_.push_back(static_cast<uint32_t>(slot));
    peer_ids_[slot] = PeerId(0);
    --live_peers_;
  }
  p.live = false;
  const auto slot_index = static_cast<size_t>(&p - peers_.data());
  source_slots_[slot_index / 64] &= ~(uint64_t{1} << (slot_index % 64));
  p.source = false;
  p.refused = ChunkSet();
  p.held_since.clear();
  p.inflight.clear();
}

void Scheduler::DropPeer(Time now, Peer& p, DropReason reason) {
  const PeerId id = p.id;
  Emit(ActionKind::kDropPeer, id, ChunkIndex(0), reason);
  ForgetPeer(now, p);
}

std::span<const Action> Scheduler::OnPeerConnected(Time now, PeerId peer, const ChunkSet& has,
                                                   PeerRole role) {
  actions_.clear();
  if (Peer* old = FindPeer(peer)) ForgetPeer(now, *old);  // a reconnect replaces the old view
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(peers_.size());
    peers_.emplace_back();
    peer_has_.resize(peers_.size() * set_words_, 0);
    if (slot >= 64 * holder_words_) WidenHolders(holder_words_ + 1);
    peer_ids_.emplace_back(0);
  }
  Peer& p = peers_[slot];
  p.id = peer;
  p.live = true;
  p.source = role == PeerRole::kSource;
  if (p.source) source_slots_[slot / 64] |= uint64_t{1} << (slot % 64);
  uint64_t* words = HasWords(slot);
  if (has.size() == n_) {
    std::copy(has.words().begin(), has.words().end(), words);
  } else {
    std::fill(words, words + set_words_, 0);
  }
  p.refused = ChunkSet(n_);
  p.held_since.clear();
  p.inflight.clear();
  p.consecutive_timeouts = 0;
  p.window = options_.window_per_peer;
  p.service_s = 0;
  peer_ids_[slot] = peer;
  ++live_peers_;
  if (has.size() != n_) {
    DropPeer(now, p, DropReason::kProtocolError);
    return Flush();
  }
  for (size_t w = 0; w < set_words_; ++w) {
    uint64_t bits = words[w];
    while (bits != 0) {
      CountHolder(p, static_cast<uint32_t>(w * 64 + std::countr_zero(bits)), +1);
      bits &= bits - 1;
    }
  }
  Fill(now, p);
  return Flush();
}

std::span<const Action> Scheduler::OnPeerDisconnected(Time now, PeerId peer) {
  actions_.clear();
  Peer* p = FindPeer(peer);
  if (p == nullptr) return Flush();
  ForgetPeer(now, *p);
  TryServe(now);
  FillAll(now);
  return Flush();
}

std::span<const Action> Scheduler::OnHave(Time now, PeerId peer, ChunkIndex chunk,
                                          uint32_t slot_hint) {
  actions_.clear();
  Peer* p = slot_hint < peers_.size() && peers_[slot_hint].live && peers_[slot_hint].id == peer
                ? &peers_[slot_hint]
                : FindPeer(peer);
  if (p == nullptr) return Flush();
  if (chunk.value() >= n_) {
    DropPeer(now, *p, DropReason::kProtocolError);
    FillAll(now);
    return Flush();
  }
  // The word's address comes from the slot, not from the record just checked: the two loads
  // (each a cache miss in a large simulated fleet) overlap.
  uint64_t& word = HasWords(SlotOf(*p))[chunk.value() >> 6];
  const uint64_t bit = uint64_t{1} << (chunk.value() & 63);
  if ((word & bit) == 0) {
    word |= bit;
    CountHolder(*p, chunk.value(), +1);
  }
  if (Needed(chunk) && p->inflight.size() < p->window) Fill(now, *p);
  return Flush();
}

std::span<const Action> Scheduler::OnChunkVerified(Time now, ChunkIndex chunk, PeerId from) {
  actions_.clear();
  if (chunk.value() >= n_) return Flush();
  const bool cap_was_full = outstanding_ >= options_.max_outstanding;
  bool cancelled = false;
  last_fetch_time_ = Duration(-1);
  Peer* src = FindPeer(from);
  if (src != nullptr) {
    Time sent = Time::min();
    for (const Request& r : src->inflight) {
      if (r.chunk == chunk) sent = r.sent;
    }
    if (RemoveRequest(*src, chunk) && sent != Time::min()) {
      last_fetch_time_ = std::max(Duration::zero(), now - sent);
      RecordDelivery(now, *src, sent);
    }
    src->consecutive_timeouts = 0;
    // A peer that delivers is not stalled: its other requests queue behind this one on the same
    // connection, so their deadlines count from this delivery. (On a rate-limited
    // node a window of large chunks takes longer than the timeout to drain while bytes keep
    // flowing; counted from their sending, the queued requests would time out and be re-asked,
    // over and over.)
    for (Request& r : src->inflight) {
      r.deadline = std::max(r.deadline, now + options_.request_timeout);
    }
  }
  if (have_.Insert(chunk)) {
    ++stats_.chunks_verified;
    if (options_.spread.Contains(chunk)) ++never_sent_;
    if (need_.Erase(chunk)) --missing_;
    need_unrequested_.Erase(chunk);
    UpdateEndgame();
    Emit(ActionKind::kAnnounceHave, PeerId(0), chunk);
    // Endgame duplicates: the chunk is here, so every other request for it is wasted upload.
    if (request_count_[chunk.value()] > 0) {
      for (Peer& p : peers_) {
        if (p.live && RemoveRequest(p, chunk)) {
          ++stats_.cancels_sent;
          cancelled = true;
          Emit(ActionKind::kCancelRequest, p.id, chunk);
        }
      }
    }
    if (missing_ == 0 && !complete_emitted_) {
      complete_emitted_ = true;
      Emit(ActionKind::kComplete, PeerId(0), chunk);
    }
  }
  // Only the sender's window changed, unless cancels freed others' or the total cap held
  // others back; filling just the sender keeps this O(window) on the hot path.
  if (cancelled || cap_was_full || src == nullptr) {
    FillAll(now);
  } else {
    Fill(now, *src);
  }
  return Flush();
}

std::span<const Action> Scheduler::OnChunkFailed(Time now, ChunkIndex chunk, PeerId from) {
  actions_.clear();
  ++stats_.chunks_failed;
  Peer* p = FindPeer(from);
  if (p != nullptr) {
    RemoveRequest(*p, chunk);
    DropPeer(now, *p, DropReason::kBadChunk);
  }
  TryServe(now);
  FillAll(now);
  return Flush();
}

std::span<const Action> Scheduler::OnRequestRejected(Time now, PeerId peer, ChunkIndex chunk) {
  actions_.clear();
  Peer* p = FindPeer(peer);
  if (p == nullptr || chunk.value() >= n_) return Flush();
  if (RemoveRequest(*p, chunk)) {
    if (p->refused.empty()) p->refused_until = now + options_.refusal_backoff;
    p->refused.Insert(chunk);
  }
  FillAll(now);
  return Flush();
}

std::span<const Action> Scheduler::OnRequestReceived(Time now, PeerId peer, ChunkIndex chunk) {
  actions_.clear();
  Peer* p = FindPeer(peer);
  if (p == nullptr) return Flush();  // not (or no longer) connected: nothing to answer
  if (chunk.value() >= n_) {
    DropPeer(now, *p, DropReason::kProtocolError);
    FillAll(now);
    return Flush();
  }
  for (const ServeItem& s : serve_queue_) {
    if (s.peer == peer && s.chunk == chunk) return Flush();
  }
  for (const ServeItem& s : uploading_) {
    if (s.peer == peer && s.chunk == chunk) return Flush();
  }
  if (!have_.Contains(chunk) || HoldRepeat(now, peer, chunk) ||
      uploading_.size() + serve_queue_.size() >= UploadSlots() + options_.serve_queue_limit) {
    ++stats_.requests_rejected;
    Emit(ActionKind::kRejectRequest, peer, chunk);
    return Flush();
  }
  serve_queue_.push_back(ServeItem{peer, chunk, arrivals_++, Time{0}});
  TryServe(now);
  return Flush();
}

std::span<const Action> Scheduler::OnCancelReceived(Time now, PeerId peer, ChunkIndex chunk) {
  actions_.clear();
  auto match = [&](const ServeItem& s) { return s.peer == peer && s.chunk == chunk; };
  auto q = std::find_if(serve_queue_.begin(), serve_queue_.end(), match);
  if (q != serve_queue_.end()) {
    serve_queue_.erase(q);
    return Flush();
  }
  auto u = std::find_if(uploading_.begin(), uploading_.end(), match);
  if (u != uploading_.end()) {
    uploading_.erase(u);
    Emit(ActionKind::kStopUpload, peer, chunk);
    TryServe(now);
  }
  return Flush();
}

std::span<const Action> Scheduler::OnUploadDone(Time now, PeerId peer, ChunkIndex chunk) {
  actions_.clear();
  auto u = std::find_if(uploading_.begin(), uploading_.end(),
                        [&](const ServeItem& s) { return s.peer == peer && s.chunk == chunk; });
  if (u != uploading_.end()) {
    // Smoothed like the request service time: a few uploads move it, one odd one does not.
    const double took = std::chrono::duration<double>(now - u->started).count();
    if (took > 0) upload_s_ = upload_s_ == 0 ? took : 0.7 * upload_s_ + 0.3 * took;
    uploading_.erase(u);
    ++stats_.chunks_uploaded;
  }
  TryServe(now);
  return Flush();
}

bool Scheduler::HoldRepeat(Time now, PeerId peer, ChunkIndex chunk) {
  if (!options_.spread_first || sent_count_[chunk.value()] == 0) return false;
  if (FirstRoundOpen()) return true;
  // The peer we sent it to holds it (or soon will). Not told by its HAVEs: a holder's decisions
  // must not depend on HAVEs for chunks it holds (the simulator skips those).
  Peer* p = FindPeer(peer);
  if (p == nullptr) return false;
  if (p->held_since.size() != n_) p->held_since.assign(n_, Time::min());
  Time& since = p->held_since[chunk.value()];
  if (since == Time::min()) since = now;
  // Held for the longer of the refusal backoff and two of our upload times: long enough for a
  // peer that got the chunk from us to pass it on, short enough that an asker none of whose
  // own peers holds it (a tensor-subset neighbourhood) is served soon.
  // Until an upload completes, the oldest running one says how long uploads take at least
  // (a first round of a few large chunks runs for seconds with no sample yet). Only until then:
  // afterwards one stalled receiver must not stretch the hold for everyone. Capped by the
  // request timeout, after which an asker would give up on us anyway.
  double upload_s = upload_s_;
  if (upload_s == 0) {
    for (const ServeItem& u : uploading_) {
      upload_s = std::max(upload_s, std::chrono::duration<double>(now - u.started).count());
    }
  }
  const Duration hold = std::max<Duration>(
      options_.refusal_backoff,
      std::min<Duration>(
          options_.request_timeout,
          std::chrono::duration_cast<Duration>(std::chrono::duration<double>(2 * upload_s))));
  return now - since < hold;
}

void Scheduler::TryServe(Time now) {
  const size_t slots = UploadSlots();
  while (uploading_.size() < slots && !serve_queue_.empty()) {
    // Whom to serve: first come, first served, so no request starves; except that a spreading
    // source serves never-sent chunks before anything else while some remain.
    size_t best = 0;
    const bool spreading = options_.spread_first && FirstRoundOpen();
    for (size_t i = 1; spreading && i < serve_queue_.size(); ++i) {
      const ServeItem& a = serve_queue_[i];
      const ServeItem& b = serve_queue_[best];
      const uint32_t sa = sent_count_[a.chunk.value()];
      const uint32_t sb = sent_count_[b.chunk.value()];
      if (sa < sb || (sa == sb && a.arrival < b.arrival)) best = i;
    }
    const ServeItem item = serve_queue_[best];
    serve_queue_.erase(serve_queue_.begin() + static_cast<std::ptrdiff_t>(best));
    uint32_t& sent = sent_count_[item.chunk.value()];
    if (HoldRepeat(now, item.peer, item.chunk)) {
      ++stats_.requests_rejected;
      Emit(ActionKind::kRejectRequest, item.peer, item.chunk);
      continue;
    }
    if (sent++ == 0 && options_.spread.Contains(item.chunk)) --never_sent_;
    uploading_.push_back(item);
    uploading_.back().started = now;
    Emit(ActionKind::kSendChunk, item.peer, item.chunk);
  }
}

std::span<const Action> Scheduler::OnTimer(Time now) {
  actions_.clear();
  for (Peer& p : peers_) {
    if (!p.live) continue;
    for (size_t i = 0; i < p.inflight.size();) {
      if (p.inflight[i].deadline > now) {
        ++i;
        continue;
      }
      const ChunkIndex c = p.inflight[i].chunk;
      ++stats_.timeouts;
      ++stats_.cancels_sent;
      Emit(ActionKind::kCancelRequest, p.id, c);
      RemoveRequest(p, c);  // swaps the last request into slot i
      if (p.refused.empty()) p.refused_until = now + options_.refusal_backoff;
      p.refused.Insert(c);
      if (options_.adaptive_window) p.window = 1;  // a peer that lets a request time out
      if (++p.consecutive_timeouts >= options_.max_consecutive_timeouts) {
        DropPeer(now, p, DropReason::kTimeouts);
        break;
      }
    }
  }
  TryServe(now);
  FillAll(now);
  return Flush();
}

Time Scheduler::next_deadline() const {
  Time t = Time::max();
  for (const Peer& p : peers_) {
    if (!p.live) continue;
    for (const Request& r : p.inflight) t = std::min(t, r.deadline);
  }
  return t;
}

}  // namespace weightcast::swarm
