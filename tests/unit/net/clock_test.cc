#include "net/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace weightcast::net {
namespace {

using namespace std::chrono_literals;

// A waiter on a fake clock wakes when the time passes its deadline, and only then: the test
// moves the time in steps and sees the wait end at the step that reaches it.
TEST(FakeClock, AWaitEndsWhenTheTimeReachesItsDeadline) {
  FakeClock clock;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> ended{false};
  const TimePoint deadline = clock.Now() + 10s;
  std::thread waiter([&] {
    std::unique_lock lock(mu);
    EXPECT_FALSE(clock.WaitUntil(lock, cv, deadline, [] { return false; }));
    EXPECT_GE(clock.Now(), deadline);
    ended = true;
  });
  for (int i = 0; i < 9; ++i) {
    clock.Advance(1s);
    EXPECT_FALSE(ended.load()) << "woke at +" << i + 1 << " s, before its deadline";
  }
  clock.Advance(1s);
  waiter.join();
  EXPECT_TRUE(ended.load());
}

// What the waiter waits for, notified under its mutex, ends the wait at once with the time
// standing still.
TEST(FakeClock, AWaitEndsWhenItsConditionHoldsWithTheTimeStill) {
  FakeClock clock;
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  std::thread waiter([&] {
    std::unique_lock lock(mu);
    EXPECT_TRUE(clock.WaitUntil(lock, cv, clock.Now() + 1h, [&] { return ready; }));
  });
  {
    std::lock_guard lock(mu);
    ready = true;
  }
  cv.notify_all();
  waiter.join();
}

// Two threads waiting on the same mutex and condition variable are both woken by the time.
TEST(FakeClock, TwoWaitersOnOneConditionVariableBothWake) {
  FakeClock clock;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> ended{0};
  const TimePoint first = clock.Now() + 1s, second = clock.Now() + 2s;
  std::thread a([&] {
    std::unique_lock lock(mu);
    clock.WaitUntil(lock, cv, first, [] { return false; });
    ++ended;
  });
  std::thread b([&] {
    std::unique_lock lock(mu);
    clock.WaitUntil(lock, cv, second, [] { return false; });
    ++ended;
  });
  // Let both register (one Advance of nothing while they may not yet be waiting is harmless:
  // each checks the time under the mutex before it waits).
  clock.Advance(1s);
  clock.Advance(1s);
  a.join();
  b.join();
  EXPECT_EQ(ended.load(), 2);
}

TEST(RealClock, AWaitEndsAtItsDeadline) {
  const Clock& clock = Clock::Real();
  std::mutex mu;
  std::condition_variable cv;
  std::unique_lock lock(mu);
  const TimePoint deadline = clock.Now() + 20ms;
  EXPECT_FALSE(clock.WaitUntil(lock, cv, deadline, [] { return false; }));
  EXPECT_GE(clock.Now(), deadline);
}

}  // namespace
}  // namespace weightcast::net
