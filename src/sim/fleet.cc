// The simulated fleet: one event loop over flows, arrivals, deaths and membership changes, driving
// the same swarm::PeerProtocol and coord::Membership objects the agents and the coordinator run.
// One file because every handler reads and writes the same fleet state (nodes, flows, edges);
// the flow model is sim/network, the bounds are at the end.
#include "sim/fleet.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <thread>

#include "coord/membership.h"
#include "sim/network.h"
#include "sim/side_worker.h"
#include "swarm/peer_graph.h"
#include "swarm/peer_protocol.h"

namespace weightcast::sim {
namespace {

using swarm::Effect;
using swarm::EffectKind;
using swarm::Message;
using swarm::MessageType;
using swarm::PeerProtocol;

enum class Ev : uint8_t {
  kRequest,
  kCancel,
  kReject,
  kHave,
  kArrive,
  kTimer,
  kDie,
  kJoin,
  kPeerGone,
  kLink,        // an edge the peer graph made: its ends connect
  kHeartbeats,  // every live node's heartbeat reaches the coordinator (a round per interval)
  kSweep,       // the coordinator's sweep: deaths at the heartbeat timeout, peer graph changes
  kSample
};

struct Event {
  double t;
  uint64_t seq;
  uint32_t to, from, chunk;
  Ev kind;
  // kRequest, kCancel, kReject: the message's code (the PayloadKind asked for); kArrive: the
  // item's PayloadKind; kHave: the announced flags (kHaveWhole, kHavePayload).
  uint8_t code;
  bool operator>(const Event& o) const { return t > o.t || (t == o.t && seq > o.seq); }
};

struct Upload {
  FlowId flow;
  uint32_t peer;
  uint32_t chunk;
};

struct SimNode {
  std::optional<PeerProtocol> proto;  // what an agent runs (swarm/peer_protocol.h)
  bool alive = true;
  bool joined = true;
  NodeRole role = NodeRole::kHealthy;
  std::vector<uint32_t> nbrs;
  std::vector<uint8_t> link_up;  // parallel to nbrs
  std::vector<uint8_t> listed;   // parallel to nbrs: the edge is in the peer graph
  // Parallel to nbrs: where this node sits in nodes_[nbrs[k]].nbrs, so the HAVE fan-out reads
  // the neighbour's side of a link without scanning its list.
  std::vector<uint32_t> rev;
  std::vector<Upload> uploads;
  double completed_at = -1;
  double died_at = -1;
  double quarantined_at = -1;
  double joined_at = 0;
  double bytes_in = 0, bytes_out = 0, verified_bytes = 0;
  uint32_t bans = 0, banned_by = 0;
};

PeerId ToPeer(uint32_t node) { return PeerId(node + 1); }
uint32_t ToNode(PeerId peer) { return static_cast<uint32_t>(peer.value() - 1); }
swarm::Time ToTime(double seconds) { return swarm::Time(static_cast<int64_t>(seconds * 1e9)); }

// Every node runs one version: whole chunks, or a delta step's payloads onto a base it holds.
constexpr Version kVersion(1);

// A flow's tag: the chunk and the kind of item it carries (a whole chunk or a delta payload).
uint64_t FlowTag(uint32_t chunk, swarm::PayloadKind item) {
  return uint64_t{chunk} | (uint64_t(item) << 32);
}
uint32_t TagChunk(uint64_t tag) { return static_cast<uint32_t>(tag); }
uint8_t TagItem(uint64_t tag) { return static_cast<uint8_t>(tag >> 32); }

// Receivers whose completion the run waits for: not those that die, nor bad ones (their
// neighbours ban them, and a node banned by all of them cannot finish).
bool Awaited(NodeRole role) { return role != NodeRole::kDies && role != NodeRole::kBad; }

// A control message as the protocol's owner would have parsed it off the wire.
Message Control(MessageType type, uint32_t chunk, uint8_t code) {
  return Message{.type = type, .version = kVersion.value(), .chunk = chunk, .code = code};
}

class Fleet {
 public:
  explicit Fleet(const FleetConfig& c)
      : cfg_(c),
        have_to_holders_(c.have_to_holders),
        delta_(!c.payload_bytes.empty()),
        rng_(c.seed),
        side_(c.threads == 0 ? std::thread::hardware_concurrency() >= 2 : c.threads >= 2) {}
  Result<FleetResult> Run();

