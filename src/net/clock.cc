#include "net/clock.h"

#include <vector>

namespace weightcast::net {
namespace {

class SteadyClock : public Clock {
 public:
  TimePoint Now() const override {
    return std::chrono::time_point_cast<Duration>(std::chrono::steady_clock::now());
  }
};

}  // namespace

const Clock& Clock::Real() {
  static const SteadyClock clock;
  return clock;
}

TimePoint FakeClock::Now() const {
  std::lock_guard lock(mu_);
  return now_;
}

void FakeClock::Advance(Duration by) {
  TimePoint now;
  std::vector<std::function<void(TimePoint)>> listeners;
  {
    std::lock_guard lock(mu_);
    now_ += by;
    now = now_;
    for (const auto& [id, fn] : listeners_) listeners.push_back(fn);
  }
  for (const auto& fn : listeners) fn(now);
}

void FakeClock::AdvanceInSteps(Duration by, Duration step) {
  for (Duration done{0}; done < by; done += step) Advance(std::min(step, by - done));
}

FakeClock::ListenerId FakeClock::AddListener(std::function<void(TimePoint)> fn) {
  std::lock_guard lock(mu_);
  ListenerId id = next_id_++;
  listeners_.emplace(id, std::move(fn));
  return id;
}

void FakeClock::RemoveListener(ListenerId id) {
  std::lock_guard lock(mu_);
  listeners_.erase(id);
}

}  // namespace weightcast::net
