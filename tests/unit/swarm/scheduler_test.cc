#include "swarm/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <vector>

namespace weightcast::swarm {
namespace {

using std::chrono::seconds;

ChunkSet Set(uint32_t n, std::initializer_list<uint32_t> chunks) {
  ChunkSet s(n);
  for (uint32_t c : chunks) s.Insert(ChunkIndex(c));
  return s;
}

std::vector<Action> Copy(std::span<const Action> a) { return {a.begin(), a.end()}; }

Action Req(uint64_t peer, uint32_t chunk) {
  return Action{ActionKind::kSendRequest, PeerId(peer), ChunkIndex(chunk)};
}

size_t Count(const std::vector<Action>& actions, ActionKind kind) {
  return static_cast<size_t>(std::count_if(actions.begin(), actions.end(),
                                           [&](const Action& a) { return a.kind == kind; }));
}

bool Contains(const std::vector<Action>& actions, const Action& want) {
  return std::find(actions.begin(), actions.end(), want) != actions.end();
}

Scheduler Make(SchedulerOptions o) {
  Result<Scheduler> s = Scheduler::Create(std::move(o));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

const Time t0{0};

TEST(Scheduler, RejectsBadOptions) {
  SchedulerOptions o;
  EXPECT_FALSE(Scheduler::Create(o).ok());  // no chunks
  o.chunk_count = 4;
  o.want = ChunkSet(3);
  EXPECT_FALSE(Scheduler::Create(o).ok());
}

TEST(Scheduler, RequestsRarestChunkFirst) {
  // Two anchor peers each hold one busy request (window 1), then announce more chunks without
  // triggering picks, which sets up availability: chunk 1 at one peer, chunk 2 at two.
  SchedulerOptions o;
  o.chunk_count = 8;
  o.window_per_peer = 1;
  Scheduler s = Make(o);
  EXPECT_EQ(Copy(s.OnPeerConnected(t0, PeerId(10), Set(8, {6}))), std::vector{Req(10, 6)});
  EXPECT_EQ(Copy(s.OnPeerConnected(t0, PeerId(11), Set(8, {7}))), std::vector{Req(11, 7)});
  EXPECT_TRUE(s.OnHave(t0, PeerId(10), ChunkIndex(1)).empty());
  EXPECT_TRUE(s.OnHave(t0, PeerId(10), ChunkIndex(2)).empty());
  EXPECT_TRUE(s.OnHave(t0, PeerId(11), ChunkIndex(2)).empty());
  EXPECT_EQ(s.availability(ChunkIndex(2)), 2u);
  // The new peer has 1 and 2; 1 is rarer (2 holders against 3), whatever the random start.
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SchedulerOptions o2 = o;
    o2.seed = seed;
    Scheduler t = Make(o2);
    (void)t.OnPeerConnected(t0, PeerId(10), Set(8, {6}));
    (void)t.OnPeerConnected(t0, PeerId(11), Set(8, {7}));
    (void)t.OnHave(t0, PeerId(10), ChunkIndex(1));
    (void)t.OnHave(t0, PeerId(10), ChunkIndex(2));
    (void)t.OnHave(t0, PeerId(11), ChunkIndex(2));
    EXPECT_EQ(Copy(t.OnPeerConnected(t0, PeerId(12), Set(8, {1, 2}))), std::vector{Req(12, 1)})
        << "seed " << seed;
  }
}

TEST(Scheduler, APreferredOrderIsFetchedFrontFirstAndRareChunksStillSpread) {
  // A streaming reader wants chunks 40, 41, 42, ... first.
  SchedulerOptions o;
  o.chunk_count = 200;
  o.window_per_peer = 4;
  o.max_outstanding = 64;
  for (uint32_t c = 40; c < 200; ++c) o.preferred.push_back(ChunkIndex(c));
  for (uint32_t c = 0; c < 40; ++c) o.preferred.push_back(ChunkIndex(c));
  Scheduler s = Make(o);
  std::vector<Action> a = Copy(s.OnPeerConnected(t0, PeerId(1), ChunkSet::Full(200)));
  ASSERT_EQ(a.size(), 4u);
  for (uint32_t k = 0; k < 4; ++k) EXPECT_EQ(a[k], Req(1, 40 + k)) << k;
  // A peer that holds none of the front gets the rarest of the rest, as without an order.
  a = Copy(s.OnPeerConnected(t0, PeerId(2), Set(200, {7, 150})));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(Contains(a, Req(2, 150)) || Contains(a, Req(2, 7)));
  // Verified front chunks move the window on.
  a = Copy(s.OnChunkVerified(t0, ChunkIndex(40), PeerId(1)));
  EXPECT_TRUE(Contains(a, Req(1, 44))) << "the next chunk of the order";
  // An order set later replaces the first one for the requests still to be made.
  std::vector<ChunkIndex> back;
  for (uint32_t c = 200; c-- > 0;) back.push_back(ChunkIndex(c));
  (void)s.SetPreferred(t0, back);
  a = Copy(s.OnChunkVerified(t0, ChunkIndex(41), PeerId(1)));
  EXPECT_TRUE(Contains(a, Req(1, 199))) << "the new order's front";
}

TEST(Scheduler, BreaksTiesAtRandom) {
  // Equal availability everywhere: different seeds should not all pick the same chunk.
  std::vector<uint32_t> firsts;
  for (uint64_t seed = 1; seed <= 16; ++seed) {
    SchedulerOptions o;
    o.chunk_count = 64;
    o.window_per_peer = 1;
    o.seed = seed;
    Scheduler s = Make(o);
    std::vector<Action> a = Copy(s.OnPeerConnected(t0, PeerId(1), ChunkSet::Full(64)));
    ASSERT_EQ(a.size(), 1u);
    firsts.push_back(a[0].chunk.value());
  }
  std::sort(firsts.begin(), firsts.end());
  EXPECT_GT(std::unique(firsts.begin(), firsts.end()) - firsts.begin(), 4);
}

TEST(Scheduler, PipelinesUpToTheWindow) {
  SchedulerOptions o;
  o.chunk_count = 10;
  o.window_per_peer = 3;
  Scheduler s = Make(o);
  std::vector<Action> a = Copy(s.OnPeerConnected(t0, PeerId(1), ChunkSet::Full(10)));
  EXPECT_EQ(Count(a, ActionKind::kSendRequest), 3u);
  EXPECT_EQ(s.outstanding_requests(), 3u);
  // One arrives: it is announced, and the window refills with one more request.
  a = Copy(s.OnChunkVerified(t0, a[0].chunk, PeerId(1)));
  EXPECT_EQ(Count(a, ActionKind::kAnnounceHave), 1u);
  EXPECT_EQ(Count(a, ActionKind::kSendRequest), 1u);
  EXPECT_EQ(s.outstanding_requests(), 3u);
}

TEST(Scheduler, SourceSendsEveryChunkOnceBeforeAnyRepeat) {
  SchedulerOptions o;
  o.chunk_count = 3;
  o.initial_have = ChunkSet::Full(3);
  o.upload_slots = 1;
  o.spread_first = true;
  Scheduler src = Make(o);
  EXPECT_TRUE(src.OnPeerConnected(t0, PeerId(1), ChunkSet(3)).empty());
  EXPECT_TRUE(src.OnPeerConnected(t0, PeerId(2), ChunkSet(3)).empty());
  EXPECT_EQ(Copy(src.OnRequestReceived(t0, PeerId(1), ChunkIndex(0))),
            (std::vector{Action{ActionKind::kSendChunk, PeerId(1), ChunkIndex(0)}}));
  // A repeat of chunk 0 is refused while 1 and 2 have never gone out.
  EXPECT_EQ(Copy(src.OnRequestReceived(t0, PeerId(2), ChunkIndex(0))),
            (std::vector{Action{ActionKind::kRejectRequest, PeerId(2), ChunkIndex(0)}}));
  // Two never-sent requests queue behind the busy slot; both go out in arrival order.
  EXPECT_TRUE(src.OnRequestReceived(t0, PeerId(2), ChunkIndex(2)).empty());
  EXPECT_TRUE(src.OnRequestReceived(t0, PeerId(1), ChunkIndex(1)).empty());
  EXPECT_EQ(Copy(src.OnUploadDone(t0, PeerId(1), ChunkIndex(0))),
            (std::vector{Action{ActionKind::kSendChunk, PeerId(2), ChunkIndex(2)}}));
  EXPECT_EQ(Copy(src.OnUploadDone(t0, PeerId(2), ChunkIndex(2))),
            (std::vector{Action{ActionKind::kSendChunk, PeerId(1), ChunkIndex(1)}}));
  // Every chunk has been out once: a repeat is held for the refusal backoff (peer 1 can pass
  // chunk 0 on), then served.
  EXPECT_TRUE(src.OnUploadDone(t0, PeerId(1), ChunkIndex(1)).empty());
  EXPECT_EQ(Copy(src.OnRequestReceived(t0, PeerId(2), ChunkIndex(0))),
            (std::vector{Action{ActionKind::kRejectRequest, PeerId(2), ChunkIndex(0)}}));
  EXPECT_EQ(Copy(src.OnRequestReceived(t0 + o.refusal_backoff, PeerId(2), ChunkIndex(0))),
            (std::vector{Action{ActionKind::kSendChunk, PeerId(2), ChunkIndex(0)}}));
  for (uint32_t c = 0; c < 3; ++c) EXPECT_GE(src.times_sent(ChunkIndex(c)), 1u);
}

TEST(Scheduler, SourceWithFewerChunksThanPeersSendsTheOthersToAHolder) {
  // Two chunks, three peers: the first round closes after two uploads. A repeat of a chunk that
  // a peer holds, or is receiving, is refused to an asker for the hold (the refusal backoff, or
  // twice the source's upload time when longer): it can get it from that peer. After the hold
  // it is served (none of the asker's own peers had it to give).
  SchedulerOptions o;
  o.chunk_count = 2;
  o.initial_have = ChunkSet::Full(2);
  o.upload_slots = 4;
  o.refusal_backoff = seconds(2);
  o.spread_first = true;
  Scheduler src = Make(o);
  for (uint64_t p = 1; p <= 3; ++p) {
    EXPECT_TRUE(src.OnPeerConnected(t0, PeerId(p), ChunkSet(2)).empty());
  }
  auto send = [](uint64_t p, uint32_t c) {
    return std::vector{Action{ActionKind::kSendChunk, PeerId(p), ChunkIndex(c)}};
  };
  auto reject = [](uint64_t p, uint32_t c) {
    return std::vector{Action{ActionKind::kRejectRequest, PeerId(p), ChunkIndex(c)}};
  };
  EXPECT_EQ(Copy(src.OnRequestReceived(t0, PeerId(1), ChunkIndex(0))), send(1, 0));
  EXPECT_EQ(Copy(src.OnRequestReceived(t0, PeerId(2), ChunkIndex(1))), send(2, 1));
  // Chunk 0 went to peer 1: peer 3 is sent there, again when it asks within the hold. No upload
  // has completed, but the running ones are 3 s old at 3 s: the hold is 6 s by then, not 2.
  EXPECT_EQ(Copy(src.OnRequestReceived(t0, PeerId(3), ChunkIndex(0))), reject(3, 0));
  EXPECT_EQ(Copy(src.OnRequestReceived(t0 + seconds(1), PeerId(3), ChunkIndex(0))), reject(3, 0));
  EXPECT_EQ(Copy(src.OnRequestReceived(t0 + seconds(3), PeerId(3), ChunkIndex(0))), reject(3, 0));
  // Both uploads took 3 s, so the hold is 6 s: chunk 1 is refused to peer 3 from 3 s to 9 s.
  EXPECT_TRUE(src.OnUploadDone(t0 + seconds(3), PeerId(2), ChunkIndex(1)).empty());
  EXPECT_TRUE(src.OnUploadDone(t0 + seconds(3), PeerId(1), ChunkIndex(0)).empty());
  EXPECT_EQ(Copy(src.OnRequestReceived(t0 + seconds(3), PeerId(3), ChunkIndex(1))), reject(3, 1));
  // Chunk 0's hold for peer 3 began at 0 s: served at 6 s.
  EXPECT_EQ(Copy(src.OnRequestReceived(t0 + seconds(5), PeerId(3), ChunkIndex(0))), reject(3, 0));
  EXPECT_EQ(Copy(src.OnRequestReceived(t0 + seconds(6), PeerId(3), ChunkIndex(0))), send(3, 0));
  EXPECT_EQ(Copy(src.OnRequestReceived(t0 + seconds(8), PeerId(3), ChunkIndex(1))), reject(3, 1));
  EXPECT_EQ(Copy(src.OnRequestReceived(t0 + seconds(9), PeerId(3), ChunkIndex(1))), send(3, 1));
  EXPECT_EQ(src.times_sent(ChunkIndex(0)), 2u);
  EXPECT_EQ(src.times_sent(ChunkIndex(1)), 2u);
  // A peer that connects later is held from its own first ask on.
  EXPECT_TRUE(src.OnUploadDone(t0 + seconds(9), PeerId(3), ChunkIndex(0)).empty());
  EXPECT_TRUE(src.OnUploadDone(t0 + seconds(12), PeerId(3), ChunkIndex(1)).empty());
  EXPECT_TRUE(src.OnPeerConnected(t0 + seconds(12), PeerId(4), ChunkSet(2)).empty());
  EXPECT_EQ(Copy(src.OnRequestReceived(t0 + seconds(12), PeerId(4), ChunkIndex(1))), reject(4, 1));
  EXPECT_EQ(Copy(src.OnRequestReceived(t0 + seconds(18), PeerId(4), ChunkIndex(1))), send(4, 1));
}

TEST(Scheduler, ChunksOutsideTheSpreadSetDoNotKeepTheFirstRoundOpen) {
  // A delta source: chunk 2 is `same` (no payload), so nobody on the base ever asks for it.
  // Counted in the first round, it would keep the round open and every repeat refused for good.
  SchedulerOptions o;
  o.chunk_count = 3;
  o.initial_have = ChunkSet::Full(3);
  o.upload_slots = 4;
  o.refusal_backoff = seconds(2);
  o.spread_first = true;
  o.spread = Set(3, {0, 1});
  Scheduler src = Make(o);
  EXPECT_TRUE(src.OnPeerConnected(t0, PeerId(1), ChunkSet(3)).empty());
  EXPECT_TRUE(src.OnPeerConnected(t0, PeerId(2), ChunkSet(3)).empty());
  const auto send = [](uint64_t p, uint32_t c) {
    return std::vector{Action{ActionKind::kSendChunk, PeerId(p), ChunkIndex(c)}};
  };
  const auto reject = [](uint64_t p, uint32_t c) {
    return std::vector{Action{ActionKind::kRejectRequest, PeerId(p), ChunkIndex(c)}};
  };
  EXPECT_EQ(Copy(src.OnRequestReceived(t0, PeerId(1), ChunkIndex(0))), send(1, 0));
  EXPECT_EQ(Copy(src.OnRequestReceived(t0, PeerId(2), ChunkIndex(1))), send(2, 1));
  EXPECT_TRUE(src.OnUploadDone(t0 + seconds(1), PeerId(1), ChunkIndex(0)).empty());
  EXPECT_TRUE(src.OnUploadDone(t0 + seconds(1), PeerId(2), ChunkIndex(1)).empty());
  // Say peer 1 died before passing chunk 0 on: peer 2's repeat is held, then served.
  EXPECT_EQ(Copy(src.OnRequestReceived(t0 + seconds(1), PeerId(2), ChunkIndex(0))), reject(2, 0));
  EXPECT_EQ(Copy(src.OnRequestReceived(t0 + seconds(3), PeerId(2), ChunkIndex(0))), send(2, 0));
  // A chunk outside the set is still served to whoever asks (a node not on the base).
  EXPECT_EQ(Copy(src.OnRequestReceived(t0 + seconds(3), PeerId(1), ChunkIndex(2))), send(1, 2));
}

TEST(Scheduler, SpreadSetOfTheWrongSizeIsRefused) {
  SchedulerOptions o;
  o.chunk_count = 3;
  o.spread = ChunkSet(2);
  EXPECT_EQ(Scheduler::Create(o).status().code(), Code::kInvalidArgument);
}

TEST(Scheduler, EndgameAsksTwoPeersAndCancelsTheLoser) {
  SchedulerOptions o;
  o.chunk_count = 1;
  o.window_per_peer = 1;
  o.endgame_max_requests = 2;
  Scheduler s = Make(o);
  EXPECT_EQ(Copy(s.OnPeerConnected(t0, PeerId(1), Set(1, {0}))), std::vector{Req(1, 0)});
  EXPECT_TRUE(s.in_endgame());
  EXPECT_EQ(Copy(s.OnPeerConnected(t0, PeerId(2), Set(1, {0}))), std::vector{Req(2, 0)});
  EXPECT_EQ(s.stats().duplicate_requests, 1u);
  std::vector<Action> a = Copy(s.OnChunkVerified(t0, ChunkIndex(0), PeerId(2)));
  EXPECT_TRUE(Contains(a, Action{ActionKind::kAnnounceHave, PeerId(0), ChunkIndex(0)}));
  EXPECT_TRUE(Contains(a, Action{ActionKind::kCancelRequest, PeerId(1), ChunkIndex(0)}));
  EXPECT_EQ(Count(a, ActionKind::kComplete), 1u);
  EXPECT_TRUE(s.complete());
  EXPECT_EQ(s.outstanding_requests(), 0u);
  // A late duplicate changes nothing and completes nothing twice.
  a = Copy(s.OnChunkVerified(t0, ChunkIndex(0), PeerId(1)));
  EXPECT_EQ(Count(a, ActionKind::kComplete), 0u);
  EXPECT_EQ(Count(a, ActionKind::kAnnounceHave), 0u);
}

SchedulerOptions OneChunkNoEndgame() {
  SchedulerOptions o;
  o.chunk_count = 1;
  o.window_per_peer = 1;
  o.endgame_max_requests = 1;
  o.request_timeout = seconds(10);
  return o;
}

TEST(Scheduler, ReissuesARequestPastItsDeadlineElsewhere) {
  Scheduler s = Make(OneChunkNoEndgame());
  EXPECT_EQ(Copy(s.OnPeerConnected(t0, PeerId(1), Set(1, {0}))), std::vector{Req(1, 0)});
  EXPECT_TRUE(s.OnPeerConnected(t0, PeerId(2), Set(1, {0})).empty());
  EXPECT_EQ(s.next_deadline(), Time(seconds(10)));
  EXPECT_TRUE(s.OnTimer(Time(seconds(9))).empty());
  std::vector<Action> a = Copy(s.OnTimer(Time(seconds(10))));
  EXPECT_EQ(a,
            (std::vector{Action{ActionKind::kCancelRequest, PeerId(1), ChunkIndex(0)}, Req(2, 0)}));
  EXPECT_EQ(s.stats().timeouts, 1u);
}

// Requests queued behind a delivering peer do not time out while it delivers.
TEST(Scheduler, ADeliveryFromAPeerRestartsItsOtherRequestsDeadlines) {
  SchedulerOptions o;
  o.chunk_count = 3;
  o.window_per_peer = 3;
  o.endgame_max_requests = 1;
  o.request_timeout = seconds(10);
  Scheduler s = Make(o);
  EXPECT_EQ(
      Count(Copy(s.OnPeerConnected(t0, PeerId(1), Set(3, {0, 1, 2}))), ActionKind::kSendRequest),
      3u);
  (void)s.OnChunkVerified(Time(seconds(8)), ChunkIndex(0), PeerId(1));
  EXPECT_EQ(s.next_deadline(), Time(seconds(18)));
  EXPECT_TRUE(s.OnTimer(Time(seconds(12))).empty());
  (void)s.OnChunkVerified(Time(seconds(16)), ChunkIndex(1), PeerId(1));
  EXPECT_TRUE(s.OnTimer(Time(seconds(20))).empty());
  // Silence for a whole timeout: that one times out.
  EXPECT_EQ(Count(Copy(s.OnTimer(Time(seconds(26)))), ActionKind::kCancelRequest), 1u);
  EXPECT_EQ(s.stats().timeouts, 1u);
}

TEST(Scheduler, ReportsTheFetchTimeOfEachRequestedChunk) {
  SchedulerOptions o;
  o.chunk_count = 3;
  o.window_per_peer = 2;
  o.endgame_max_requests = 1;
  Scheduler s = Make(o);
  EXPECT_LT(s.last_fetch_time(), Duration::zero());  // nothing verified yet
  std::vector<Action> a = Copy(s.OnPeerConnected(t0, PeerId(1), Set(3, {0, 1, 2})));
  ASSERT_EQ(Count(a, ActionKind::kSendRequest), 2u);
  // A request sent at 0 and verified at 3 s; its replacement request goes out at 3 s.
  a = Copy(s.OnChunkVerified(Time(seconds(3)), a[0].chunk, PeerId(1)));
  EXPECT_EQ(s.last_fetch_time(), seconds(3));
  ASSERT_EQ(Count(a, ActionKind::kSendRequest), 1u);
  const ChunkIndex third = std::find_if(a.begin(), a.end(), [](const Action& x) {
                             return x.kind == ActionKind::kSendRequest;
                           })->chunk;
  (void)s.OnChunkVerified(Time(seconds(5)), third, PeerId(1));
  EXPECT_EQ(s.last_fetch_time(), seconds(2));
  // A chunk from a peer that was never asked for it is not timed.
  (void)s.OnPeerConnected(Time(seconds(5)), PeerId(2), Set(3, {0, 1, 2}));
  ChunkIndex left(0);
  while (s.have().Contains(left)) left = ChunkIndex(left.value() + 1);
  (void)s.OnChunkVerified(Time(seconds(6)), left, PeerId(2));
  EXPECT_LT(s.last_fetch_time(), Duration::zero());
}

TEST(Scheduler, DropsAPeerAfterRepeatedTimeouts) {
  SchedulerOptions o = OneChunkNoEndgame();
  o.max_consecutive_timeouts = 1;
  Scheduler s = Make(o);
  (void)s.OnPeerConnected(t0, PeerId(1), Set(1, {0}));
  std::vector<Action> a = Copy(s.OnTimer(Time(seconds(11))));
  EXPECT_TRUE(
      Contains(a, Action{ActionKind::kDropPeer, PeerId(1), ChunkIndex(0), DropReason::kTimeouts}));
  EXPECT_EQ(s.connected_peers(), 0u);
}

TEST(Scheduler, ReissuesADeadPeersRequests) {
  Scheduler s = Make(OneChunkNoEndgame());
  (void)s.OnPeerConnected(t0, PeerId(1), Set(1, {0}));
  (void)s.OnPeerConnected(t0, PeerId(2), Set(1, {0}));
  EXPECT_EQ(Copy(s.OnPeerDisconnected(Time(seconds(1)), PeerId(1))), std::vector{Req(2, 0)});
  EXPECT_EQ(s.availability(ChunkIndex(0)), 1u);
}

TEST(Scheduler, BadChunkDropsThePeerAndRefetchesElsewhere) {
  Scheduler s = Make(OneChunkNoEndgame());
  (void)s.OnPeerConnected(t0, PeerId(1), Set(1, {0}));
  (void)s.OnPeerConnected(t0, PeerId(2), Set(1, {0}));
  std::vector<Action> a = Copy(s.OnChunkFailed(t0, ChunkIndex(0), PeerId(1)));
  EXPECT_EQ(a, (std::vector{
                   Action{ActionKind::kDropPeer, PeerId(1), ChunkIndex(0), DropReason::kBadChunk},
                   Req(2, 0)}));
  EXPECT_FALSE(s.have().Contains(ChunkIndex(0)));
  EXPECT_EQ(s.stats().chunks_failed, 1u);
}

TEST(Scheduler, RejectedRequestIsAskedElsewhere) {
  Scheduler s = Make(OneChunkNoEndgame());
  (void)s.OnPeerConnected(t0, PeerId(1), Set(1, {0}));
  (void)s.OnPeerConnected(t0, PeerId(2), Set(1, {0}));
  EXPECT_EQ(Copy(s.OnRequestRejected(t0, PeerId(1), ChunkIndex(0))), std::vector{Req(2, 0)});
}

TEST(Scheduler, FetchesOnlyTheWantedSubsetButServesWhatItHas) {
  SchedulerOptions o;
  o.chunk_count = 4;
  o.window_per_peer = 4;
  o.want = Set(4, {1, 3});
  Scheduler s = Make(o);
  std::vector<Action> a = Copy(s.OnPeerConnected(t0, PeerId(1), ChunkSet::Full(4)));
  ASSERT_EQ(Count(a, ActionKind::kSendRequest), 2u);
  for (const Action& x : a) EXPECT_TRUE(x.chunk == ChunkIndex(1) || x.chunk == ChunkIndex(3));
  (void)s.OnChunkVerified(t0, ChunkIndex(1), PeerId(1));
  a = Copy(s.OnChunkVerified(t0, ChunkIndex(3), PeerId(1)));
  EXPECT_EQ(Count(a, ActionKind::kComplete), 1u);
  EXPECT_EQ(Count(a, ActionKind::kSendRequest), 0u);
  // It serves a chunk it holds and refuses one it does not.
  (void)s.OnPeerConnected(t0, PeerId(2), ChunkSet(4));
  EXPECT_EQ(Copy(s.OnRequestReceived(t0, PeerId(2), ChunkIndex(1))),
            (std::vector{Action{ActionKind::kSendChunk, PeerId(2), ChunkIndex(1)}}));
  EXPECT_EQ(Copy(s.OnRequestReceived(t0, PeerId(2), ChunkIndex(0))),
            (std::vector{Action{ActionKind::kRejectRequest, PeerId(2), ChunkIndex(0)}}));
}

TEST(Scheduler, BoundsUploadsAndTheServeQueue) {
  SchedulerOptions o;
  o.chunk_count = 4;
  o.initial_have = ChunkSet::Full(4);
  o.upload_slots = 1;
  o.serve_queue_limit = 1;
  Scheduler s = Make(o);
  (void)s.OnPeerConnected(t0, PeerId(1), ChunkSet(4));
  EXPECT_EQ(Count(Copy(s.OnRequestReceived(t0, PeerId(1), ChunkIndex(0))), ActionKind::kSendChunk),
            1u);
  EXPECT_TRUE(s.OnRequestReceived(t0, PeerId(1), ChunkIndex(1)).empty());  // queued
  EXPECT_EQ(
      Count(Copy(s.OnRequestReceived(t0, PeerId(1), ChunkIndex(2))), ActionKind::kRejectRequest),
      1u);
  // A cancel of the running upload stops it and starts the queued one.
  std::vector<Action> a = Copy(s.OnCancelReceived(t0, PeerId(1), ChunkIndex(0)));
  EXPECT_EQ(a, (std::vector{Action{ActionKind::kStopUpload, PeerId(1), ChunkIndex(0)},
                            Action{ActionKind::kSendChunk, PeerId(1), ChunkIndex(1)}}));
}

TEST(Scheduler, DropsPeersThatNameChunksOutsideTheSnapshot) {
  SchedulerOptions o;
  o.chunk_count = 2;
  Scheduler s = Make(o);
  (void)s.OnPeerConnected(t0, PeerId(1), ChunkSet(2));
  std::vector<Action> a = Copy(s.OnHave(t0, PeerId(1), ChunkIndex(7)));
  EXPECT_EQ(a, (std::vector{Action{ActionKind::kDropPeer, PeerId(1), ChunkIndex(0),
                                   DropReason::kProtocolError}}));
  a = Copy(s.OnPeerConnected(t0, PeerId(2), ChunkSet(5)));  // wrong-size have-set
  EXPECT_EQ(Count(a, ActionKind::kDropPeer), 1u);
  EXPECT_EQ(s.connected_peers(), 0u);
}

// Adaptive windows: a peer that answers in 1 s gets more requests in flight than one that
// answers in 10 s.
TEST(Scheduler, AdaptiveWindowGrowsOnFastPeerAndShrinksOnSlowOne) {
  SchedulerOptions o;
  o.chunk_count = 256;
  o.window_per_peer = 2;
  o.max_window_per_peer = 4;
  o.max_outstanding = 64;
  o.adaptive_window = true;
  Scheduler s = Make(o);
  const PeerId fast(1), slow(2);
  std::vector<uint32_t> at_fast, at_slow;
  auto take = [&](std::span<const Action> actions) {
    for (const Action& a : actions) {
      if (a.kind != ActionKind::kSendRequest) continue;
      (a.peer == fast ? at_fast : at_slow).push_back(a.chunk.value());
    }
  };
  take(s.OnPeerConnected(t0, fast, ChunkSet::Full(256)));
  take(s.OnPeerConnected(t0, slow, ChunkSet::Full(256)));
  EXPECT_EQ(s.window(fast), 2u);
  EXPECT_EQ(s.window(slow), 2u);
  ASSERT_EQ(at_fast.size(), 2u);
  ASSERT_EQ(at_slow.size(), 2u);
  // The fast peer answers every request one second after it was sent, for ten seconds.
  for (int t = 1; t <= 10; ++t) {
    std::vector<uint32_t> due;
    due.swap(at_fast);
    for (uint32_t c : due) take(s.OnChunkVerified(Time(seconds(t)), ChunkIndex(c), fast));
    if (t == 10) {
      // The slow peer answers its first requests only now, after ten seconds.
      std::vector<uint32_t> slow_due;
      slow_due.swap(at_slow);
      for (uint32_t c : slow_due) take(s.OnChunkVerified(Time(seconds(t)), ChunkIndex(c), slow));
    }
  }
  EXPECT_EQ(s.window(slow), 1u);
  // One more round from the fast peer, now compared with the slow one: its window grows and its
  // requests in flight follow.
  std::vector<uint32_t> due;
  due.swap(at_fast);
  for (uint32_t c : due) take(s.OnChunkVerified(Time(seconds(11)), ChunkIndex(c), fast));
  EXPECT_GT(s.window(fast), 2u);
  EXPECT_EQ(at_fast.size(), s.window(fast));
  EXPECT_EQ(at_slow.size(), 1u);
}

TEST(Scheduler, FixedWindowWhenNotAdaptive) {
  SchedulerOptions o;
  o.chunk_count = 16;
  o.window_per_peer = 2;
  Scheduler s = Make(o);
  (void)s.OnPeerConnected(t0, PeerId(1), ChunkSet::Full(16));
  (void)s.OnChunkVerified(Time(seconds(1)), ChunkIndex(0), PeerId(1));
  EXPECT_EQ(s.window(PeerId(1)), 2u);
  EXPECT_EQ(s.window(PeerId(9)), 0u);  // not connected
}

TEST(Scheduler, ADeadPeersRequestsMoveToLivePeers) {
  SchedulerOptions o;
  o.chunk_count = 8;
  o.window_per_peer = 1;
  Scheduler s = Make(o);
  for (uint64_t p = 1; p <= 3; ++p) (void)s.OnPeerConnected(t0, PeerId(p), ChunkSet::Full(8));
  ASSERT_EQ(s.outstanding_requests(), 3u);
  (void)s.OnPeerDisconnected(t0, PeerId(2));
  // The dead peer's request went to a live peer, so nothing is stranded.
  EXPECT_EQ(s.outstanding_requests(), 2u);
}

// With slot_per_peer a node serves every connected peer at once even when it has more peers
// than upload_slots; without it the extra peer's request waits in the queue.
TEST(Scheduler, SlotPerPeerServesEveryConnectedPeerAtOnce) {
  SchedulerOptions o;
  o.chunk_count = 4;
  o.initial_have = ChunkSet::Full(4);
  o.upload_slots = 2;
  o.serve_queue_limit = 4;
  for (const bool per_peer : {false, true}) {
    o.slot_per_peer = per_peer;
    Scheduler s = Make(o);
    for (uint64_t p = 1; p <= 3; ++p) (void)s.OnPeerConnected(t0, PeerId(p), ChunkSet(4));
    size_t started = 0;
    for (uint64_t p = 1; p <= 3; ++p) {
      started += Count(Copy(s.OnRequestReceived(t0, PeerId(p), ChunkIndex(uint32_t(p)))),
                       ActionKind::kSendChunk);
    }
    EXPECT_EQ(started, per_peer ? 3u : 2u);
    EXPECT_EQ(s.uploads_active(), per_peer ? 3u : 2u);
    EXPECT_EQ(s.serve_queue_size(), per_peer ? 0u : 1u);
    // The bound is per connected peer: a fourth request from a peer already served queues.
    EXPECT_TRUE(s.OnRequestReceived(t0, PeerId(1), ChunkIndex(0)).empty());
    EXPECT_EQ(s.uploads_active(), per_peer ? 3u : 2u);
  }
}

// Holders are kept per chunk by slot: past 64 peers the words widen, and availability, the
// receiver holders and holder_slots stay right as peers (sources among them) come and go.
TEST(Scheduler, CountsHoldersOfManyPeersBySlot) {
  SchedulerOptions o;
  o.chunk_count = 3;
  o.initial_have = ChunkSet::Full(3);  // holds everything: no requests, only counting
  Scheduler s = Make(o);
  for (uint64_t id = 1; id <= 100; ++id) {
    const PeerRole role = id % 10 == 0 ? PeerRole::kSource : PeerRole::kReceiver;
    s.OnPeerConnected(t0, PeerId(id), id % 2 == 0 ? Set(3, {0, 1}) : Set(3, {1}), role);
  }
  s.OnHave(t0, PeerId(99), ChunkIndex(2));
  s.OnHave(t0, PeerId(70), ChunkIndex(2), /*slot_hint=*/0);  // a wrong hint is looked up
  EXPECT_EQ(s.availability(ChunkIndex(0)), 50u);
  EXPECT_EQ(s.receiver_holders(ChunkIndex(0)), 40u);  // 10 of the even ids are sources
  EXPECT_EQ(s.availability(ChunkIndex(1)), 100u);
  EXPECT_EQ(s.availability(ChunkIndex(2)), 2u);
  EXPECT_EQ(s.receiver_holders(ChunkIndex(2)), 1u);
  ASSERT_GE(s.holder_words(), 2u);
  const std::optional<uint32_t> slot99 = s.slot(PeerId(99));
  ASSERT_TRUE(slot99.has_value());
  EXPECT_NE((s.holder_slots(ChunkIndex(2))[*slot99 / 64] >> (*slot99 % 64)) & 1, 0u);
  ASSERT_NE(s.peer_has(*slot99, PeerId(99)), std::nullopt);
  EXPECT_TRUE(s.peer_has(*slot99, PeerId(99))->Contains(ChunkIndex(2)));
  EXPECT_EQ(s.peer_has(*slot99, PeerId(98)), std::nullopt);
  for (uint64_t id = 1; id <= 100; id += 2) s.OnPeerDisconnected(t0, PeerId(id));
  EXPECT_EQ(s.availability(ChunkIndex(1)), 50u);
  EXPECT_EQ(s.availability(ChunkIndex(2)), 1u);
  EXPECT_EQ(s.receiver_holders(ChunkIndex(2)), 0u);  // 70 is a source
  EXPECT_EQ(s.peer_has(*slot99, PeerId(99)), std::nullopt);
  EXPECT_FALSE(s.slot(PeerId(99)).has_value());
}

}  // namespace
}  // namespace weightcast::swarm
