// Token-bucket rate limiter for the upload and download byte rates of a whole process: one
// instance is shared by every connection of a transport (Options::upload_limit/download_limit).
#pragma once

#include <cstdint>
#include <mutex>

#include "net/clock.h"

namespace weightcast::net {

// Thread-safe. Reserve never blocks: it takes the tokens at once, possibly into debt, and says
// how long the caller must wait before using them. Taking into debt (instead of waiting for
// tokens to accumulate) keeps large frames from starving and keeps the long-run rate exact:
// after any sequence of reservations the last one ends at (bytes - burst) / rate.
class TokenBucket {
 public:
  // `bytes_per_second` > 0. `burst_bytes` is how much may go out at once after idling.
  TokenBucket(uint64_t bytes_per_second, uint64_t burst_bytes, const Clock& clock = Clock::Real());

  Duration Reserve(uint64_t bytes);
  uint64_t bytes_per_second() const { return rate_; }

 private:
  const Clock& clock_;
  const uint64_t rate_;
  const double burst_;
  std::mutex mu_;
  double tokens_;  // may be negative: debt
  TimePoint last_;
};

}  // namespace weightcast::net
