// Time as a node, a publisher, a coordinator and the transports see it: what they decide by time
// (ticks, deadlines, backoff, timeouts) reads this clock and waits on it. Real code uses the
// steady clock; tests use FakeClock, which only moves when told to and then wakes whoever waits on
// it and runs its listeners (keepalive checks of the in-memory transport), so that timeouts are
// tested without sleeping. Stopwatches that only report how long work took (phase traces, log
// lines) read the steady clock: a fake clock would report zero.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <utility>

namespace weightcast::net {

using Duration = std::chrono::nanoseconds;
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

class Clock {
 public:
  virtual ~Clock() = default;
  // Safe to call from any thread.
  virtual TimePoint Now() const = 0;
  // Waits on `cv` (with `lock` held, as condition_variable::wait_until) until `ready()` holds or
  // this clock reaches `deadline`; returns ready(). Whoever makes `ready()` true notifies `cv`
  // under `lock`'s mutex, as with any condition variable.
  virtual bool WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                         TimePoint deadline, const std::function<bool()>& ready) const = 0;
  // The process-wide steady clock.
  static const Clock& Real();
};

// Safe to call from any thread. Listeners run on the thread that calls Advance, after the time
// moved, without the clock's lock held (so they may call Now or remove themselves).
class FakeClock : public Clock {
 public:
  TimePoint Now() const override;
  // Wakes when `ready()` may have changed (cv notified) and whenever the time moves.
  bool WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                 TimePoint deadline, const std::function<bool()>& ready) const override;
  // Moves time forward and runs every listener once.
  void Advance(Duration by);
  // Moves time forward in `step`s up to `by`, running listeners after each step.
  void AdvanceInSteps(Duration by, Duration step);

  using ListenerId = uint64_t;
  ListenerId AddListener(std::function<void(TimePoint)> fn);
  void RemoveListener(ListenerId id);

 private:
  // Read without a lock: a waiter reads it with its own mutex held, and Advance takes that mutex
  // to wake it, so a lock here would order the two both ways.
  std::atomic<TimePoint::rep> now_{
      std::chrono::duration_cast<Duration>(std::chrono::seconds(1)).count()};
  mutable std::mutex mu_;  // listeners
  ListenerId next_id_ = 1;
  std::map<ListenerId, std::function<void(TimePoint)>> listeners_;
  // Whoever waits in WaitUntil: Advance takes each one's mutex and notifies its condition
  // variable, so a waiter between its check of the time and its wait cannot miss the move.
  mutable std::mutex waiters_mu_;
  mutable std::multiset<std::pair<std::mutex*, std::condition_variable*>> waiters_;
};

}  // namespace weightcast::net
