// The small fleet the simulator's unit tests start from: 12 receivers of 1 GiB in 16 MiB
// chunks at degree 4, fast enough for a unit test, large enough to pipeline.
#pragma once

#include "sim/fleet.h"

namespace weightcast::sim::testing {

inline FleetConfig Small() {
  FleetConfig c;
  c.receivers = 12;
  c.chunk_bytes = 16 << 20;
  c.total_bytes = 64ull * c.chunk_bytes;  // 1 GiB
  c.tuning.degree = 4;
  c.tuning.source_degree = 6;
  return c;
}

}  // namespace weightcast::sim::testing
