// What status_summary.cc and status_view.cc share: helpers over the coordinator's wire types.
// Private to cli/.
#pragma once

#include <cstdint>
#include <string_view>

#include "cli/status_view.h"

namespace weightcast::cli::status_parts {

// done / total, clamped to [0, 1]; 0 when total is 0.
double Fraction(uint64_t done, uint64_t total);
std::string_view PhaseName(coord::wire::Phase phase);
// The entry of `version` in `log`, or null.
const coord::wire::VersionEntry* FindEntry(const coord::wire::ChannelLog& log, uint64_t version);
// `p` (of a node) has `target` current. Below the newest version (after a rollback) only that
// version counts, not a later one the node has not switched away from yet.
bool HasCurrent(const coord::wire::ChannelProgress& p, uint64_t target, uint64_t newest);
// The large-fleet summary of one channel (SummarizeFleet's, for a summary already made).
FleetSummary SummarizeFleetChannel(const coord::wire::FleetStatus& now,
                                   const ChannelSummary& channel);

}  // namespace weightcast::cli::status_parts
