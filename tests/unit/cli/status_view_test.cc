#include "cli/status_view.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace weightcast::cli {
namespace {

namespace wire = coord::wire;

constexpr uint64_t kMiB = 1 << 20;

wire::FleetStatus Fleet(uint64_t now_ms) {
  wire::FleetStatus status;
  status.set_now_unix_ms(now_ms);
  wire::ChannelLog* log = status.add_channels();
  log->set_channel("policy");
  log->set_current_version(1);
  for (uint64_t v : {1, 2}) {
    wire::VersionEntry* e = log->add_versions();
    e->set_version(v);
    e->set_total_bytes(100 * kMiB);
    e->set_chunk_count(100);
  }
  log->mutable_versions(1)->set_base_version(1);
  log->mutable_versions(1)->set_payload_bytes(3 * kMiB);
  return status;
}

wire::ChannelProgress* AddNode(wire::FleetStatus& status, uint64_t id, bool alive,
                               wire::Phase phase, uint64_t version, uint64_t current,
                               uint64_t mib_done, uint64_t mib_total = 100) {
  wire::NodeStatus* node = status.add_nodes();
  node->set_node_id(id);
  node->set_alive(alive);
  node->set_rack("r" + std::to_string(id % 2));
  node->set_hostname("host" + std::to_string(id));
  node->set_last_heartbeat_ms_ago(alive ? 300 : 12'000);
  wire::ChannelProgress* p = node->add_channels();
  p->set_channel("policy");
  p->set_phase(phase);
  p->set_version(version);
  p->set_current_version(current);
  p->set_bytes_done(mib_done * kMiB);
  p->set_bytes_total(mib_total * kMiB);
  p->set_chunks_done(static_cast<uint32_t>(mib_done));
  p->set_chunks_total(static_cast<uint32_t>(mib_total));
  p->set_bytes_received(mib_done * kMiB / 10);
  return p;
}

TEST(ProgressBar, HasExactWidthAndIsFullOnlyWhenDone) {
  EXPECT_EQ(ProgressBar(0, 10), "[..........]");
  EXPECT_EQ(ProgressBar(0.5, 10), "[#####.....]");
  EXPECT_EQ(ProgressBar(0.999, 10), "[#########.]");
  EXPECT_EQ(ProgressBar(1, 10), "[##########]");
  EXPECT_EQ(ProgressBar(7, 4), "[####]");
  EXPECT_EQ(ProgressBar(-1, 4), "[....]");
  EXPECT_EQ(ProgressBar(std::nan(""), 4), "[....]");
  for (int w : {1, 3, 17, 40}) {
    for (double f : {0.0, 0.13, 0.5, 0.99, 1.0}) {
      EXPECT_EQ(ProgressBar(f, w).size(), static_cast<size_t>(w + 2));
    }
  }
}

TEST(FormatEta, RoundsUpAndScalesUnits) {
  EXPECT_EQ(FormatEta(std::nullopt), "-");
  EXPECT_EQ(FormatEta(0), "0s");
  EXPECT_EQ(FormatEta(0.2), "1s");
  EXPECT_EQ(FormatEta(59), "59s");
  EXPECT_EQ(FormatEta(185), "3m05s");
  EXPECT_EQ(FormatEta(7260), "2h01m");
  EXPECT_EQ(FormatEta(-1), "-");
  EXPECT_EQ(FormatEta(1e12), "-");
  EXPECT_EQ(FormatRate(25.0 * kMiB), "25.00 MiB/s");
  EXPECT_EQ(FormatRate(std::nullopt), "-");
}

TEST(Summarize, CountsLiveFollowersAndComputesRateAndEta) {
  wire::FleetStatus before = Fleet(10'000);
  AddNode(before, 1, true, wire::PHASE_FETCHING, 2, 1, 20);
  AddNode(before, 2, true, wire::PHASE_FETCHING, 2, 1, 30);
  wire::FleetStatus now = Fleet(12'000);  // 2 s later
  AddNode(now, 1, true, wire::PHASE_FETCHING, 2, 1, 40);
  AddNode(now, 2, true, wire::PHASE_FETCHING, 2, 1, 50);
  AddNode(now, 3, true, wire::PHASE_COMMITTED, 2, 2, 100);
  AddNode(now, 4, true, wire::PHASE_PREPARED, 2, 1, 100);
  AddNode(now, 5, false, wire::PHASE_FETCHING, 2, 1, 10);  // dead: not counted
  AddNode(now, 6, true, wire::PHASE_IDLE, 1, 1, 0, 0);     // not started on v2
  wire::ChannelProgress* src = AddNode(now, 7, true, wire::PHASE_SEEDING, 2, 2, 100);
  now.mutable_nodes(6)->set_source(true);  // the publisher is not a follower
  src->set_bytes_sent(250 * kMiB);

  // Whole versions here (node 6 holds v1 and would fetch a delta of it: see DeltaFetches...).
  for (wire::FleetStatus* f : {&before, &now}) {
    f->mutable_channels(0)->mutable_versions(1)->clear_base_version();
    f->mutable_channels(0)->mutable_versions(1)->clear_payload_bytes();
  }
  std::vector<ChannelSummary> s = Summarize(now, &before);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].channel, "policy");
  EXPECT_EQ(s[0].version, 2u);
  EXPECT_EQ(s[0].followers, 5u);
  EXPECT_EQ(s[0].dead, 1u);
  EXPECT_EQ(s[0].committed, 1u);
  EXPECT_EQ(s[0].prepared, 1u);
  EXPECT_EQ(s[0].nodes_done(), 2u);
  EXPECT_FALSE(s[0].complete());
  // 40 + 50 + 100 + 100 + 0 of 5 x 100 MiB (node 6 counted with the whole version).
  EXPECT_EQ(s[0].bytes_done, 290 * kMiB);
  EXPECT_EQ(s[0].bytes_total, 500 * kMiB);
  EXPECT_EQ(s[0].chunks_done, 290u);
  EXPECT_EQ(s[0].chunks_total, 500u);
  EXPECT_EQ(s[0].bytes_sent, 250 * kMiB);
  // Before: 20 + 30 on live followers; now 290: 240 MiB in 2 s.
  ASSERT_TRUE(s[0].verified_bytes_per_s.has_value());
  EXPECT_DOUBLE_EQ(*s[0].verified_bytes_per_s, 120.0 * kMiB);
  // 210 MiB left at 120 MiB/s.
  ASSERT_TRUE(s[0].eta_s.has_value());
  EXPECT_DOUBLE_EQ(*s[0].eta_s, 1.75);
}

TEST(Summarize, NoRateAcrossVersionsOrWithoutAnEarlierSnapshot) {
  wire::FleetStatus before = Fleet(10'000);
  before.mutable_channels(0)->mutable_versions()->RemoveLast();  // only v1 then
  AddNode(before, 1, true, wire::PHASE_COMMITTED, 1, 1, 100);
  wire::FleetStatus now = Fleet(11'000);
  AddNode(now, 1, true, wire::PHASE_FETCHING, 2, 1, 50);
  auto s = Summarize(now, &before);
  EXPECT_FALSE(s[0].verified_bytes_per_s.has_value());
  EXPECT_FALSE(s[0].eta_s.has_value());
  EXPECT_FALSE(Summarize(now, nullptr)[0].eta_s.has_value());
}

TEST(Summarize, CompleteWhenEveryLiveFollowerCommittedTheNewest) {
  wire::FleetStatus now = Fleet(1000);
  AddNode(now, 1, true, wire::PHASE_COMMITTED, 2, 2, 100);
  AddNode(now, 2, true, wire::PHASE_IDLE, 2, 2, 100);
  AddNode(now, 3, false, wire::PHASE_FETCHING, 2, 1, 3);  // dead ones do not hold it up
  auto s = Summarize(now, nullptr);
  EXPECT_TRUE(s[0].complete());
  EXPECT_EQ(s[0].eta_s, 0.0);
  // A subset agent wants fewer bytes; its own totals count.
  AddNode(now, 4, true, wire::PHASE_FETCHING, 2, 1, 5, 10);
  s = Summarize(now, nullptr);
  EXPECT_FALSE(s[0].complete());
  EXPECT_EQ(s[0].bytes_total, 210 * kMiB);
  EXPECT_EQ(s[0].bytes_done, 205 * kMiB);
  // A subset agent keeps its tensors staged (PREPARED) and never commits: that is done.
  wire::FleetStatus subset = Fleet(1000);
  AddNode(subset, 1, true, wire::PHASE_COMMITTED, 2, 2, 100);
  AddNode(subset, 2, true, wire::PHASE_PREPARED, 2, 1, 10, 10);
  EXPECT_FALSE(Summarize(subset, nullptr)[0].complete());  // no patterns: must commit
  subset.mutable_nodes(1)->add_tensor_patterns("model.layers.0.*");
  s = Summarize(subset, nullptr);
  EXPECT_EQ(s[0].subset_prepared, 1u);
  EXPECT_TRUE(s[0].complete());
  // No followers at all is not complete.
  wire::FleetStatus empty = Fleet(1000);
  EXPECT_FALSE(Summarize(empty, nullptr)[0].complete());
  EXPECT_TRUE(Summarize(empty, nullptr, "other").empty());
}

TEST(RenderStatus, DrawsBarsAndAFleetTableWithDeadNodes) {
  wire::FleetStatus before = Fleet(10'000);
  AddNode(before, 1, true, wire::PHASE_FETCHING, 2, 1, 0);
  AddNode(before, 2, true, wire::PHASE_FETCHING, 2, 1, 0);
  wire::FleetStatus now = Fleet(12'000);
  AddNode(now, 1, true, wire::PHASE_FETCHING, 2, 1, 50);
  AddNode(now, 2, true, wire::PHASE_COMMITTED, 2, 2, 100);
  wire::ChannelProgress* bad = AddNode(now, 3, false, wire::PHASE_FAILED, 2, 1, 10);
  bad->set_error("hash mismatch\x1b[2J");

  std::string text = RenderStatus(now, &before, {.channel = "", .width = 100});
  // The bars take what the longest detail leaves: 100 - 20 - 44 = 36; 150 of 200 MiB -> 27.
  EXPECT_NE(text.find("  bytes  [###########################.........]  75.0%  150.00 MiB / "
                      "200.00 MiB\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  chunks [###########################.........]  75.0%  150 / 200\n"),
            std::string::npos);
  EXPECT_NE(text.find("  nodes  [##################..................]  50.0%  1 / 2 done (1 "
                      "committed, 0 prepared), 1 dead\n"),
            std::string::npos);
  // 150 MiB verified in 2 s, 50 left.
  EXPECT_NE(text.find("verified 75.00 MiB/s"), std::string::npos);
  EXPECT_NE(text.find("ETA 1s"), std::string::npos);
  EXPECT_NE(text.find("policy  v2 (delta of v1, payload 3.00 MiB), 100.00 MiB  fleet current v1"),
            std::string::npos);
  EXPECT_NE(text.find("nodes 3 (2 live, 1 dead)"), std::string::npos);
  // The table: a row per node, the dead one marked, the error shown with its escape defused.
  EXPECT_NE(text.find("NODE"), std::string::npos);
  EXPECT_NE(text.find("3 host3"), std::string::npos);
  EXPECT_NE(text.find("DEAD"), std::string::npos);
  EXPECT_NE(text.find("12s ago"), std::string::npos);
  EXPECT_NE(text.find("error: node 3 policy v2: hash mismatch\\x1b[2J\n"), std::string::npos);
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  // The failed node first, the others by node id.
  EXPECT_LT(text.find("3 host3"), text.find("1 host1"));
  EXPECT_LT(text.find("1 host1"), text.find("2 host2"));
}

// Every line of `text` is at most `width` columns.
void ExpectFits(const std::string& text, size_t width) {
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    EXPECT_LE(nl - start, width) << "line: " << text.substr(start, nl - start);
    start = nl + 1;
  }
}

// The header line of the fleet table.
std::string TableHeader(const std::string& text) {
  const size_t at = text.find("NODE");
  return at == std::string::npos ? "" : text.substr(at, text.find('\n', at) - at);
}

TEST(RenderStatus, FitsTheWidthAndKeepsOutAndHeartbeatWhileThereIsRoom) {
  wire::FleetStatus now = Fleet(1000);
  AddNode(now, 1, true, wire::PHASE_FETCHING, 2, 1, 50)->set_bytes_sent(7 * kMiB);
  AddNode(now, 1234567, true, wire::PHASE_COMMITTED, 2, 2, 100);
  now.mutable_nodes(1)->set_hostname("gpu-node-017.rack-b.example.internal");
  now.mutable_nodes(1)->set_rack("rack-b");

  const std::string wide = RenderStatus(now, nullptr, {.channel = "", .width = 200});
  size_t at = 0;
  for (const char* column : {"NODE", "RACK", "ALIVE", "CHANNEL", "PHASE", "VERSION", "CURRENT",
                             "DONE", "IN", "OUT", "HEARTBEAT"}) {
    const size_t next = TableHeader(wide).find(column, at);
    EXPECT_NE(next, std::string::npos) << column;
    at = next;
  }
  EXPECT_NE(wide.find("1234567 gpu-node-017.rack-b.example.internal  rack-b"), std::string::npos)
      << wide;
  EXPECT_EQ(wide.find("not shown"), std::string::npos);
  ExpectFits(wide, 200);

  // 80 columns (the default without a terminal): OUT and HEARTBEAT are still there; RACK,
  // CHANNEL (one channel, named above) and IN give way, and the view says so.
  const std::string text = RenderStatus(now, nullptr, {.channel = "", .width = 80});
  ExpectFits(text, 80);
  const std::string header = TableHeader(text);
  EXPECT_NE(header.find("OUT"), std::string::npos) << text;
  EXPECT_NE(header.find("HEARTBEAT"), std::string::npos) << text;
  EXPECT_NE(header.find("DONE"), std::string::npos);
  EXPECT_EQ(header.find("RACK"), std::string::npos);
  EXPECT_NE(text.find("(not shown at 80 columns: RACK, CHANNEL, IN;"), std::string::npos) << text;
  EXPECT_NE(text.find("not shown at 80 columns"), std::string::npos);
  EXPECT_NE(text.find("7.00 MiB"), std::string::npos) << text;  // node 1's OUT
  EXPECT_NE(text.find("0.3s ago"), std::string::npos);
  // The long host name is cut, marked with '~'.
  EXPECT_NE(text.find("1234567 gpu-node-01~"), std::string::npos) << text;
  // Bars take what is left: 80 - 20 - 36.
  EXPECT_NE(text.find("  bytes  [" + std::string(18, '#') + std::string(6, '.') + "]"),
            std::string::npos)
      << text;

  // Very narrow: the columns that must stay still do; nothing is wider than the screen.
  const std::string narrow = RenderStatus(now, nullptr, {.channel = "", .width = 40});
  ExpectFits(narrow, 40);
  EXPECT_NE(TableHeader(narrow).find("PHASE"), std::string::npos) << narrow;
  EXPECT_NE(TableHeader(narrow).find("DONE"), std::string::npos) << narrow;
  EXPECT_NE(narrow.find("  nodes  ["), std::string::npos);
}

TEST(ResolveWidth, TerminalThenColumnsThenEighty) {
  EXPECT_EQ(ResolveWidth(132, "90"), 132);
  EXPECT_EQ(ResolveWidth(0, "90"), 90);
  EXPECT_EQ(ResolveWidth(0, nullptr), 80);
  EXPECT_EQ(ResolveWidth(0, "wide"), 80);
  EXPECT_EQ(ResolveWidth(0, "90x"), 80);
  EXPECT_EQ(ResolveWidth(0, "3"), 80);
}

TEST(Summarize, DeltaFetchesCountPayloadBytesNotModelBytes) {
  // v2 is a delta of v1 with 3 MiB of payloads in a 100 MiB model.
  wire::FleetStatus now = Fleet(1000);
  AddNode(now, 1, true, wire::PHASE_FETCHING, 2, 1, 50)->set_delta(true);
  now.mutable_nodes(0)->mutable_channels(0)->set_bytes_received(kMiB);
  wire::ChannelProgress* done = AddNode(now, 2, true, wire::PHASE_COMMITTED, 2, 2, 100);
  done->set_delta(true);
  done->set_bytes_received(3 * kMiB + 4096);            // headers too: clamped to the payloads
  AddNode(now, 3, true, wire::PHASE_IDLE, 1, 1, 0, 0);  // holds the base: will fetch the delta
  auto s = Summarize(now, nullptr);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].delta_followers, 3u);
  EXPECT_EQ(s[0].bytes_total, 9 * kMiB);
  EXPECT_EQ(s[0].bytes_done, 4 * kMiB);
  // Chunks stay chunks.
  EXPECT_EQ(s[0].chunks_total, 300u);
  std::string text = RenderStatus(now, nullptr, {.channel = "", .width = 100});
  EXPECT_NE(text.find("4.00 MiB / 9.00 MiB (delta payloads)"), std::string::npos) << text;
  // The fetching node's DONE is its wire bytes against the payloads: 1 of 3 MiB.
  EXPECT_NE(text.find("33.3%"), std::string::npos) << text;

  // A node fetching the whole version (no base) still counts model bytes.
  wire::FleetStatus full = Fleet(1000);
  AddNode(full, 1, true, wire::PHASE_FETCHING, 2, 0, 50);
  s = Summarize(full, nullptr);
  EXPECT_EQ(s[0].delta_followers, 0u);
  EXPECT_EQ(s[0].bytes_total, 100 * kMiB);
  EXPECT_EQ(s[0].bytes_done, 50 * kMiB);
}

TEST(Summarize, AfterARollbackTheBarsShowTheFleetsCurrentVersion) {
  // v2 was committed, then rolled back to v1: v2 reads ABORT, v1 is current.
  wire::FleetStatus now = Fleet(1000);
  wire::ChannelLog* log = now.mutable_channels(0);
  log->mutable_versions(0)->set_decision(wire::DECISION_COMMIT);
  log->mutable_versions(1)->set_decision(wire::DECISION_ABORT);
  log->mutable_versions(1)->set_abort_reason("rolled back to v1");
  log->mutable_versions(1)->set_committed_once(true);
  log->set_current_version(1);
  AddNode(now, 1, true, wire::PHASE_IDLE, 2, 1, 0, 0);
  AddNode(now, 2, true, wire::PHASE_COMMITTED, 1, 1, 100);
  auto s = Summarize(now, nullptr);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].version, 2u);
  EXPECT_EQ(s[0].target, 1u);
  EXPECT_EQ(s[0].committed, 2u);
  EXPECT_EQ(s[0].bytes_done, s[0].bytes_total);
  EXPECT_EQ(s[0].bytes_total, 200 * kMiB);
  EXPECT_TRUE(s[0].settled());
  // The rollout of v2 is over (committed, then rolled back past) and the fleet settled on the
  // version rolled back to: --until-complete is done.
  EXPECT_TRUE(s[0].rolled_back());
  EXPECT_TRUE(s[0].complete());
  std::string text = RenderStatus(now, nullptr, {.channel = "", .width = 100});
  EXPECT_NE(text.find("ABORTED: rolled back to v1"), std::string::npos) << text;
  EXPECT_NE(text.find("fleet current v1, 100.00 MiB  settled"), std::string::npos) << text;
  EXPECT_NE(text.find("  bytes  [" + std::string(44, '#') + "] 100.0%"), std::string::npos) << text;
  EXPECT_NE(text.find("  nodes  [" + std::string(44, '#') + "] 100.0%  2 / 2 done"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("  0.0%"), std::string::npos) << text;
  EXPECT_EQ(RenderSummaryLine(s[0]),
            "policy v1 (v2 aborted) bytes 100.0% chunks 200/200 nodes 2/2 - ETA 0s settled");

  // A node still on v2 has not switched back yet: not done.
  AddNode(now, 3, true, wire::PHASE_COMMITTED, 2, 2, 100);
  s = Summarize(now, nullptr);
  EXPECT_EQ(s[0].committed, 2u);
  EXPECT_EQ(s[0].followers, 3u);
  EXPECT_FALSE(s[0].settled());
}

TEST(RenderStatus, NodesThatLeftAreHiddenUnlessAskedFor) {
  wire::FleetStatus now = Fleet(1000);
  AddNode(now, 1, true, wire::PHASE_COMMITTED, 2, 2, 100);
  AddNode(now, 2, false, wire::PHASE_FETCHING, 2, 1, 10);  // dead
  for (uint64_t id : {5, 6, 7}) {
    AddNode(now, id, false, wire::PHASE_SEEDING, 2, 2, 100);
    now.mutable_nodes(now.nodes_size() - 1)->set_source(true);
    now.mutable_nodes(now.nodes_size() - 1)->set_left(true);
  }
  // A follower that left is not one any more: v2 is complete on the one live follower.
  AddNode(now, 8, false, wire::PHASE_FETCHING, 2, 1, 10);
  now.mutable_nodes(now.nodes_size() - 1)->set_left(true);
  auto s = Summarize(now, nullptr);
  EXPECT_EQ(s[0].followers, 1u);
  EXPECT_EQ(s[0].dead, 1u);

  std::string text = RenderStatus(now, nullptr, {.channel = "", .width = 120});
  EXPECT_NE(text.find("nodes 2 (1 live, 1 dead), 4 left (--all shows them)"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("5 host5"), std::string::npos) << text;
  EXPECT_EQ(text.find("8 host8"), std::string::npos);
  EXPECT_NE(text.find("2 host2"), std::string::npos);

  text = RenderStatus(now, nullptr, {.channel = "", .width = 120, .show_left = true});
  EXPECT_NE(text.find("nodes 2 (1 live, 1 dead), 4 left\n"), std::string::npos) << text;
  EXPECT_NE(text.find("5 host5 (source)"), std::string::npos) << text;
  EXPECT_NE(text.find("left"), std::string::npos);
  // Narrow: the hint is shortened, not cut.
  text = RenderStatus(now, nullptr, {.channel = "", .width = 80});
  EXPECT_NE(text.find("Z  nodes 2 (1 live, 1 dead), 4 left (--all)\n"), std::string::npos) << text;
  ExpectFits(text, 80);
  EXPECT_NE(text.find("\n  complete\n"), std::string::npos) << text;  // on a line of its own
}

// A publisher leaves once its --until holds; what it uploaded for the version still counts in the
// rollout's wire bytes, as it does in the fleet page's "source upload".
TEST(Summarize, WireBytesOfNodesThatLeftStillCount) {
  wire::FleetStatus now = Fleet(1000);
  AddNode(now, 1, true, wire::PHASE_COMMITTED, 2, 2, 100)->set_bytes_sent(kMiB);
  wire::ChannelProgress* source = AddNode(now, 9, false, wire::PHASE_SEEDING, 2, 2, 100);
  source->set_bytes_received(0);
  source->set_bytes_sent(16 * kMiB);
  now.mutable_nodes(1)->set_source(true);
  now.mutable_nodes(1)->set_left(true);
  wire::ChannelProgress* agent_left = AddNode(now, 8, false, wire::PHASE_COMMITTED, 2, 2, 100);
  agent_left->set_bytes_sent(2 * kMiB);
  now.mutable_nodes(2)->set_left(true);
  const ChannelSummary s = Summarize(now, nullptr)[0];
  EXPECT_EQ(s.bytes_sent, 19 * kMiB);
  EXPECT_EQ(s.bytes_received, 20 * kMiB);  // 10 MiB each from AddNode: agents 1 and 8
  EXPECT_EQ(s.followers, 1u);              // the agent that left is not a follower any more
}

// A fleet of `agents` on v2 of Fleet(): agent i (id 100 + i, rack "r" + i % 4) is dead when i % 10
// is 1, failed when it is 2, else it has i % 10 tenths of v2 (9 is prepared: all of it).
wire::FleetStatus LargeFleet(uint64_t agents) {
  wire::FleetStatus now = Fleet(1000);
  for (uint64_t i = 0; i < agents; ++i) {
    const uint64_t tenth = i % 10;
    const wire::Phase phase = tenth == 2   ? wire::PHASE_FAILED
                              : tenth == 9 ? wire::PHASE_PREPARED
                                           : wire::PHASE_FETCHING;
    AddNode(now, 100 + i, tenth != 1, phase, 2, 1, tenth == 9 ? 100 : 10 * tenth);
    now.mutable_nodes(now.nodes_size() - 1)->set_rack("r" + std::to_string(i % 4));
  }
  AddNode(now, 7, true, wire::PHASE_SEEDING, 2, 2, 100);
  now.mutable_nodes(now.nodes_size() - 1)->set_source(true);
  return now;
}

TEST(SummarizeFleet, CountsStatesProgressLeastAdvancedAndRacks) {
  const wire::FleetStatus now = LargeFleet(40);
  const std::vector<FleetSummary> summaries = SummarizeFleet(now);
  ASSERT_EQ(summaries.size(), 1u);
  const FleetSummary& f = summaries[0];
  EXPECT_EQ(f.nodes, 41u);
  // Lagging: live, not failed, below half the best (the prepared ones and the source have it
  // all): tenths 0, 3 and 4.
  const std::vector<std::pair<std::string, uint32_t>> states = {{"FAILED", 4},   {"dead", 4},
                                                                {"lagging", 12}, {"FETCHING", 28},
                                                                {"PREPARED", 4}, {"SEEDING", 1}};
  EXPECT_EQ(f.states, states);
  // Live agents: tenths 0, 3..8 in their buckets, the failed ones at 20%, prepared ones done.
  const std::array<uint32_t, FleetSummary::kBuckets> histogram = {4, 0, 4, 4, 4, 4, 4, 4, 4, 0, 4};
  EXPECT_EQ(f.histogram, histogram);
  ASSERT_EQ(f.least_advanced.size(), FleetSummary::kLeastAdvanced);
  EXPECT_EQ(f.least_advanced[0].node_id, 100u);  // tenth 0, lowest id first
  EXPECT_EQ(f.least_advanced[0].state, "FETCHING (lagging)");
  EXPECT_EQ(f.least_advanced[4].node_id, 103u);  // then the four at 30%
  EXPECT_DOUBLE_EQ(f.least_advanced[4].progress, 0.3);
  ASSERT_EQ(f.racks.size(), 4u);
  uint32_t agents = 0, failed = 0, dead = 0, done = 0;
  for (const FleetSummary::Rack& r : f.racks) {
    agents += r.agents;
    failed += r.failed;
    dead += r.dead;
    done += r.done;
  }
  EXPECT_EQ(agents, 40u);  // the source is not an agent of any rack
  EXPECT_EQ(failed, 4u);
  EXPECT_EQ(dead, 4u);
  EXPECT_EQ(done, 4u);
  for (size_t i = 1; i < f.racks.size(); ++i) {  // least advanced first
    EXPECT_LE(f.racks[i - 1].progress_sum / f.racks[i - 1].agents,
              f.racks[i].progress_sum / f.racks[i].agents);
  }
}

TEST(RenderStatus, LargeFleetsGetTheSummaryUnlessEveryNodeIsAsked) {
  // Up to kSummaryAboveNodes nodes: the table, as always.
  std::string text =
      RenderStatus(LargeFleet(kSummaryAboveNodes - 1), nullptr, {.channel = "", .width = 100});
  EXPECT_NE(text.find("NODE"), std::string::npos) << text;
  EXPECT_EQ(text.find("summarized"), std::string::npos) << text;

  const wire::FleetStatus large = LargeFleet(1000);
  text = RenderStatus(large, nullptr, {.channel = "", .width = 100});
  ExpectFits(text, 100);
  EXPECT_NE(text.find("policy: 1001 nodes, summarized (--nodes lists every one)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  states    FAILED 100  dead 100  lagging 300  FETCHING 700  PREPARED 100  "
                      "SEEDING 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  progress  0-10% 100  10-20% 0  20-30% 100"), std::string::npos) << text;
  EXPECT_NE(text.find("    NODE  HOST     RACK  STATE               DONE\n"
                      "    100   host100  r0    FETCHING (lagging)  0.0%\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  racks, least advanced first\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("host999"), std::string::npos) << "no row per node";
  EXPECT_LT(std::count(text.begin(), text.end(), '\n'), 45) << text;

  // A short terminal: the lists shrink, least advanced first still.
  const std::string short_text = RenderStatus(
      large, nullptr, {.channel = "", .width = 100, .max_table_rows = 14, .list_nodes = false});
  EXPECT_NE(short_text.find("    100   host100  r0    FETCHING (lagging)  0.0%\n"),
            std::string::npos)
      << short_text;
  EXPECT_NE(short_text.find("racks, least advanced first (1 more not shown)"), std::string::npos)
      << short_text;
  const std::string summary = short_text.substr(short_text.find("policy: 1001 nodes"));
  EXPECT_LE(std::count(summary.begin(), summary.end(), '\n'), 14) << summary;

  text = RenderStatus(large, nullptr, {.channel = "", .width = 100, .list_nodes = true});
  EXPECT_NE(text.find("1099 host1099"), std::string::npos);
  EXPECT_EQ(text.find("summarized"), std::string::npos);
}

TEST(RenderStatus, FailedAgentsComeFirstWithTheirErrors) {
  wire::FleetStatus now = Fleet(1000);
  for (uint64_t id = 1; id <= 6; ++id) AddNode(now, id, true, wire::PHASE_COMMITTED, 2, 2, 100);
  AddNode(now, 9, true, wire::PHASE_FAILED, 2, 1, 40)
      ->set_error(
          "disk full: no space left on device while staging model.safetensors, and "
          "this message goes on for longer than one line of the terminal");
  std::string text = RenderStatus(now, nullptr, {.channel = "", .width = 80, .max_table_rows = 3});
  ExpectFits(text, 80);
  const size_t header = text.find("NODE");
  const size_t failed = text.find("9 host9");
  ASSERT_NE(failed, std::string::npos) << text;
  // The failed row is the first one under the header, its error right under it (wrapped, not
  // cut), before the other nodes.
  EXPECT_EQ(text.find('\n', header) + 1, failed) << text;
  const size_t error = text.find("error: node 9 policy v2: disk full");
  ASSERT_NE(error, std::string::npos) << text;
  EXPECT_LT(failed, error);
  EXPECT_LT(error, text.find("1 host1"));
  EXPECT_NE(text.find("terminal"), std::string::npos) << text;
  EXPECT_NE(text.find("6 / 7 done"), std::string::npos);
}

TEST(RenderStatus, SaysWhatAStalledFetchAndAnEmptyChannelWaitFor) {
  wire::FleetStatus now = Fleet(1000);
  AddNode(now, 4, true, wire::PHASE_FETCHING, 2, 1, 40)
      ->set_waiting("no live node holds v2: no peer is connected");
  std::string text = RenderStatus(now, nullptr, {.channel = "", .width = 100});
  EXPECT_NE(text.find("waiting: node 4 policy: no live node holds v2"), std::string::npos) << text;
  EXPECT_EQ(text.find("0 agents follow"), std::string::npos) << text;

  wire::FleetStatus empty = Fleet(1000);
  text = RenderStatus(empty, nullptr, {.channel = "", .width = 100});
  EXPECT_NE(text.find("waiting: 0 agents follow channel policy"), std::string::npos) << text;
}

TEST(RenderStatus, ShortTablesKeepDeadAndUnfinishedNodes) {
  wire::FleetStatus now = Fleet(1000);
  for (uint64_t id = 1; id <= 10; ++id) AddNode(now, id, true, wire::PHASE_COMMITTED, 2, 2, 100);
  AddNode(now, 11, false, wire::PHASE_FETCHING, 2, 1, 1);
  AddNode(now, 12, true, wire::PHASE_FETCHING, 2, 1, 1);
  std::string text = RenderStatus(now, nullptr, {.channel = "", .width = 100, .max_table_rows = 3});
  EXPECT_NE(text.find("11 host11"), std::string::npos);
  EXPECT_NE(text.find("12 host12"), std::string::npos);
  EXPECT_NE(text.find("1 host1 "), std::string::npos);
  EXPECT_EQ(text.find("2 host2"), std::string::npos);
  EXPECT_NE(text.find("... 9 more rows"), std::string::npos);
}

TEST(RenderStatus, EmptyAndUnknownChannels) {
  wire::FleetStatus status;
  EXPECT_NE(RenderStatus(status, nullptr, {}).find("no channels yet"), std::string::npos);
  EXPECT_NE(RenderStatus(status, nullptr, {.channel = "x"}).find("channel x: not known"),
            std::string::npos);
  status.add_channels()->set_channel("fresh");
  EXPECT_NE(RenderStatus(status, nullptr, {}).find("fresh  no version published yet"),
            std::string::npos);
}

TEST(RenderSummaryLine, OneLinePerChannel) {
  wire::FleetStatus now = Fleet(1000);
  AddNode(now, 1, true, wire::PHASE_FETCHING, 2, 1, 50);
  AddNode(now, 2, false, wire::PHASE_FETCHING, 2, 1, 50);
  EXPECT_EQ(RenderSummaryLine(Summarize(now, nullptr)[0]),
            "policy v2 bytes 50.0% chunks 50/100 nodes 0/1 dead 1 - ETA -");
}

TEST(TerminalRedraw, ErasesThePreviousFrameAndCutsLongLines) {
  TerminalRedraw redraw(5);
  EXPECT_EQ(redraw.Next("abcdefgh\nxy\n"), "abcde\nxy\n");
  EXPECT_EQ(redraw.Next("1\n2\n3"), "\x1b[2F\x1b[J1\n2\n3\n");
  EXPECT_EQ(redraw.Next(""), "\x1b[3F\x1b[J");
  EXPECT_EQ(TruncateColumns("caf\xc3\xa9s", 4), "caf\xc3\xa9");
}

}  // namespace
}  // namespace weightcast::cli
