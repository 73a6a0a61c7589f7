// The phases of `weightcast demo`, kept apart from flag parsing so they read top to bottom.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>

#include <weightcast/status.h>

namespace weightcast::cli {

struct DemoConfig {
  std::filesystem::path work_dir;
  std::filesystem::path exe;  // the weightcast binary the processes run (/proc/self/exe)
  uint64_t model_bytes = 1ull << 30;
  std::string chunk_size = "auto";  // as `weightcast publish --chunk-size` takes it
  uint64_t steps = 3;
  uint32_t agents = 4;
  double lr = 0;  // 0: the synth default
  uint64_t seed = 1;
  bool keep = false;
  bool live_view = false;  // redraw progress in place (a terminal); else a line now and then
  int width = 100;         // columns of the terminal
};

// Runs the demo: a coordinator, a publisher and `agents` agents as real processes of `exe` on
// loopback; a synthetic model as version 1 and `steps` RL-like steps as delta versions, each
// published and distributed while progress is drawn to `out`; then a table per version and a
// byte-for-byte comparison of every agent's files with the publisher's. Every process it started
// is stopped on return, whatever the outcome. Fails on the first error (with the tail of the
// logs of the processes), or if any file differs by a single byte.
// `stop` (may be null) is polled: once it reads true the demo stops early with kAborted.
Status RunDemo(const DemoConfig& config, std::ostream& out, const std::atomic<bool>* stop);

}  // namespace weightcast::cli