 private:
  double ChunkSize(uint32_t c) const {
    const double start = double(c) * double(cfg_.chunk_bytes);
    return std::min(double(cfg_.chunk_bytes), double(cfg_.total_bytes) - start);
  }
  // The bytes on the wire of chunk c sent as `item`: its delta payload, or the whole chunk (a
  // delta target still serves whole chunks to a peer that asks for them).
  double ItemSize(uint32_t c, uint8_t item) const {
    return item == uint8_t(swarm::PayloadKind::kCodec) ? double(cfg_.payload_bytes[c])
                                                       : ChunkSize(c);
  }
  // What a receiver fetches of chunk c: its payload in a delta step (0: copied from the base),
  // the chunk otherwise.
  double WantedSize(uint32_t c) const {
    return delta_ ? double(cfg_.payload_bytes[c]) : ChunkSize(c);
  }
  swarm::TargetSpec SpecOf(uint32_t i) const;
  void Push(double t, Ev kind, uint32_t to, uint32_t from, uint32_t chunk, uint8_t code = 0) {
    queue_.push(Event{t, seq_++, to, from, chunk, kind, code});
  }
  int LinkIndex(uint32_t a, uint32_t b) const {
    const std::vector<uint32_t>& v = nodes_[a].nbrs;
    for (size_t k = 0; k < v.size(); ++k) {
      if (v[k] == b) return static_cast<int>(k);
    }
    return -1;
  }
  bool Linked(uint32_t a, uint32_t b) const {
    const int k = LinkIndex(a, b);
    return k >= 0 && nodes_[a].link_up[k] != 0;
  }
  void SetLink(uint32_t a, uint32_t b, bool up) {
    const int k = LinkIndex(a, b);
    if (k >= 0) nodes_[a].link_up[k] = up ? 1 : 0;
  }
  void Connect(double now, uint32_t a, uint32_t b);
  coord::MemberInfo MemberOf(uint32_t i) const;
  // What the coordinator does after a membership change (coord::Membership, the core it runs):
  // its peer graph changes. Edges it drops close (agents close connections to peers no longer
  // listed); edges it makes connect one round trip later (the coordinator's push, the connect).
  void ApplyGraphChange(double now, const swarm::PeerGraphChange& change);
  void ListEdge(uint32_t a, uint32_t b);
  void UnlistEdge(double now, uint32_t a, uint32_t b);
  void StopFlows(double now, uint32_t from, uint32_t to);
  void Apply(double now, uint32_t i, std::span<const Effect> effects);
  void Kill(double now, uint32_t i);
  void OnFlowDone(double now, FlowId f);
  void OnArrive(double now, const Event& e);
  void Sample(double now);
  bool AllDone() const;
  // Nodes 1..N receive; 0 is the source, and N+1.. are the origin's shares (when it has one).
  bool Receiver(uint32_t i) const { return i >= 1 && i < receivers_end_; }
  // The origin as the granted receivers see it: one source node per share, holding the share's
  // chunks, linked to its receiver only, all behind one uplink of the origin's bandwidth.
  void AddOrigin(std::vector<NodeLink>& links, std::vector<RackLink>& racks);

