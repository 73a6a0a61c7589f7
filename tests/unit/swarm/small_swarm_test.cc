// Whole swarms of 2-5 schedulers wired together by a tiny in-test driver (messages delivered in
// order, an upload finishing a few steps after it starts), across many seeds: every node
// completes, the source sends every chunk once before any repeat, and no byte comes from nowhere.
#include <gtest/gtest.h>

#include <deque>
#include <optional>
#include <vector>

#include "swarm/scheduler.h"

namespace weightcast::swarm {
namespace {

struct Msg {
  enum Kind { kRequest, kCancel, kReject, kHave, kChunk, kUploadDone } kind;
  uint32_t to, from, chunk;
};

struct Outcome {
  bool all_complete = true;
  std::vector<uint32_t> source_order;  // chunks in the order the source started sending them
  uint64_t chunks_sent = 0, chunks_received = 0;
};

Outcome RunSwarm(uint32_t nodes, uint32_t chunks, uint64_t seed, std::vector<ChunkSet> want = {}) {
  std::vector<std::optional<Scheduler>> s(nodes);
  for (uint32_t i = 0; i < nodes; ++i) {
    SchedulerOptions o;
    o.chunk_count = chunks;
    o.initial_have = i == 0 ? ChunkSet::Full(chunks) : ChunkSet(chunks);
    if (i < want.size()) o.want = want[i];
    o.window_per_peer = 2;
    o.upload_slots = 2;
    o.serve_queue_limit = 4;
    o.spread_first = i == 0;
    o.seed = seed * 31 + i;
    s[i].emplace(std::move(Scheduler::Create(std::move(o))).value());
  }
  std::deque<Msg> q;
  // An upload completes after the messages queued behind it: the queue models the wire.
  Outcome out;
  const Time now{0};
  auto apply = [&](uint32_t i, std::span<const Action> actions) {
    for (const Action& a : actions) {
      const uint32_t p = static_cast<uint32_t>(a.peer.value());
      const uint32_t c = a.chunk.value();
      switch (a.kind) {
        case ActionKind::kSendRequest:
          q.push_back({Msg::kRequest, p, i, c});
          break;
        case ActionKind::kCancelRequest:
          q.push_back({Msg::kCancel, p, i, c});
          break;
        case ActionKind::kRejectRequest:
          q.push_back({Msg::kReject, p, i, c});
          break;
        case ActionKind::kSendChunk:
          if (i == 0) out.source_order.push_back(c);
          ++out.chunks_sent;
          q.push_back({Msg::kChunk, p, i, c});
          q.push_back({Msg::kUploadDone, i, p, c});
          break;
        case ActionKind::kAnnounceHave:
          for (uint32_t j = 0; j < nodes; ++j) {
            if (j != i) q.push_back({Msg::kHave, j, i, c});
          }
          break;
        case ActionKind::kStopUpload:
        case ActionKind::kDropPeer:
        case ActionKind::kComplete:
          break;
      }
    }
  };
  for (uint32_t i = 0; i < nodes; ++i) {
    for (uint32_t j = i + 1; j < nodes; ++j) {
      apply(i, s[i]->OnPeerConnected(now, PeerId(j), s[j]->have()));
      apply(j, s[j]->OnPeerConnected(now, PeerId(i), s[i]->have()));
    }
  }
  for (int steps = 0; !q.empty() && steps < 1000000; ++steps) {
    const Msg m = q.front();
    q.pop_front();
    Scheduler& to = *s[m.to];
    const PeerId from(m.from);
    const ChunkIndex c(m.chunk);
    switch (m.kind) {
      case Msg::kRequest:
        apply(m.to, to.OnRequestReceived(now, from, c));
        break;
      case Msg::kCancel:
        apply(m.to, to.OnCancelReceived(now, from, c));
        break;
      case Msg::kReject:
        apply(m.to, to.OnRequestRejected(now, from, c));
        break;
      case Msg::kHave:
        apply(m.to, to.OnHave(now, from, c));
        break;
      case Msg::kChunk:
        ++out.chunks_received;
        apply(m.to, to.OnChunkVerified(now, c, from));
        break;
      case Msg::kUploadDone:
        apply(m.to, to.OnUploadDone(now, from, c));
        break;
    }
    // Refusal backoffs expire with time; tick everyone when the wire goes quiet.
    if (q.empty()) {
      for (uint32_t i = 0; i < nodes; ++i) apply(i, s[i]->OnTimer(Time(std::chrono::hours(1))));
    }
  }
  for (uint32_t i = 1; i < nodes; ++i) out.all_complete &= s[i]->complete();
  return out;
}

TEST(SmallSwarm, EveryNodeCompletesAndTheSourceSpreadsFirst) {
  for (uint32_t nodes = 2; nodes <= 5; ++nodes) {
    for (uint32_t chunks = 1; chunks <= 9; chunks += 2) {
      for (uint64_t seed = 1; seed <= 10; ++seed) {
        const Outcome o = RunSwarm(nodes, chunks, seed);
        SCOPED_TRACE(testing::Message()
                     << nodes << " nodes, " << chunks << " chunks, seed " << seed);
        EXPECT_TRUE(o.all_complete);
        ASSERT_GE(o.source_order.size(), chunks);
        std::vector<uint32_t> first(o.source_order.begin(), o.source_order.begin() + chunks);
        std::sort(first.begin(), first.end());
        for (uint32_t c = 0; c < chunks; ++c) EXPECT_EQ(first[c], c);
        // Every chunk sent arrived somewhere, and nothing arrived that was not sent.
        EXPECT_EQ(o.chunks_sent, o.chunks_received);
        EXPECT_GE(o.chunks_received, uint64_t{chunks} * (nodes - 1));
      }
    }
  }
}

TEST(SmallSwarm, SubsetNodesFetchOnlyTheirSubset) {
  const uint32_t chunks = 6;
  std::vector<ChunkSet> want(3, ChunkSet(chunks));
  want[0] = ChunkSet::Full(chunks);
  want[1] = ChunkSet::Full(chunks);
  for (uint32_t c : {0u, 2u}) want[2].Insert(ChunkIndex(c));
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const Outcome o = RunSwarm(3, chunks, seed, want);
    EXPECT_TRUE(o.all_complete);
  }
}

}  // namespace
}  // namespace weightcast::swarm
