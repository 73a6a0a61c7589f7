#include "net/rate_limiter.h"

#include <algorithm>

namespace weightcast::net {

TokenBucket::TokenBucket(uint64_t bytes_per_second, uint64_t burst_bytes, const Clock& clock)
    : clock_(clock),
      rate_(std::max<uint64_t>(bytes_per_second, 1)),
      burst_(static_cast<double>(burst_bytes)),
      tokens_(static_cast<double>(burst_bytes)),
      last_(clock.Now()) {}

Duration TokenBucket::Reserve(uint64_t bytes) {
  std::lock_guard lock(mu_);
  TimePoint now = clock_.Now();
  if (now > last_) {
    double elapsed = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min(burst_, tokens_ + elapsed * static_cast<double>(rate_));
    last_ = now;
  }
  tokens_ -= static_cast<double>(bytes);
  if (tokens_ >= 0) return Duration(0);
  return std::chrono::duration_cast<Duration>(
      std::chrono::duration<double>(-tokens_ / static_cast<double>(rate_)));
}

}  // namespace weightcast::net
