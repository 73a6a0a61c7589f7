// swarm::PeerProtocol on its own and in small swarms wired by an in-test driver (messages and
// uploads delivered in order on a fake clock): have-sets and HAVE suppression, requests answered
// only once, the epochs of a fall-back from payloads to whole chunks, bans, the item scaling.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "swarm/peer_protocol.h"

namespace weightcast::swarm {
namespace {

using std::chrono::seconds;

PeerProtocol MakeProtocol(uint64_t id, bool source = false) {
  Tuning tuning;
  tuning.upload_slots = 2;
  tuning.source_upload_slots = 2;
  return PeerProtocol(
      PeerProtocolOptions{.node_id = PeerId(id), .source = source, .tuning = tuning});
}

TargetSpec Spec(uint32_t n, bool holds_all, bool source = false) {
  TargetSpec spec;
  spec.version = Version(7);
  spec.chunk_count = n;
  spec.whole.assign(n, holds_all);
  spec.payload.assign(n, false);
  spec.want.assign(n, true);
  spec.source = source;
  spec.total_bytes = uint64_t{n} << 20;
  spec.chunk_bytes = 1 << 20;
  return spec;
}

template <typename Pred>
size_t Count(std::span<const Effect> effects, Pred pred) {
  return static_cast<size_t>(std::count_if(effects.begin(), effects.end(), pred));
}

bool IsSend(const Effect& e, MessageType type) {
  return e.kind == EffectKind::kSend && e.message.type == type;
}

// The have-set `from` sends when it connects, as it would arrive at a peer.
Message HaveSetOf(PeerProtocol& from, PeerId to) {
  for (const Effect& e : from.OnPeerConnected(Time{0}, to)) {
    if (IsSend(e, MessageType::kSwarmHave)) return e.message;
  }
  ADD_FAILURE() << "no have-set sent";
  return {};
}

// A swarm of protocols: every message and upload is delivered in order through one queue, and
// an upload arrives (and is checked by the receiver with `check`) as one step.
class Driver {
 public:
  std::vector<std::unique_ptr<PeerProtocol>> nodes;
  std::function<CheckOutcome(uint32_t from, uint32_t to, uint32_t chunk)> check = [](auto...) {
    return CheckOutcome::kOk;
  };
  uint64_t haves_delivered = 0, uploads = 0, closes = 0;
  std::vector<bool> completed;

  void Connect(uint32_t a, uint32_t b) {
    Apply(a, nodes[a]->OnPeerConnected(now, Id(b)));
    Apply(b, nodes[b]->OnPeerConnected(now, Id(a)));
  }

  void Run(int max_steps = 100000) {
    for (int step = 0; step < max_steps && !queue_.empty(); ++step) {
      Item item = std::move(queue_.front());
      queue_.pop_front();
      now += std::chrono::milliseconds(1);
      PeerProtocol& to = *nodes[item.to];
      if (item.upload) {
        const Arrival a = to.OnChunkArrived(now, Id(item.from), Version(7), ChunkIndex(item.chunk),
                                            static_cast<uint8_t>(item.kind));
        Apply(item.from,
              nodes[item.from]->OnUploadDone(now, item.epoch, Id(item.to), ChunkIndex(item.chunk)));
        if (a.check) {
          Apply(item.to, to.OnChunkChecked(now, a.epoch, Id(item.from), ChunkIndex(item.chunk),
                                           check(item.from, item.to, item.chunk), "bad"));
        }
        continue;
      }
      if (item.message.type == MessageType::kHave) ++haves_delivered;
      Apply(item.to, to.OnMessage(now, Id(item.from), item.message));
    }
  }

  static PeerId Id(uint32_t node) { return PeerId(node + 1); }
  static uint32_t Node(PeerId id) { return static_cast<uint32_t>(id.value() - 1); }
  Time now{0};

 private:
  struct Item {
    uint32_t to = 0, from = 0;
    bool upload = false;
    uint32_t chunk = 0;
    uint64_t epoch = 0;
    PayloadKind kind = PayloadKind::kRaw;
    Message message{};
  };

