// The rollout seam: who decides whether a published version is committed or aborted. The
// coordinator asks a Decider when a version is published and again whenever the fleet's
// progress may have changed; the decisions it returns are logged durably, then served in every
// heartbeat reply (ChannelTarget.decision). The two-phase rollout (rollout/,
// coord/rollout_decider.h) plugs in here; EachDecider, the default, commits every version as it
// is published.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <weightcast/types.h>

#include "coord/coord.pb.h"
#include "coord/version_log.h"
#include "net/clock.h"

namespace weightcast::coord {

// One live node following the channel, as the Decider sees it.
struct NodeProgress {
  PeerId node;
  bool source = false;                    // a publisher
  const wire::ChannelProgress* progress;  // its last report for the channel; null: none yet
};

struct DecisionChange {
  uint64_t version = 0;
  wire::Decision decision = wire::DECISION_NONE;
  std::string abort_reason;
};

// Called with the coordinator's lock held, from one thread at a time: must not block.
class Decider {
 public:
  virtual ~Decider() = default;
  // The decision recorded with `entry` as it is published (the channel does not hold it yet).
  virtual DecisionChange OnPublish(const ChannelState& channel,
                                   const wire::VersionEntry& entry) = 0;
  // Decisions to change now, in order, given the live followers' progress. Called after
  // heartbeats that change a phase, after membership changes, and on every sweep.
  virtual std::vector<DecisionChange> Decide(const ChannelState& channel,
                                             std::span<const NodeProgress> nodes,
                                             net::TimePoint now) = 0;
};

// The "each" policy: every version is committed as it is published; nothing changes later.
class EachDecider final : public Decider {
 public:
  DecisionChange OnPublish(const ChannelState& channel, const wire::VersionEntry& entry) override;
  std::vector<DecisionChange> Decide(const ChannelState& channel,
                                     std::span<const NodeProgress> nodes,
                                     net::TimePoint now) override;
};

}  // namespace weightcast::coord
