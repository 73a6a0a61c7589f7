#include "net/clock.h"

#include <vector>

namespace weightcast::net {
namespace {

class SteadyClock : public Clock {
 public:
  TimePoint Now() const override {
    return std::chrono::time_point_cast<Duration>(std::chrono::steady_clock::now());
  }
  bool WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                 TimePoint deadline, const std::function<bool()>& ready) const override {
    return cv.wait_until(lock, deadline, ready);
  }
};

}  // namespace

const Clock& Clock::Real() {
  static const SteadyClock clock;
  return clock;
}

TimePoint FakeClock::Now() const { return TimePoint(Duration(now_.load())); }

bool FakeClock::WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                          TimePoint deadline, const std::function<bool()>& ready) const {
  const std::pair<std::mutex*, std::condition_variable*> me(lock.mutex(), &cv);
  // Registered without `lock` held: Advance holds waiters_mu_ while it takes a waiter's mutex.
  lock.unlock();
  {
    std::lock_guard w(waiters_mu_);
    waiters_.insert(me);
  }
  lock.lock();
  while (!ready() && Now() < deadline) cv.wait(lock);
  const bool is_ready = ready();
  lock.unlock();
  {
    std::lock_guard w(waiters_mu_);
    waiters_.erase(waiters_.find(me));  // one entry: two threads may wait on the same pair
  }
  lock.lock();
  return is_ready || ready();
}

void FakeClock::Advance(Duration by) {
  const TimePoint now = TimePoint(Duration(now_.fetch_add(by.count()) + by.count()));
  {
    std::lock_guard w(waiters_mu_);
    for (const auto& [mu, cv] : waiters_) {
      std::lock_guard lock(*mu);
      cv->notify_all();
    }
  }
  std::vector<std::function<void(TimePoint)>> listeners;
  {
    std::lock_guard lock(mu_);
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
