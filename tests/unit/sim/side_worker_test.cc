#include "sim/side_worker.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace weightcast::sim {
namespace {

TEST(SideWorker, RunsEveryItemOnceInEveryJob) {
  SideWorker side(true);
  std::vector<std::atomic<int>> hits(64);
  for (int job = 0; job < 20000; ++job) {
    const size_t n = 1 + static_cast<size_t>(job % 64);
    side.ForEach(n, [&](size_t i) { hits[i].fetch_add(1, std::memory_order_relaxed); });
    for (size_t i = 0; i < hits.size(); ++i) {
      ASSERT_EQ(hits[i].exchange(0), i < n ? 1 : 0) << "job " << job << " item " << i;
    }
  }
}

TEST(SideWorker, TheWorkerTakesPart) {
  SideWorker side(true);
  // Items that take a while, so the worker (spinning or woken) claims some of them.
  for (int job = 0; job < 200 && side.worker_items() == 0; ++job) {
    side.ForEach(8, [](size_t) { std::this_thread::sleep_for(std::chrono::microseconds(200)); });
  }
  EXPECT_GT(side.worker_items(), 0u);
}

TEST(SideWorker, WakesFromSleepForTheNextJob) {
  SideWorker side(true);
  std::atomic<int> sum{0};
  for (int job = 0; job < 5; ++job) {
    // Long enough between jobs for the worker to go to sleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    side.ForEach(16, [&](size_t i) { sum.fetch_add(static_cast<int>(i)); });
  }
  EXPECT_EQ(sum.load(), 5 * (15 * 16 / 2));
}

TEST(SideWorker, DisabledRunsOnTheCaller) {
  SideWorker side(false);
  const std::thread::id caller = std::this_thread::get_id();
  int n = 0;
  side.ForEach(10, [&](size_t) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    ++n;
  });
  EXPECT_EQ(n, 10);
  EXPECT_EQ(side.worker_items(), 0u);
}

}  // namespace
}  // namespace weightcast::sim
