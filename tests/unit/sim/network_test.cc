#include "sim/network.h"

#include <gtest/gtest.h>

#include <optional>
#include <utility>
#include <vector>

namespace weightcast::sim {
namespace {

// Runs the network until no flow is left; returns when the last one finished.
double Drain(Network& net) {
  double t = 0;
  while (net.active_flows() > 0) {
    t = net.NextEvent();
    (void)net.Step();
  }
  return t;
}

std::vector<NodeLink> Nodes(size_t n, double cap, bool shared = false) {
  return std::vector<NodeLink>(n, NodeLink{cap, cap, shared, -1});
}

TEST(Network, OneFlowRunsAtLineRate) {
  Network net(Nodes(2, 100), {});
  net.Start(0, 0, 1, 1000, 7);
  EXPECT_DOUBLE_EQ(net.NextFinish(), 10);
  EXPECT_NEAR(Drain(net), 10, 1e-9);
  EXPECT_DOUBLE_EQ(net.delivered_bytes(), 1000);
}

TEST(Network, FlowsFromOneSenderShareItsUpload) {
  Network net(Nodes(3, 100), {});
  net.Start(0, 0, 1, 1000, 1);
  net.Start(0, 0, 2, 1000, 2);
  net.Rebalance(0);
  EXPECT_NEAR(Drain(net), 20, 1e-9);
}

TEST(Network, MaxMinGivesSpareCapacityToTheUnconstrainedFlow) {
  // 0 sends to 1 and 2; node 1 also receives from 3 at the same time. Node 1's download (100)
  // is split 50/50 between 0 and 3, so 0's flow to 2 takes the remaining 50 of 0's upload.
  Network net(Nodes(4, 100), {});
  const FlowId a = net.Start(0, 0, 1, 1e6, 1);
  const FlowId b = net.Start(0, 0, 2, 1e6, 2);
  const FlowId c = net.Start(0, 3, 1, 1e6, 3);
  net.Rebalance(0);
  EXPECT_NEAR(net.rate(a), 50, 1e-9);
  EXPECT_NEAR(net.rate(b), 50, 1e-9);
  EXPECT_NEAR(net.rate(c), 50, 1e-9);
}

TEST(Network, ProgressiveFillingOverSeveralLevels) {
  // Node 1's download (three flows) fills first at 100/3; then node 0's and node 5's uploads
  // have 200/3 left for one flow each, but node 2's download splits 100 between those two.
  Network net(Nodes(6, 100), {});
  const FlowId a = net.Start(0, 0, 1, 1e6, 1);
  const FlowId b = net.Start(0, 0, 2, 1e6, 2);
  const FlowId c = net.Start(0, 4, 1, 1e6, 3);
  const FlowId d = net.Start(0, 5, 1, 1e6, 4);
  const FlowId e = net.Start(0, 5, 2, 1e6, 5);
  net.Rebalance(0);
  for (FlowId f : {a, c, d}) EXPECT_NEAR(net.rate(f), 100.0 / 3, 1e-9);
  for (FlowId f : {b, e}) EXPECT_NEAR(net.rate(f), 50, 1e-9);
}

TEST(Network, FlowsFinishInOrderAsTheirRatesChange) {
  // Three flows share node 0's upload; each finish gives the others a larger share.
  Network net(Nodes(4, 100), {}, /*rebalance_interval=*/0);
  const FlowId f1 = net.Start(0, 0, 1, 100, 1);
  const FlowId f2 = net.Start(0, 0, 2, 200, 2);
  const FlowId f3 = net.Start(0, 0, 3, 300, 3);
  std::vector<std::pair<FlowId, double>> done;
  while (net.active_flows() > 0) {
    const double t = net.NextEvent();
    if (const std::optional<FlowId> f = net.Step()) done.emplace_back(*f, t);
  }
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].first, f1);
  EXPECT_NEAR(done[0].second, 3, 1e-9);  // 100 at 100/3
  EXPECT_EQ(done[1].first, f2);
  EXPECT_NEAR(done[1].second, 5, 1e-9);  // 100 left at 50
  EXPECT_EQ(done[2].first, f3);
  EXPECT_NEAR(done[2].second, 6, 1e-9);  // 100 left at 100
}

TEST(Network, SharedCapacityCarriesBothDirections) {
  Network net(Nodes(3, 100, /*shared=*/true), {});
  const FlowId in = net.Start(0, 0, 1, 1e6, 1);
  const FlowId out = net.Start(0, 1, 2, 1e6, 2);
  net.Rebalance(0);
  EXPECT_NEAR(net.rate(in) + net.rate(out), 100, 1e-9);
}

TEST(Network, RackUplinkLimitsCrossRackFlows) {
  std::vector<NodeLink> nodes = Nodes(4, 100);
  nodes[0].rack = nodes[1].rack = 0;
  nodes[2].rack = nodes[3].rack = 1;
  Network net(nodes, {RackLink{60, 60}, RackLink{60, 60}});
  const FlowId x = net.Start(0, 0, 2, 1e6, 1);
  const FlowId y = net.Start(0, 1, 3, 1e6, 2);
  const FlowId z = net.Start(0, 1, 0, 1e6, 3);  // stays inside rack 0
  net.Rebalance(0);
  EXPECT_NEAR(net.rate(x) + net.rate(y), 60, 1e-9);
  EXPECT_NEAR(net.rate(z), 70, 1e-9);  // node 1's upload minus its 30 cross-rack share
}

TEST(Network, NewFlowsNeverOvercommitBeforeARebalance) {
  Network net(Nodes(3, 100), {});
  const FlowId a = net.Start(0, 0, 1, 1e6, 1);
  const FlowId b = net.Start(0, 0, 2, 1e6, 2);
  EXPECT_LE(net.rate(a) + net.rate(b), 100 + 1e-9);
}

TEST(Network, StopReportsBytesMoved) {
  Network net(Nodes(2, 100), {});
  const FlowId a = net.Start(0, 0, 1, 1000, 1);
  EXPECT_NEAR(net.Stop(4, a), 400, 1e-9);
  EXPECT_EQ(net.active_flows(), 0u);
  EXPECT_NEAR(net.aborted_bytes(), 400, 1e-9);
}

}  // namespace
}  // namespace weightcast::sim
