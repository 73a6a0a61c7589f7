// The phases of `weightcast demo`, kept apart from flag parsing so they read top to bottom.
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>

#include <weightcast/status.h>

namespace weightcast::cli {

struct DemoConfig {
  std::filesystem::path work_dir;
  uint64_t model_bytes = 256ull << 20;
  uint64_t steps = 3;
  double lr = 0;  // 0: the synth default
  uint64_t seed = 1;
  bool keep = false;
};

// Runs the demo, printing each phase and a final table to `out`. Fails on the first error, and
// fails if any version the receiver committed differs from the trainer's by a single byte.
Status RunDemo(const DemoConfig& config, std::ostream& out);

}  // namespace weightcast::cli
