#include "net/admission.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace weightcast::net {
namespace {

using std::chrono::milliseconds;

Options Small() {
  Options o;
  o.max_pending_handshakes = 4;
  o.max_silent_handshakes_per_source = 2;
  o.silent_grace = milliseconds(250);
  return o;
}

TEST(Admission, RoomLeftDisplacesNothing) {
  std::vector<HandshakeSlot> pending = {{"10.0.0.1", true, milliseconds(900)}};
  EXPECT_FALSE(PickDisplaced(pending, "10.0.0.2", Small()).has_value());
}

TEST(Admission, AFloodFromOneAddressDisplacesItsOwnOldestSilentOne) {
  std::vector<HandshakeSlot> pending = {{"10.0.0.9", false, milliseconds(900)},
                                        {"10.0.0.1", true, milliseconds(800)},
                                        {"10.0.0.1", true, milliseconds(700)}};
  auto d = PickDisplaced(pending, "10.0.0.1", Small());
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->index, 1u);
  EXPECT_NE(d->why.message().find("too many silent connections from 10.0.0.1"), std::string::npos);
}

TEST(Admission, PeersThatSpokeAndYoungConnectionsAreSpared) {
  // Two of the address spoke (their Hello waits): not silent, so no per-source displacement.
  std::vector<HandshakeSlot> spoke = {{"10.0.0.1", false, milliseconds(800)},
                                      {"10.0.0.1", false, milliseconds(700)}};
  EXPECT_FALSE(PickDisplaced(spoke, "10.0.0.1", Small()).has_value());
  // Silent but younger than the grace: the per-source rule does not act.
  std::vector<HandshakeSlot> young = {{"10.0.0.1", true, milliseconds(10)},
                                      {"10.0.0.1", true, milliseconds(5)}};
  EXPECT_FALSE(PickDisplaced(young, "10.0.0.1", Small()).has_value());
}

TEST(Admission, AFullListenerDisplacesTheOldestSilentOneOfAnyAddress) {
  std::vector<HandshakeSlot> pending = {{"10.0.0.1", false, milliseconds(900)},
                                        {"10.0.0.2", true, milliseconds(10)},
                                        {"10.0.0.3", true, milliseconds(5)},
                                        {"10.0.0.4", false, milliseconds(1)}};
  auto d = PickDisplaced(pending, "10.0.0.5", Small());
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->index, 1u);
  // None silent: the oldest pending one goes.
  for (auto& p : pending) p.silent = false;
  d = PickDisplaced(pending, "10.0.0.5", Small());
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->index, 0u);
}

}  // namespace
}  // namespace weightcast::net