  void Apply(uint32_t i, std::span<const Effect> effects) {
    const std::vector<Effect> list(effects.begin(), effects.end());
    for (const Effect& e : list) {
      switch (e.kind) {
        case EffectKind::kSend:
          queue_.push_back(Item{.to = Node(e.peer), .from = i, .message = e.message});
          break;
        case EffectKind::kAnnounce:
          for (uint32_t j = 0; j < nodes.size(); ++j) {
            if (j != i && nodes[i]->WantsHave(Id(j), e.chunk, e.flags)) {
              queue_.push_back(Item{.to = j,
                                    .from = i,
                                    .message = Message{.type = MessageType::kHave,
                                                       .version = 7,
                                                       .chunk = e.chunk.value(),
                                                       .code = e.flags}});
            }
          }
          break;
        case EffectKind::kUpload:
          ++uploads;
          queue_.push_back(Item{.to = Node(e.peer),
                                .from = i,
                                .upload = true,
                                .chunk = e.chunk.value(),
                                .epoch = e.epoch,
                                .kind = e.item});
          break;
        case EffectKind::kClose:
          ++closes;
          Apply(Node(e.peer), nodes[Node(e.peer)]->OnPeerDisconnected(now, Id(i)));
          break;
        case EffectKind::kComplete:
          if (completed.size() <= i) completed.resize(nodes.size());
          completed[i] = true;
          break;
        default:
          break;
      }
    }
  }

