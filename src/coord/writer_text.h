// How the coordinator names nodes and a channel's writer in errors and logs (coordinator.cc),
// shared with its other parts (coordinator_parts.cc, coordinator_membership.cc).
#pragma once

#include <cstdint>
#include <string>

#include <weightcast/types.h>

#include "coord/coord.pb.h"
#include "net/clock.h"

namespace weightcast::coord {

// "writer W (node N at ADDR, host H), epoch E since T (S s ago)"; a sharded writer says how many
// ranks it has.
std::string DescribeWriter(const wire::ChannelWriter& w, uint64_t now_unix_ms);
// "node N".
inline std::string NodeName(PeerId id) { return "node " + std::to_string(id.value()); }
// "3 s", "250 ms".
std::string FormatSeconds(net::Duration d);

}  // namespace weightcast::coord