  FleetConfig cfg_;
  bool have_to_holders_;
  bool delta_;  // a delta step: receivers hold the base and fetch payloads
  std::mt19937_64 rng_;
  std::vector<SimNode> nodes_;
  std::optional<Network> net_;
  std::optional<coord::Membership> membership_;
  // Registrations (or ban reports) the next sweep puts into the peer graph.
  bool joins_pending_ = false;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  uint64_t seq_ = 0;
  uint32_t chunks_ = 0;
  uint32_t receivers_end_ = 0;  // N + 1
  uint32_t origin_shares_ = 0;  // m: the origin's nodes are N+1 .. N+m
  double want_bytes_ = 0;
  uint32_t complete_ = 0;
  uint32_t pending_ = 0;  // receivers still expected to complete
  FleetResult result_;
  // The HAVE fan-out: its recipients and their protocols' answers, then carried out in order.
  SideWorker side_;
  std::vector<uint32_t> fanout_;  // indexes into the announcer's nbrs
  std::vector<std::span<const Effect>> answers_;
  std::vector<uint8_t> delivered_;  // the neighbour was alive and linked back
};

void Fleet::Connect(double now, uint32_t a, uint32_t b) {
  SetLink(a, b, true);
  SetLink(b, a, true);
  // Both sides learn of the connection before either have-set arrives (they go at once, see
  // Apply). b's effects are copied: delivering a's have-set to b calls b again.
  const swarm::Time t = ToTime(now);
  const std::span<const Effect> from_a = nodes_[a].proto->OnPeerConnected(t, ToPeer(b));
  const std::span<const Effect> from_b_span = nodes_[b].proto->OnPeerConnected(t, ToPeer(a));
  const std::vector<Effect> from_b(from_b_span.begin(), from_b_span.end());
  Apply(now, a, from_a);
  Apply(now, b, from_b);
}

void Fleet::Apply(double now, uint32_t i, std::span<const Effect> effects) {
  SimNode& node = nodes_[i];
  for (const Effect& e : effects) {
    const uint32_t c = e.chunk.value();
    switch (e.kind) {
      case EffectKind::kSend: {
        const uint32_t peer = ToNode(e.peer);
        if (!Linked(i, peer)) break;
        switch (e.message.type) {
          case MessageType::kRequest:
            Push(now + cfg_.latency, Ev::kRequest, peer, i, e.message.chunk, e.message.code);
            break;
          case MessageType::kCancel:
            Push(now + cfg_.latency, Ev::kCancel, peer, i, e.message.chunk, e.message.code);
            break;
          case MessageType::kReject:
            Push(now + cfg_.latency, Ev::kReject, peer, i, e.message.chunk, e.message.code);
            break;
          case MessageType::kSwarmHave:
            // Sent only when a link comes up: handed over at once, as the scheduler used to
            // be given the peer's have-set on connect. The receiver's effects never include a
            // have-set, so this does not come back to node i.
            if (nodes_[peer].alive) {
              Apply(now, peer, nodes_[peer].proto->OnMessage(ToTime(now), ToPeer(i), e.message));
            }
            break;
          default:
            break;
        }
        break;
      }
      case EffectKind::kUpload: {
        const uint32_t peer = ToNode(e.peer);
        if (Linked(i, peer) && nodes_[peer].alive) {
          const FlowId f =
              net_->Start(now, i, peer, ItemSize(c, uint8_t(e.item)), FlowTag(c, e.item));
          node.uploads.push_back(Upload{f, peer, c});
        } else {
          // The receiver is gone but we have not noticed yet; the slot frees when we do.
        }
        break;
      }
      case EffectKind::kStopUpload: {
        const uint32_t peer = ToNode(e.peer);
        for (size_t k = 0; k < node.uploads.size(); ++k) {
          if (node.uploads[k].peer == peer && node.uploads[k].chunk == c) {
            node.bytes_out += net_->Stop(now, node.uploads[k].flow);
            node.uploads[k] = node.uploads.back();
            node.uploads.pop_back();
            break;
          }
        }
        break;
      }
      case EffectKind::kAnnounce:
        // One event for the whole broadcast (every link has the same latency); it fans out to
        // the neighbours still linked when it lands. Keeps the queue N*C, not N*C*degree.
        node.verified_bytes += WantedSize(c);
        Push(now + cfg_.latency, Ev::kHave, i, i, c, e.flags);
        break;
      case EffectKind::kClose: {
        const uint32_t peer = ToNode(e.peer);
        SetLink(i, peer, false);
        if (e.ban) {
          // It sent a corrupt item: the agent drops the connection, so what the banned peer is
          // still sending stops here (its own protocol hears of the close after the latency).
          ++result_.bans;
          ++node.bans;
          ++nodes_[peer].banned_by;
          StopFlows(now, peer, i);
        }
        Push(now + cfg_.latency, Ev::kPeerGone, peer, i, 0);
        break;
      }
      case EffectKind::kComplete:
        if (node.completed_at < 0 && Receiver(i)) {
          node.completed_at = now;
          ++complete_;
          if (pending_ > 0 && Awaited(node.role)) --pending_;
        }
        break;
      case EffectKind::kNewEpoch:
      case EffectKind::kFetchWhole:
      case EffectKind::kFetchTime:
      case EffectKind::kFailed:
        break;  // one version of whole chunks, nothing stored: nothing to carry out
    }
  }
}

void Fleet::AddOrigin(std::vector<NodeLink>& links, std::vector<RackLink>& racks) {
  if (cfg_.origin_bandwidth <= 0) return;
  origin_shares_ = std::min(std::max<uint32_t>(cfg_.origin_fetchers, 1), cfg_.receivers);
  const auto rack = static_cast<int32_t>(racks.size());
  racks.push_back(RackLink{cfg_.origin_bandwidth, cfg_.origin_bandwidth});
  for (uint32_t k = 0; k < origin_shares_; ++k) {
    links.push_back(NodeLink{
        .up = cfg_.origin_bandwidth, .down = cfg_.origin_bandwidth, .shared = false, .rack = rack});
  }
  nodes_.resize(nodes_.size() + origin_shares_);
}

coord::MemberInfo Fleet::MemberOf(uint32_t i) const {
  coord::MemberInfo info{.channels = {"weights"}, .rack = {}, .source = i == 0};
  if (cfg_.rack_size > 0) info.rack = "r" + std::to_string(i / cfg_.rack_size);
  return info;
}

net::TimePoint ToTimePoint(double seconds) {
  return net::TimePoint(std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9)));
}

void Fleet::ApplyGraphChange(double now, const swarm::PeerGraphChange& change) {
  ++result_.membership_events;
  result_.edges_added += change.added.size();
  result_.edges_dropped += change.removed.size();
  result_.edges_detached += change.detached.size();
  result_.max_dropped_per_event =
      std::max<uint64_t>(result_.max_dropped_per_event, change.removed.size());
  for (const swarm::Edge& e : change.detached) UnlistEdge(now, ToNode(e.a), ToNode(e.b));
  for (const swarm::Edge& e : change.removed) UnlistEdge(now, ToNode(e.a), ToNode(e.b));
  for (const swarm::Edge& e : change.added) {
    ListEdge(ToNode(e.a), ToNode(e.b));
    Push(now + 2 * cfg_.latency, Ev::kLink, ToNode(e.a), ToNode(e.b), 0);
  }
}

void Fleet::ListEdge(uint32_t a, uint32_t b) {
  const int k = LinkIndex(a, b);
  if (k >= 0) {
    nodes_[a].listed[k] = 1;
    nodes_[b].listed[nodes_[a].rev[k]] = 1;
    return;
  }
  SimNode& x = nodes_[a];
  SimNode& y = nodes_[b];
  x.rev.push_back(static_cast<uint32_t>(y.nbrs.size()));
  y.rev.push_back(static_cast<uint32_t>(x.nbrs.size()));
  x.nbrs.push_back(b);
  y.nbrs.push_back(a);
  x.link_up.push_back(0);
  y.link_up.push_back(0);
  x.listed.push_back(1);
  y.listed.push_back(1);
}