  std::deque<Item> queue_;
};

TEST(PeerProtocolTest, SeedAndReceiversComplete) {
  Driver d;
  d.nodes.push_back(std::make_unique<PeerProtocol>(MakeProtocol(1, /*source=*/true)));
  for (uint64_t id = 2; id <= 4; ++id)
    d.nodes.push_back(std::make_unique<PeerProtocol>(MakeProtocol(id)));
  ASSERT_TRUE(d.nodes[0]->SetTarget(d.now, Spec(16, true, /*source=*/true)).ok());
  for (size_t i = 1; i < d.nodes.size(); ++i)
    ASSERT_TRUE(d.nodes[i]->SetTarget(d.now, Spec(16, false)).ok());
  for (uint32_t a = 0; a < 4; ++a) {
    for (uint32_t b = a + 1; b < 4; ++b) d.Connect(a, b);
  }
  d.Run();
  for (size_t i = 1; i < d.nodes.size(); ++i) {
    EXPECT_TRUE(d.nodes[i]->complete()) << "node " << i;
    EXPECT_EQ(std::count(d.nodes[i]->whole().begin(), d.nodes[i]->whole().end(), true), 16);
  }
  // 3 receivers x 16 chunks each took at least once; no node got a chunk twice without endgame.
  EXPECT_GE(d.uploads, 48u);
  // Receivers skip HAVEs to receivers that hold the chunk: fewer than every receiver telling
  // every other node of every chunk.
  EXPECT_LT(d.haves_delivered, 3u * 3u * 16u);
  EXPECT_EQ(d.closes, 0u);
}

TEST(PeerProtocolTest, HavesSkipPeersThatHoldTheChunkExceptASource) {
  PeerProtocol a = MakeProtocol(1);
  PeerProtocol holder = MakeProtocol(2);
  PeerProtocol source = MakeProtocol(3, true);
  ASSERT_TRUE(a.SetTarget(Time{0}, Spec(4, false)).ok());
  TargetSpec held = Spec(4, false);
  held.whole[2] = true;
  ASSERT_TRUE(holder.SetTarget(Time{0}, held).ok());
  ASSERT_TRUE(source.SetTarget(Time{0}, Spec(4, true, true)).ok());
  a.OnPeerConnected(Time{0}, PeerId(2));
  a.OnPeerConnected(Time{0}, PeerId(3));
  a.OnMessage(Time{0}, PeerId(2), HaveSetOf(holder, PeerId(1)));
  a.OnMessage(Time{0}, PeerId(3), HaveSetOf(source, PeerId(1)));
  EXPECT_FALSE(a.WantsHave(PeerId(2), ChunkIndex(2), kHaveWhole));
  EXPECT_TRUE(a.WantsHave(PeerId(2), ChunkIndex(1), kHaveWhole));
  // A source counts every HAVE (EveryChunkReplicated): it never asks to skip them.
  EXPECT_TRUE(a.WantsHave(PeerId(3), ChunkIndex(2), kHaveWhole));
  // A HAVE from the holder updates what it is known to hold.
  a.OnMessage(Time{0}, PeerId(2),
              Message{.type = MessageType::kHave, .version = 7, .chunk = 1, .code = kHaveWhole});
  EXPECT_FALSE(a.WantsHave(PeerId(2), ChunkIndex(1), kHaveWhole));
  EXPECT_FALSE(a.WantsHave(PeerId(9), ChunkIndex(1), kHaveWhole));  // not connected
}

// What a peer announced while registered is kept in the scheduler's have-set of it (one record
// per peer); it must survive that scheduler: a new target of the same version (a new epoch and
// scheduler) still knows the peer holds it, and the fan-out agrees with WantsHave.
TEST(PeerProtocolTest, WhatAPeerHoldsOutlivesTheSchedulerThatRecordedIt) {
  PeerProtocol a = MakeProtocol(1);
  PeerProtocol holder = MakeProtocol(2);
  ASSERT_TRUE(a.SetTarget(Time{0}, Spec(70, false)).ok());
  ASSERT_TRUE(holder.SetTarget(Time{0}, Spec(70, false)).ok());
  a.OnPeerConnected(Time{0}, PeerId(2));
  a.OnMessage(Time{0}, PeerId(2), HaveSetOf(holder, PeerId(1)));
  a.OnMessage(Time{0}, PeerId(2),
              Message{.type = MessageType::kHave, .version = 7, .chunk = 65, .code = kHaveWhole});
  auto recipients = [&](uint32_t chunk) {
    std::vector<PeerId> out;
    a.ForEachHaveRecipient(ChunkIndex(chunk), kHaveWhole, [&](PeerId p) { out.push_back(p); });
    return out;
  };
  EXPECT_FALSE(a.WantsHave(PeerId(2), ChunkIndex(65), kHaveWhole));
  EXPECT_TRUE(recipients(65).empty());
  EXPECT_EQ(recipients(64), std::vector<PeerId>{PeerId(2)});
  const uint64_t epoch = a.epoch();
  ASSERT_TRUE(a.SetTarget(Time{0}, Spec(70, false)).ok());
  EXPECT_GT(a.epoch(), epoch);
  EXPECT_FALSE(a.WantsHave(PeerId(2), ChunkIndex(65), kHaveWhole));
  EXPECT_TRUE(recipients(65).empty());
  EXPECT_TRUE(a.WantsHave(PeerId(2), ChunkIndex(64), kHaveWhole));
  // Leaving the target keeps them too, for the next target of that version.
  a.LeaveTarget();
  ASSERT_TRUE(a.SetTarget(Time{0}, Spec(70, false)).ok());
  EXPECT_FALSE(a.WantsHave(PeerId(2), ChunkIndex(65), kHaveWhole));
  // It reconnects with a fresh have-set: the old bits are gone.
  a.OnPeerDisconnected(Time{0}, PeerId(2));
  a.OnPeerConnected(Time{0}, PeerId(2));
  a.OnMessage(Time{0}, PeerId(2), HaveSetOf(holder, PeerId(1)));
  EXPECT_EQ(recipients(65), std::vector<PeerId>{PeerId(2)});
}

// A receiver connected to one source, with the source's have-set handled: returns the requests
// it sent.
std::vector<Effect> ConnectToSource(PeerProtocol& r, PeerProtocol& s, Time now) {
  r.OnPeerConnected(now, PeerId(1));
  s.OnPeerConnected(now, PeerId(2));
  auto effects = r.OnMessage(now, PeerId(1), HaveSetOf(s, PeerId(2)));
  return {effects.begin(), effects.end()};
}

TEST(PeerProtocolTest, OnlyRequestedChunksAreCheckedOnce) {
  PeerProtocol s = MakeProtocol(1, true), r = MakeProtocol(2);
  ASSERT_TRUE(s.SetTarget(Time{0}, Spec(4, true, true)).ok());
  ASSERT_TRUE(r.SetTarget(Time{0}, Spec(4, false)).ok());
  const std::vector<Effect> sent = ConnectToSource(r, s, Time{0});
  std::vector<uint32_t> requested;
  for (const Effect& e : sent) {
    if (IsSend(e, MessageType::kRequest)) requested.push_back(e.message.chunk);
  }
  ASSERT_FALSE(requested.empty());
  const uint32_t c = requested[0];
  uint32_t other = 0;
  while (std::find(requested.begin(), requested.end(), other) != requested.end()) ++other;
  ASSERT_LT(other, 4u);
  // Never asked for: dropped unread.
  EXPECT_FALSE(r.OnChunkArrived(Time{0}, PeerId(1), Version(7), ChunkIndex(other), 0).check);
  // Another version, another kind, or from a peer not asked: dropped.
  EXPECT_FALSE(r.OnChunkArrived(Time{0}, PeerId(1), Version(8), ChunkIndex(c), 0).check);
  EXPECT_FALSE(r.OnChunkArrived(Time{0}, PeerId(1), Version(7), ChunkIndex(c), 1).check);
  EXPECT_FALSE(r.OnChunkArrived(Time{0}, PeerId(5), Version(7), ChunkIndex(c), 0).check);
  const Arrival a = r.OnChunkArrived(Time{0}, PeerId(1), Version(7), ChunkIndex(c), 0);
  ASSERT_TRUE(a.check);
  EXPECT_EQ(a.epoch, r.epoch());
  // The answer to a request counts once.
  EXPECT_FALSE(r.OnChunkArrived(Time{0}, PeerId(1), Version(7), ChunkIndex(c), 0).check);
  auto done = r.OnChunkChecked(Time{0}, a.epoch, PeerId(1), ChunkIndex(c), CheckOutcome::kOk, "");
  EXPECT_EQ(Count(done, [](const Effect& e) { return e.kind == EffectKind::kAnnounce; }), 1u);
  EXPECT_TRUE(r.whole()[c]);
}

TEST(PeerProtocolTest, UndecodablePayloadRestartsAsWholeChunksInANewEpoch) {
  PeerProtocol s = MakeProtocol(1, true), r = MakeProtocol(2);
  TargetSpec seed = Spec(8, true, true);
  seed.payload.assign(8, true);
  seed.payload_bytes.assign(8, 1024);
  ASSERT_TRUE(s.SetTarget(Time{0}, seed).ok());
  TargetSpec delta = Spec(8, false);
  delta.fetch_payloads = true;
  delta.payload_bytes.assign(8, 1024);
  ASSERT_TRUE(r.SetTarget(Time{0}, delta).ok());
  std::vector<uint32_t> requested;
  for (const Effect& e : ConnectToSource(r, s, Time{0})) {
    if (IsSend(e, MessageType::kRequest)) {
      EXPECT_EQ(e.message.code, static_cast<uint8_t>(PayloadKind::kCodec));
      requested.push_back(e.message.chunk);
    }
  }
  ASSERT_GE(requested.size(), 2u);
  const uint64_t first_epoch = r.epoch();
  const Arrival a = r.OnChunkArrived(Time{0}, PeerId(1), Version(7), ChunkIndex(requested[0]),
                                     static_cast<uint8_t>(PayloadKind::kCodec));
  ASSERT_TRUE(a.check);
  EXPECT_EQ(a.item, PayloadKind::kCodec);
  auto effects = r.OnChunkChecked(Time{0}, a.epoch, PeerId(1), ChunkIndex(requested[0]),
                                  CheckOutcome::kUndecodable, "no base");
  ASSERT_FALSE(effects.empty());
  EXPECT_EQ(effects[0].kind, EffectKind::kFetchWhole);
  EXPECT_EQ(Count(effects, [](const Effect& e) { return e.kind == EffectKind::kNewEpoch; }), 1u);
  // The old epoch's other requests are cancelled, as payloads; the new have-set no longer says
  // it fetches payloads; new requests ask for whole chunks.
  EXPECT_EQ(Count(effects,
                  [](const Effect& e) {
                    return IsSend(e, MessageType::kCancel) &&
                           e.message.code == static_cast<uint8_t>(PayloadKind::kCodec);
                  }),
            requested.size() - 1);
  for (const Effect& e : effects) {
    if (IsSend(e, MessageType::kSwarmHave)) {
      EXPECT_EQ(e.message.code & kHaveFetchingPayloads, 0);
    }
  }
  EXPECT_FALSE(r.fetching_payloads());
  EXPECT_GT(r.epoch(), first_epoch);
  // A late payload reply of the old epoch is dropped; so is a check result of the old epoch.
  EXPECT_FALSE(r.OnChunkArrived(Time{0}, PeerId(1), Version(7), ChunkIndex(requested[1]),
                                static_cast<uint8_t>(PayloadKind::kCodec))
                   .check);
  EXPECT_TRUE(r.OnChunkChecked(Time{0}, first_epoch, PeerId(1), ChunkIndex(requested[1]),
                               CheckOutcome::kOk, "")
                  .empty());
  EXPECT_FALSE(r.whole()[requested[1]]);
}

TEST(PeerProtocolTest, AKeptPayloadIsAnnouncedAsAPayloadNotAsTheChunk) {
  PeerProtocol s = MakeProtocol(1, true), r = MakeProtocol(2);
  TargetSpec seed = Spec(4, true, true);
  seed.payload.assign(4, true);
  seed.payload_bytes.assign(4, 1024);
  ASSERT_TRUE(s.SetTarget(Time{0}, seed).ok());
  TargetSpec delta = Spec(4, false);
  delta.fetch_payloads = true;
  delta.payload_bytes.assign(4, 1024);
  ASSERT_TRUE(r.SetTarget(Time{0}, delta).ok());
  std::vector<uint32_t> requested;
  for (const Effect& e : ConnectToSource(r, s, Time{0})) {
    if (IsSend(e, MessageType::kRequest)) requested.push_back(e.message.chunk);
  }
  ASSERT_FALSE(requested.empty());
  const uint32_t c = requested[0];
  const Arrival a = r.OnChunkArrived(Time{0}, PeerId(1), Version(7), ChunkIndex(c),
                                     static_cast<uint8_t>(PayloadKind::kCodec));
  ASSERT_TRUE(a.check);
  auto done =
      r.OnChunkChecked(Time{0}, a.epoch, PeerId(1), ChunkIndex(c), CheckOutcome::kPayloadKept, "");
  size_t announced = 0;
  for (const Effect& e : done) {
    if (e.kind != EffectKind::kAnnounce) continue;
    ++announced;
    EXPECT_EQ(e.flags, kHavePayload);  // peers that need the whole chunk do not ask here
  }
  EXPECT_EQ(announced, 1u);
  EXPECT_FALSE(r.whole()[c]);
  EXPECT_TRUE(r.payload()[c]);
}

TEST(PeerProtocolTest, BadChunkClosesAndBansThePeerForTheBanTime) {
  PeerProtocol s = MakeProtocol(1, true), r = MakeProtocol(2);
  ASSERT_TRUE(s.SetTarget(Time{0}, Spec(4, true, true)).ok());
  ASSERT_TRUE(r.SetTarget(Time{0}, Spec(4, false)).ok());
  uint32_t c = 99;
  for (const Effect& e : ConnectToSource(r, s, Time{0})) {
    if (IsSend(e, MessageType::kRequest)) c = e.message.chunk;
  }
  ASSERT_NE(c, 99u);
  const Arrival a = r.OnChunkArrived(Time{0}, PeerId(1), Version(7), ChunkIndex(c), 0);
  ASSERT_TRUE(a.check);
  auto effects =
      r.OnChunkChecked(Time{0}, a.epoch, PeerId(1), ChunkIndex(c), CheckOutcome::kCorrupt, "bad");
  EXPECT_EQ(Count(effects,
                  [](const Effect& e) {
                    return e.kind == EffectKind::kClose && e.ban && e.peer == PeerId(1);
                  }),
            1u);
  EXPECT_EQ(r.peer_count(), 0u);
  EXPECT_FALSE(r.Admits(Time{0} + seconds(119), PeerId(1)));
  EXPECT_TRUE(r.Admits(Time{0} + seconds(121), PeerId(1)));
  EXPECT_FALSE(r.Admits(Time{0}, PeerId(2)));  // itself
  EXPECT_FALSE(r.whole()[c]);
}

TEST(PeerProtocolTest, StoreErrorFailsTheTarget) {
  PeerProtocol s = MakeProtocol(1, true), r = MakeProtocol(2);
  ASSERT_TRUE(s.SetTarget(Time{0}, Spec(4, true, true)).ok());
  ASSERT_TRUE(r.SetTarget(Time{0}, Spec(4, false)).ok());
  uint32_t c = 99;
  for (const Effect& e : ConnectToSource(r, s, Time{0})) {
    if (IsSend(e, MessageType::kRequest)) c = e.message.chunk;
  }
  const Arrival a = r.OnChunkArrived(Time{0}, PeerId(1), Version(7), ChunkIndex(c), 0);
  ASSERT_TRUE(a.check);
  auto effects = r.OnChunkChecked(Time{0}, a.epoch, PeerId(1), ChunkIndex(c),
                                  CheckOutcome::kStoreError, "disk full");
  EXPECT_EQ(Count(effects, [](const Effect& e) { return e.kind == EffectKind::kFailed; }), 1u);
  EXPECT_EQ(r.error(), "disk full");
  EXPECT_TRUE(r.Admits(Time{0}, PeerId(1)));  // not the peer's fault
}

TEST(PeerProtocolTest, RequestsOutsideTheVersionOrForPayloadsNotHeld) {
  PeerProtocol s = MakeProtocol(1, true), r = MakeProtocol(2);
  TargetSpec seed = Spec(4, true, true);
  seed.payload = {true, true, false, true};
  seed.payload_bytes.assign(4, 1024);
  ASSERT_TRUE(s.SetTarget(Time{0}, seed).ok());
  ASSERT_TRUE(r.SetTarget(Time{0}, Spec(4, false)).ok());
  s.OnPeerConnected(Time{0}, PeerId(2));
  s.OnMessage(Time{0}, PeerId(2), HaveSetOf(r, PeerId(1)));
  const auto request = [](uint32_t chunk, PayloadKind kind, uint64_t version = 7) {
    return Message{.type = MessageType::kRequest,
                   .version = version,
                   .chunk = chunk,
                   .code = static_cast<uint8_t>(kind)};
  };
  auto rejected = [](std::span<const Effect> effects) {
    return Count(effects, [](const Effect& e) { return IsSend(e, MessageType::kReject); });
  };
  EXPECT_EQ(rejected(s.OnMessage(Time{0}, PeerId(2), request(2, PayloadKind::kCodec))), 1u);
  EXPECT_EQ(rejected(s.OnMessage(Time{0}, PeerId(2), request(1, PayloadKind::kRaw, 6))), 1u);
  EXPECT_EQ(rejected(s.OnMessage(Time{0}, PeerId(2), request(1, PayloadKind(9)))), 1u);
  auto served = s.OnMessage(Time{0}, PeerId(2), request(1, PayloadKind::kCodec));
  EXPECT_EQ(Count(served,
                  [](const Effect& e) {
                    return e.kind == EffectKind::kUpload && e.item == PayloadKind::kCodec;
                  }),
            1u);
  auto closed = s.OnMessage(Time{0}, PeerId(2), request(4, PayloadKind::kRaw));
  EXPECT_EQ(Count(closed, [](const Effect& e) { return e.kind == EffectKind::kClose && !e.ban; }),
            1u);
  EXPECT_TRUE(s.Admits(Time{0}, PeerId(2)));
}

TEST(PeerProtocolTest, MalformedHaveSetClosesThePeer) {
  PeerProtocol r = MakeProtocol(2);
  ASSERT_TRUE(r.SetTarget(Time{0}, Spec(4, false)).ok());
  r.OnPeerConnected(Time{0}, PeerId(1));
  Message bad{.type = MessageType::kSwarmHave, .version = 7, .chunk = 4};
  bad.blob = {0xff, 0x00};  // bits past the chunk count
  auto effects = r.OnMessage(Time{0}, PeerId(1), bad);
  EXPECT_EQ(Count(effects, [](const Effect& e) { return e.kind == EffectKind::kClose; }), 1u);
  EXPECT_EQ(r.peer_count(), 0u);
}

TEST(PeerProtocolTest, SmallPayloadsWidenTheWindow) {
  PeerProtocol whole = MakeProtocol(2), payloads = MakeProtocol(3);
  TargetSpec spec = Spec(64, false);
  spec.payload_bytes.assign(64, 16 << 10);  // 1 MiB chunks, 16 KiB payloads: 64 to a chunk
  ASSERT_TRUE(whole.SetTarget(Time{0}, spec).ok());
  spec.fetch_payloads = true;
  ASSERT_TRUE(payloads.SetTarget(Time{0}, spec).ok());
  EXPECT_EQ(whole.window(), Tuning{}.window_per_peer);
  EXPECT_EQ(payloads.window(), std::min<uint32_t>(Tuning{}.window_per_peer * 64, 64));
}

// A refused item is asked of that peer again after the refusal backoff, which is sized for whole
// chunks (2 s: the time another peer needs to pass the chunk on). Payloads of a delta are scaled
// like the windows: 16 KiB payloads of 1 MiB chunks are asked again after 2 s / 64.
TEST(PeerProtocolTest, SmallPayloadsAreAskedAgainSoonerAfterARefusal) {
  using std::chrono::milliseconds;
  for (const bool payloads : {false, true}) {
    SCOPED_TRACE(payloads ? "payloads" : "whole chunks");
    PeerProtocol s = MakeProtocol(1, true), r = MakeProtocol(2);
    TargetSpec seed = Spec(1, true, true);
    seed.payload.assign(1, payloads);
    seed.payload_bytes.assign(1, 16 << 10);
    ASSERT_TRUE(s.SetTarget(Time{0}, seed).ok());
    TargetSpec spec = Spec(1, false);
    spec.fetch_payloads = payloads;
    spec.payload_bytes.assign(1, 16 << 10);
    ASSERT_TRUE(r.SetTarget(Time{0}, spec).ok());
    // One chunk: nothing else takes the request slot it leaves.
    const uint32_t chunk = 0;
    ASSERT_EQ(Count(ConnectToSource(r, s, Time{0}),
                    [](const Effect& e) { return IsSend(e, MessageType::kRequest); }),
              1u);
    const auto kind = static_cast<uint8_t>(payloads ? PayloadKind::kCodec : PayloadKind::kRaw);
    r.OnMessage(Time{0}, PeerId(1),
                Message{.type = MessageType::kReject, .version = 7, .chunk = chunk, .code = kind});
    auto asks_again = [&](Time now) {
      const auto effects = r.OnTick(now);
      return Count(effects, [&](const Effect& e) {
               return IsSend(e, MessageType::kRequest) && e.message.chunk == chunk;
             }) == 1;
    };
    EXPECT_EQ(asks_again(Time{milliseconds(40)}), payloads);
    if (!payloads) {
      EXPECT_FALSE(asks_again(Time{milliseconds(1900)}));
      EXPECT_TRUE(asks_again(Time{milliseconds(2100)}));
    }
  }
}

TEST(PeerProtocolTest, EveryChunkReplicatedCountsPeersHaves) {
  PeerProtocol s = MakeProtocol(1, true), r = MakeProtocol(2);
  ASSERT_TRUE(s.SetTarget(Time{0}, Spec(2, true, true)).ok());
  TargetSpec part = Spec(2, false);
  part.whole[0] = true;
  ASSERT_TRUE(r.SetTarget(Time{0}, part).ok());
  EXPECT_FALSE(s.EveryChunkReplicated());
  s.OnPeerConnected(Time{0}, PeerId(2));
  s.OnMessage(Time{0}, PeerId(2), HaveSetOf(r, PeerId(1)));
  EXPECT_FALSE(s.EveryChunkReplicated());
  s.OnMessage(Time{0}, PeerId(2),
              Message{.type = MessageType::kHave, .version = 7, .chunk = 1, .code = kHaveWhole});
  EXPECT_TRUE(s.EveryChunkReplicated());
  s.OnPeerDisconnected(Time{0}, PeerId(2));
  EXPECT_FALSE(s.EveryChunkReplicated());
}

TEST(PeerProtocolTest, TargetSpecOfWrongSizesIsRefused) {
  PeerProtocol r = MakeProtocol(2);
  TargetSpec spec = Spec(4, false);
  spec.want.resize(3);
  EXPECT_EQ(r.SetTarget(Time{0}, spec).status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(r.has_target());
}

}  // namespace
}  // namespace weightcast::swarm
