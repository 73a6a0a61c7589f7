#include "cli/status_view.h"

#include <gtest/gtest.h>

#include <cmath>
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
  AddNode(now, 1, true, wire::PHASE_FETCHING, 2, 1, 50)->set_delta(true);
  AddNode(now, 2, true, wire::PHASE_COMMITTED, 2, 2, 100);
  wire::ChannelProgress* bad = AddNode(now, 3, false, wire::PHASE_FAILED, 2, 1, 10);
  bad->set_error("hash mismatch\x1b[2J");

  std::string text = RenderStatus(now, &before, {.channel = "", .width = 80});
  // Bars are 20 wide at 80 columns: 150 of 200 MiB -> 15 of 20.
  EXPECT_NE(text.find("  bytes  [###############.....]  75.0%  150.00 MiB / 200.00 MiB\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  chunks [###############.....]  75.0%  150 / 200\n"), std::string::npos);
  EXPECT_NE(text.find("  nodes  [##########..........]  50.0%  1 / 2 done (1 committed, 0 "
                      "prepared), 1 dead\n"),
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
  EXPECT_NE(text.find("FETCHING/delta"), std::string::npos);
  EXPECT_NE(text.find("12s ago"), std::string::npos);
  EXPECT_NE(text.find("error: node 3 policy v2: hash mismatch\\x1b[2J\n"), std::string::npos);
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  // Rows sorted by node id.
  EXPECT_LT(text.find("1 host1"), text.find("2 host2"));
  EXPECT_LT(text.find("2 host2"), text.find("3 host3"));
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