void Fleet::UnlistEdge(double now, uint32_t a, uint32_t b) {
  const int k = LinkIndex(a, b);
  if (k < 0) return;
  const uint32_t back = nodes_[a].rev[k];
  nodes_[a].listed[k] = 0;
  nodes_[b].listed[back] = 0;
  if (!nodes_[a].link_up[k] && !nodes_[b].link_up[back]) return;  // not up, or a dead end
  // Closed: what is in flight on it stops, and each end's protocol hears of it.
  nodes_[a].link_up[k] = 0;
  nodes_[b].link_up[back] = 0;
  StopFlows(now, a, b);
  StopFlows(now, b, a);
  Push(now + cfg_.latency, Ev::kPeerGone, a, b, 0);
  Push(now + cfg_.latency, Ev::kPeerGone, b, a, 0);
}

void Fleet::StopFlows(double now, uint32_t from, uint32_t to) {
  SimNode& sender = nodes_[from];
  for (size_t k = 0; k < sender.uploads.size();) {
    if (sender.uploads[k].peer != to) {
      ++k;
      continue;
    }
    sender.bytes_out += net_->Stop(now, sender.uploads[k].flow);
    sender.uploads[k] = sender.uploads.back();
    sender.uploads.pop_back();
  }
}

void Fleet::Kill(double now, uint32_t i) {
  SimNode& node = nodes_[i];
  if (!node.alive) return;
  node.alive = false;
  node.died_at = now;
  if (node.completed_at < 0 && Receiver(i) && Awaited(node.role) && pending_ > 0) --pending_;
  // Flows in and out stop now; the bytes already moved count as aborted.
  while (!net_->flows_out(i).empty()) node.bytes_out += net_->Stop(now, net_->flows_out(i)[0]);
  while (!net_->flows_in(i).empty()) {
    const FlowId f = net_->flows_in(i)[0];
    SimNode& sender = nodes_[net_->src(f)];
    sender.bytes_out += net_->Stop(now, f);
    for (size_t k = 0; k < sender.uploads.size(); ++k) {
      if (sender.uploads[k].flow == f) {
        sender.uploads[k] = sender.uploads.back();
        sender.uploads.pop_back();
        break;
      }
    }
  }
  node.uploads.clear();
  for (size_t k = 0; k < node.nbrs.size(); ++k) {
    if (!node.link_up[k]) continue;
    node.link_up[k] = 0;
    SetLink(node.nbrs[k], i, false);
    Push(now + cfg_.detect_delay, Ev::kPeerGone, node.nbrs[k], i, 0);
  }
}

void Fleet::OnFlowDone(double now, FlowId f) {
  const uint32_t src = net_->src(f), dst = net_->dst(f);
  const uint32_t c = TagChunk(net_->tag(f));
  const double bytes = net_->bytes(f);
  SimNode& s = nodes_[src];
  s.bytes_out += bytes;
  if (src == 0 && result_.source_first_round_done < 0 && s.bytes_out >= want_bytes_) {
    result_.source_first_round_done = now;
  }
  for (size_t k = 0; k < s.uploads.size(); ++k) {
    if (s.uploads[k].flow == f) {
      s.uploads[k] = s.uploads.back();
      s.uploads.pop_back();
      break;
    }
  }
  Push(now + cfg_.latency, Ev::kArrive, dst, src, c, TagItem(net_->tag(f)));
  Apply(now, src, s.proto->OnUploadDone(ToTime(now), s.proto->epoch(), ToPeer(dst), ChunkIndex(c)));
}

// A chunk item landed: checked when it answers an open request (an agent drops the rest unread).
// An item from a bad node fails its check, as a corrupt payload or chunk fails its hash at an
// agent; the protocol then bans the sender and asks someone else.
void Fleet::OnArrive(double now, const Event& e) {
  SimNode& to = nodes_[e.to];
  const swarm::Time t = ToTime(now);
  const ChunkIndex chunk(e.chunk);
  const double bytes = ItemSize(e.chunk, e.code);
  to.bytes_in += bytes;
  const swarm::Arrival arrival =
      to.proto->OnChunkArrived(t, ToPeer(e.from), kVersion, chunk, e.code);
  if (!arrival.check) {
    result_.duplicate_bytes += bytes;
    return;
  }
  if (nodes_[e.from].role != NodeRole::kBad) {
    Apply(now, e.to,
          to.proto->OnChunkChecked(t, arrival.epoch, ToPeer(e.from), chunk,
                                   swarm::CheckOutcome::kOk, std::string()));
    return;
  }
  ++result_.bad_arrivals;
  const std::span<const Effect> effects =
      to.proto->OnChunkChecked(t, arrival.epoch, ToPeer(e.from), chunk,
                               swarm::CheckOutcome::kCorrupt, "does not match its manifest hash");
  // The corrupt item must not count as held: no HAVE of it, no completion on it.
  for (const Effect& effect : effects) {
    if ((effect.kind == EffectKind::kAnnounce && effect.chunk == chunk) ||
        effect.kind == EffectKind::kComplete) {
      ++result_.corrupt_accepted;
    }
  }
  Apply(now, e.to, effects);
}

