// How long work took, for phase traces, reports and log lines. Decisions by time (deadlines,
// backoff, ticks, timeouts) read an injected net::Clock instead, so tests can move them; a
// stopwatch reads the steady clock because it reports real work, which a fake clock would show
// as taking no time.
#pragma once

#include <chrono>

namespace weightcast {

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  // Seconds since construction or the last Restart.
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void Restart() { start_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace weightcast
