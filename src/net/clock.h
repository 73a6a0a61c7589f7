// Time as the transports see it. Real code uses the steady clock; tests use FakeClock, which
// only moves when told to and then runs its listeners (keepalive checks of the in-memory
// transport), so that timeouts are tested without sleeping.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace weightcast::net {

using Duration = std::chrono::nanoseconds;
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

class Clock {
 public:
  virtual ~Clock() = default;
  // Safe to call from any thread.
  virtual TimePoint Now() const = 0;
  // The process-wide steady clock.
  static const Clock& Real();
};

// Safe to call from any thread. Listeners run on the thread that calls Advance, after the time
// moved, without the clock's lock held (so they may call Now or remove themselves).
class FakeClock : public Clock {
 public:
  TimePoint Now() const override;
  // Moves time forward and runs every listener once.
  void Advance(Duration by);
  // Moves time forward in `step`s up to `by`, running listeners after each step.
  void AdvanceInSteps(Duration by, Duration step);

  using ListenerId = uint64_t;
  ListenerId AddListener(std::function<void(TimePoint)> fn);
  void RemoveListener(ListenerId id);

 private:
  mutable std::mutex mu_;
  TimePoint now_{std::chrono::seconds(1)};
  ListenerId next_id_ = 1;
  std::map<ListenerId, std::function<void(TimePoint)>> listeners_;
};

}  // namespace weightcast::net