// What node i holds and wants, as node::SwarmNode builds it: the source seeds every chunk (and,
// in a delta step, every payload); a receiver wants every chunk, and in a delta step it holds
// the unchanged ones already (copied from its base) and fetches payloads for the others.
swarm::TargetSpec Fleet::SpecOf(uint32_t i) const {
  const bool source = i == 0;
  swarm::TargetSpec spec{.version = kVersion,
                         .chunk_count = chunks_,
                         .whole = std::vector<bool>(chunks_, source),
                         .payload = std::vector<bool>(chunks_, false),
                         .want = std::vector<bool>(chunks_, true),
                         .source = source,
                         .fetch_payloads = delta_ && !source,
                         .total_bytes = cfg_.total_bytes,
                         .chunk_bytes = cfg_.chunk_bytes,
                         .payload_bytes = cfg_.payload_bytes,
                         .seed = cfg_.seed * 1000003 + i,
                         .preferred = {}};
  if (delta_) {
    for (uint32_t c = 0; c < chunks_; ++c) {
      const bool changed = cfg_.payload_bytes[c] != 0;
      if (source) spec.payload[c] = changed;
      if (!source && !changed) spec.whole[c] = true;
    }
  }
  return spec;
}

void Fleet::Sample(double now) {
  double got = 0;
  for (uint32_t i = 1; i < receivers_end_; ++i) {
    if (nodes_[i].alive) got += nodes_[i].verified_bytes;
  }
  uint32_t live = 0;
  for (uint32_t i = 1; i < receivers_end_; ++i) live += nodes_[i].alive ? 1 : 0;
  result_.progress.push_back(
      ProgressSample{now, live > 0 ? got / (want_bytes_ * live) : 1.0, complete_});
}

bool Fleet::AllDone() const { return pending_ == 0; }

