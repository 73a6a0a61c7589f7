// Reading the coordinator's log of a channel, as the publisher's parts use it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "coord/coord.pb.h"

namespace weightcast::publish {

// The newest version the log holds (0: none).
inline uint64_t NewestLogged(const coord::wire::ChannelLog& log) {
  uint64_t newest = 0;
  for (const coord::wire::VersionEntry& e : log.versions()) newest = std::max(newest, e.version());
  return newest;
}

}  // namespace weightcast::publish
