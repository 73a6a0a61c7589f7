// How the coordinator names a channel's writer in errors and logs (coordinator.cc), shared with
// the sharded-publish half of the coordinator (coordinator_parts.cc).
#pragma once

#include <cstdint>
#include <string>

#include "coord/coord.pb.h"
#include "net/clock.h"

namespace weightcast::coord {

// "writer W (node N at ADDR, host H), epoch E since T (S s ago)"; a sharded writer says how many
// ranks it has.
std::string DescribeWriter(const wire::ChannelWriter& w, uint64_t now_unix_ms);
// "3 s", "250 ms".
std::string FormatSeconds(net::Duration d);

}  // namespace weightcast::coord