Result<FleetResult> Fleet::Run() {
  const FleetConfig& c = cfg_;
  if (c.receivers == 0) return InvalidArgument("sim: need at least one receiver");
  if (c.total_bytes == 0 || c.chunk_bytes == 0) {
    return InvalidArgument("sim: total and chunk size must be positive");
  }
  if (c.bandwidth <= 0) return InvalidArgument("sim: bandwidth must be positive");
  const uint64_t chunks64 = (c.total_bytes + c.chunk_bytes - 1) / c.chunk_bytes;
  if (chunks64 > (1u << 24)) {
    return InvalidArgument("sim: " + std::to_string(chunks64) +
                           " chunks is too many to simulate; use a larger chunk size");
  }
  chunks_ = static_cast<uint32_t>(chunks64);
  if (c.bad_fraction < 0 || c.bad_fraction >= 1) {
    return InvalidArgument("sim: the bad fraction must be in [0, 1)");
  }
  if (delta_) {
    if (c.payload_bytes.size() != chunks_) {
      return InvalidArgument("sim: " + std::to_string(c.payload_bytes.size()) +
                             " payload sizes for " + std::to_string(chunks_) + " chunks");
    }
    want_bytes_ = 0;
    for (uint32_t i = 0; i < chunks_; ++i) {
      want_bytes_ += double(c.payload_bytes[i]);
      result_.changed_chunks += c.payload_bytes[i] != 0 ? 1 : 0;
    }
    if (want_bytes_ <= 0) return InvalidArgument("sim: a delta step with no changed chunk");
  } else {
    want_bytes_ = double(c.total_bytes);
    result_.changed_chunks = chunks_;
  }
  const uint32_t n = c.receivers + 1;
  // The bounds of docs/simulator.md hold for what every receiver must take in: S, or P.
  const double s = want_bytes_;
  result_.wanted_bytes = want_bytes_;
  result_.chunks = chunks_;
  if (c.origin_bandwidth < 0) return InvalidArgument("sim: the origin's bandwidth must be >= 0");
  result_.lower_bound = c.shared ? SharedBound(s, c.bandwidth, c.receivers, c.origin_bandwidth)
                                 : FullDuplexBound(s, c.bandwidth);
  if (c.rack_size > 0) {
    result_.lower_bound =
        std::max(result_.lower_bound, RackBound(s, c.bandwidth, c.rack_size, c.oversubscription));
  }
  const double bound = result_.lower_bound;

  // Roles, drawn from the seed over receivers 1..N.
  nodes_.resize(n);
  std::vector<uint32_t> order(c.receivers);
  for (uint32_t i = 0; i < c.receivers; ++i) order[i] = i + 1;
  std::shuffle(order.begin(), order.end(), rng_);
  size_t next = 0;
  auto take = [&](double fraction, NodeRole role) {
    const size_t k = static_cast<size_t>(std::llround(fraction * c.receivers));
    for (size_t j = 0; j < k && next < order.size(); ++j) nodes_[order[next++]].role = role;
  };
  take(c.die_fraction, NodeRole::kDies);
  take(c.straggler_fraction, NodeRole::kStraggler);
  take(c.late_fraction, NodeRole::kLate);
  take(c.bad_fraction, NodeRole::kBad);

  std::vector<NodeLink> links(n);
  std::vector<RackLink> racks;
  for (uint32_t i = 0; i < n; ++i) {
    const double speed = nodes_[i].role == NodeRole::kStraggler ? c.straggler_speed : 1.0;
    links[i].up = c.bandwidth * speed;
    links[i].down = c.bandwidth * speed;
    links[i].shared = c.shared;
    links[i].rack = c.rack_size > 0 ? static_cast<int32_t>(i / c.rack_size) : -1;
  }
  if (c.rack_size > 0) {
    const double uplink = c.rack_size * c.bandwidth / c.oversubscription;
    racks.assign((n + c.rack_size - 1) / c.rack_size, RackLink{uplink, uplink});
  }
  // The rebalance interval was chosen for bounds of minutes (docs/simulator.md). A delta step's
  // bound is milliseconds, and a finished flow's capacity waiting 100 ms for the next rebalance
  // would dominate it: there the interval is at most a thousandth of the bound.
  const double rebalance =
      delta_ ? std::min(c.rebalance_interval, bound / 1000) : c.rebalance_interval;
  receivers_end_ = n;
  AddOrigin(links, racks);
  net_.emplace(std::move(links), std::move(racks), rebalance);

  for (uint32_t i = 0; i < n; ++i) {
    SimNode& node = nodes_[i];
    // Node 0 is the source (spread_first); the others are receivers.
    node.proto.emplace(
        swarm::PeerProtocolOptions{.node_id = ToPeer(i), .source = i == 0, .tuning = c.tuning});
    WC_ASSIGN_OR_RETURN(std::span<const Effect> started,
                        node.proto->SetTarget(ToTime(0), SpecOf(i)));
    (void)started;  // no peers yet: nothing to send
    node.joined = node.role != NodeRole::kLate;
  }
  // The coordinator's membership core, with the agents' settings. The fleet that registered
  // before the broadcast makes one graph, as nodes registering within one sweep do; late
  // joiners register when they come, deaths are found at the heartbeat timeout.
  if (c.heartbeat_timeout <= 0) return InvalidArgument("sim: heartbeat timeout must be positive");
  WC_ASSIGN_OR_RETURN(
      coord::Membership membership,
      coord::Membership::Create({.heartbeat_timeout = std::chrono::nanoseconds(
                                     static_cast<int64_t>(c.heartbeat_timeout * 1e9)),
                                 .forget_after = std::chrono::hours(24 * 365),
                                 .peers = {.degree = c.tuning.degree,
                                           .same_rack_fraction = c.tuning.same_rack_fraction,
                                           .seed = c.seed},
                                 .source_degree = c.tuning.SourceDegree()}));
  membership_.emplace(std::move(membership));
  for (uint32_t i = 0; i < n; ++i) {
    if (nodes_[i].joined) membership_->Register(ToPeer(i), MemberOf(i), ToTimePoint(0));
  }
  for (const auto& [channel, built] : membership_->UpdatePeerGraphs()) {
    for (const swarm::Edge& e : built.added) ListEdge(ToNode(e.a), ToNode(e.b));
  }
  pending_ = 0;
  for (uint32_t i = 1; i < n; ++i) pending_ += Awaited(nodes_[i].role) ? 1 : 0;

  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t j : nodes_[i].nbrs) {
      if (j > i) Connect(0, i, j);
    }
  }
  // The origin's shares, each to its receiver (picked evenly over 1..N, as the coordinator
  // picks fetchers evenly over their ids).
  for (uint32_t k = 0; k < origin_shares_; ++k) {
    const uint32_t o = n + k;
    const uint32_t granted = 1 + k * c.receivers / origin_shares_;
    SimNode& node = nodes_[o];
    node.proto.emplace(
        swarm::PeerProtocolOptions{.node_id = ToPeer(o), .source = true, .tuning = c.tuning});
    swarm::TargetSpec spec = SpecOf(0);
    for (uint32_t ch = 0; ch < chunks_; ++ch) {
      spec.whole[ch] = ch % origin_shares_ == k;
      spec.want[ch] = spec.whole[ch];
      spec.payload[ch] = false;
    }
    spec.seed = c.seed * 1000003 + o;
    WC_ASSIGN_OR_RETURN(std::span<const Effect> started, node.proto->SetTarget(ToTime(0), spec));
    (void)started;
    ListEdge(o, granted);
    if (nodes_[granted].joined) Connect(0, o, granted);
    Push(0, Ev::kTimer, o, o, 0);
  }
  std::uniform_real_distribution<double> jitter(0, c.tick);
  for (uint32_t i = 0; i < n; ++i) {
    if (nodes_[i].joined) Push(jitter(rng_), Ev::kTimer, i, i, 0);
    if (nodes_[i].role == NodeRole::kDies) Push(c.die_at * bound, Ev::kDie, i, i, 0);
    if (nodes_[i].role == NodeRole::kLate) Push(c.late_at * bound, Ev::kJoin, i, i, 0);
  }
  if (c.source_leaves_at >= 0) Push(c.source_leaves_at, Ev::kDie, 0, 0, 0);
  const double sample_every = bound / std::max<uint32_t>(c.samples, 1);
  Push(0, Ev::kSample, 0, 0, 0);
  const double heartbeat_every = c.heartbeat_timeout / 3;  // the agents' default interval
  constexpr double kSweepEvery = 0.1;                      // the coordinator's sweep period
  Push(heartbeat_every, Ev::kHeartbeats, 0, 0, 0);
  Push(kSweepEvery, Ev::kSweep, 0, 0, 0);

  // A delta step's bound can be milliseconds, less than a tick or a request timeout: the limit
  // is taken of at least a second.
  const double limit = c.time_limit_factor * std::max(bound, 1.0);
  double now = 0;
  while (!AllDone()) {
    const double tn = net_->NextEvent();
    const double te = queue_.empty() ? Network::kNever : queue_.top().t;
    if (tn >= Network::kNever && te >= Network::kNever) break;
    now = std::min(tn, te);
    if (now > limit) break;
    ++result_.events;
    if (tn <= te) {
      if (const std::optional<FlowId> f = net_->Step()) OnFlowDone(now, *f);
      continue;
    }
    const Event e = queue_.top();
    queue_.pop();
    SimNode& to = nodes_[e.to];
    const swarm::Time t = ToTime(now);
    const ChunkIndex chunk(e.chunk);
    if (e.kind == Ev::kSample) {
      Sample(now);
      Push(now + sample_every, Ev::kSample, 0, 0, 0);
      continue;
    }
    if (e.kind == Ev::kHeartbeats) {
      for (uint32_t i = 0; i < n; ++i) {
        if (!nodes_[i].alive || !nodes_[i].joined) continue;
        membership_->Heard(ToPeer(i), ToTimePoint(now));
        // As an agent's heartbeat: the peers it bans now, which the coordinator keeps apart.
        if (nodes_[i].proto && membership_->ReportBans(ToPeer(i), nodes_[i].proto->Banned(t))) {
          joins_pending_ = true;
        }
      }
      for (uint32_t i = 0; i < n; ++i) {
        if (nodes_[i].banned_by > 0 && nodes_[i].quarantined_at < 0 &&
            membership_->quarantined(ToPeer(i))) {
          nodes_[i].quarantined_at = now;
        }
      }
      Push(now + heartbeat_every, Ev::kHeartbeats, 0, 0, 0);
      continue;
    }
    if (e.kind == Ev::kSweep) {
      const bool died = !membership_->Sweep(ToTimePoint(now), [](PeerId) { return false; }).empty();
      if (died || joins_pending_) {
        for (const auto& [channel, change] : membership_->UpdatePeerGraphs()) {
          ApplyGraphChange(now, change);
        }
        joins_pending_ = false;
      }
      Push(now + kSweepEvery, Ev::kSweep, 0, 0, 0);
      continue;
    }
    if (!to.alive) continue;
    switch (e.kind) {
      case Ev::kRequest:
      case Ev::kCancel:
      case Ev::kReject:
        if (Linked(e.to, e.from)) {
          const MessageType type = e.kind == Ev::kRequest  ? MessageType::kRequest
                                   : e.kind == Ev::kCancel ? MessageType::kCancel
                                                           : MessageType::kReject;
          Apply(now, e.to, to.proto->OnMessage(t, ToPeer(e.from), Control(type, e.chunk, e.code)));
        }
        break;
      case Ev::kHave: {
        // e.to == e.from: the announcing node. Its protocol names the neighbours that need the
        // HAVE (ForEachHaveRecipient skips those that told it they hold the chunk), in id
        // order; with have_to_holders every neighbour gets it, in the same order.
        const Message have = Control(MessageType::kHave, e.chunk, e.code);
        // The announcer's side here; the neighbour's side (alive, its end of the link up) is
        // read in the parallel part, where its cache misses are shared out.
        fanout_.clear();
        auto add = [&](uint32_t j) {
          const int k = LinkIndex(e.to, j);
          if (k >= 0 && to.link_up[k] != 0) fanout_.push_back(static_cast<uint32_t>(k));
        };
        if (have_to_holders_) {
          std::vector<uint32_t> all = to.nbrs;
          std::sort(all.begin(), all.end());
          for (uint32_t j : all) add(j);
        } else {
          to.proto->ForEachHaveRecipient(chunk, e.code, [&](PeerId peer) { add(ToNode(peer)); });
        }
        // Each recipient's protocol reads and writes its own state only, so they take the HAVE
        // side by side. Their effects are carried out afterwards in the recipients' order, which
        // is the order one thread delivering and carrying out in turn would have used: a
        // recipient's effects never reach another protocol at once (requests, cancels and
        // closes travel as events, uploads go to the network), except a have-set, which only a
        // new link or target sends and is refused here.
        answers_.resize(fanout_.size());
        delivered_.resize(fanout_.size());
        const PeerId from = ToPeer(e.from);
        side_.ForEach(fanout_.size(), [&](size_t k) {
          const uint32_t link = fanout_[k];
          SimNode& nb = nodes_[to.nbrs[link]];
          delivered_[k] = nb.alive && nb.link_up[to.rev[link]] != 0;
          if (delivered_[k]) answers_[k] = nb.proto->OnMessage(t, from, have);
        });
        for (size_t k = 0; k < fanout_.size(); ++k) {
          if (!delivered_[k]) continue;
          const uint32_t j = to.nbrs[fanout_[k]];
          for (const Effect& effect : answers_[k]) {
            if (effect.kind == EffectKind::kSend &&
                effect.message.type == MessageType::kSwarmHave) {
              return Internal("sim: a HAVE made node " + std::to_string(j) +
                              " send a have-set, which the parallel fan-out cannot order");
            }
          }
          Apply(now, j, answers_[k]);
        }
        break;
      }
      case Ev::kArrive:
        OnArrive(now, e);
        break;
      case Ev::kTimer:
        if (to.completed_at < 0 || e.to == 0) {
          Apply(now, e.to, to.proto->OnTick(t));
          Push(now + c.tick, Ev::kTimer, e.to, e.to, 0);
        }
        break;
      case Ev::kDie:
        Kill(now, e.to);
        break;
      case Ev::kJoin: {
        to.joined = true;
        to.joined_at = now;
        membership_->Register(ToPeer(e.to), MemberOf(e.to), ToTimePoint(now));
        joins_pending_ = true;
        Push(now + jitter(rng_), Ev::kTimer, e.to, e.to, 0);
        break;
      }
      case Ev::kLink: {
        const int k = LinkIndex(e.to, e.from);
        // A peer banned at either end is refused, as an agent refuses its connection.
        if (k >= 0 && to.listed[k] && !to.link_up[k] && nodes_[e.from].alive &&
            nodes_[e.from].joined && to.proto->Admits(t, ToPeer(e.from)) &&
            nodes_[e.from].proto->Admits(t, ToPeer(e.to))) {
          Connect(now, e.to, e.from);
        }
        break;
      }
      case Ev::kPeerGone:
        SetLink(e.to, e.from, false);
        Apply(now, e.to, to.proto->OnPeerDisconnected(t, ToPeer(e.from)));
        break;
      case Ev::kSample:
      case Ev::kHeartbeats:
      case Ev::kSweep:
        break;
    }
  }
  Sample(now);
  result_.end_time = now;
  result_.nodes.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    NodeResult& r = result_.nodes[i];
    r.node = i;
    r.role = nodes_[i].role;
    r.completed_at = nodes_[i].completed_at;
    r.died_at = nodes_[i].died_at;
    r.quarantined_at = nodes_[i].quarantined_at;
    r.joined_at = nodes_[i].joined ? nodes_[i].joined_at : -1;
    r.bytes_in = nodes_[i].bytes_in;
    r.bytes_out = nodes_[i].bytes_out;
    r.bans = nodes_[i].bans;
    r.banned_by = nodes_[i].banned_by;
    const swarm::SchedulerStats& st = nodes_[i].proto->scheduler()->stats();
    result_.timeouts += st.timeouts;
    result_.requests += st.requests_sent;
    result_.rejects += st.requests_rejected;
  }
  result_.source_bytes = nodes_[0].bytes_out;
  for (uint32_t o = n; o < n + origin_shares_; ++o) result_.origin_bytes += nodes_[o].bytes_out;
  result_.delivered_bytes = net_->delivered_bytes();
  result_.aborted_bytes = net_->aborted_bytes();
  return std::move(result_);
}

}  // namespace

