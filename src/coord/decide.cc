#include "coord/decide.h"

namespace weightcast::coord {

DecisionChange EachDecider::OnPublish(const ChannelState& /*channel*/,
                                      const wire::VersionEntry& entry) {
  return {.version = entry.version(), .decision = wire::DECISION_COMMIT, .abort_reason = {}};
}

std::vector<DecisionChange> EachDecider::Decide(const ChannelState& /*channel*/,
                                                std::span<const NodeProgress> /*nodes*/,
                                                net::TimePoint /*now*/) {
  return {};
}

}  // namespace weightcast::coord