double FullDuplexBound(double s, double b) { return s / b; }

double SharedBound(double s, double b, uint32_t n, double origin) {
  return std::max(2.0 * double(n) * s / ((double(n) + 1) * b + origin), s / b);
}

double RackBound(double s, double b, uint32_t rack_size, double oversubscription) {
  const double uplink = double(rack_size) * b / oversubscription;
  return std::max(s / b, s / uplink);
}

Result<std::vector<uint64_t>> DeltaPayloadSizes(uint64_t total_bytes, uint64_t chunk_bytes,
                                                double changed_fraction,
                                                std::span<const double> ratios, uint64_t seed) {
  if (total_bytes == 0 || chunk_bytes == 0) {
    return InvalidArgument("sim: total and chunk size must be positive");
  }
  if (!(changed_fraction > 0 && changed_fraction <= 1)) {
    return InvalidArgument("sim: the changed fraction must be in (0, 1]");
  }
  if (ratios.empty()) return InvalidArgument("sim: no payload ratio");
  for (const double r : ratios) {
    if (!(r > 0 && r <= 1.01)) {
      return InvalidArgument("sim: payload ratio " + std::to_string(r) + " is not in (0, 1.01]");
    }
  }
  const uint64_t chunks = (total_bytes + chunk_bytes - 1) / chunk_bytes;
  const auto changed = static_cast<uint64_t>(std::llround(changed_fraction * double(chunks)));
  if (changed == 0) {
    return InvalidArgument("sim: a changed fraction of " + std::to_string(changed_fraction) +
                           " changes none of " + std::to_string(chunks) + " chunks");
  }
  // Which chunks changed: the first `changed` of a shuffled order, then taken in chunk order.
  std::vector<uint64_t> order(chunks);
  for (uint64_t i = 0; i < chunks; ++i) order[i] = i;
  std::mt19937_64 rng(seed ^ 0x5DE1u);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<bool> is_changed(chunks, false);
  for (uint64_t k = 0; k < changed; ++k) is_changed[order[k]] = true;
  std::vector<uint64_t> sizes(chunks, 0);
  size_t next_ratio = 0;
  for (uint64_t i = 0; i < chunks; ++i) {
    if (!is_changed[i]) continue;
    const uint64_t chunk = std::min(chunk_bytes, total_bytes - i * chunk_bytes);
    const double ratio = ratios[next_ratio++ % ratios.size()];
    sizes[i] = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(ratio * double(chunk))));
  }
  return sizes;
}

Result<FleetResult> RunFleet(const FleetConfig& config) { return Fleet(config).Run(); }

}  // namespace weightcast::sim
