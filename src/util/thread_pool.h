// A fixed pool of worker threads. ParallelFor is the one way layers use it: split a range of
// independent work items over the workers and wait for all of them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace weightcast {

class ThreadPool {
 public:
  // threads == 0 means one per hardware thread.
  explicit ThreadPool(size_t threads = 0);
  ~ThreadPool();  // Finishes queued work, then joins.
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size(); }

  // Queues `task`. Safe to call from any thread, including from inside a task.
  void Submit(std::function<void()> task);

  // Runs fn(i) for i in [0, n) on the pool and blocks until all calls returned. Items are handed
  // out one at a time, in increasing order, so early items finish first (good for streaming).
  // Must not be called from inside a pool task (it would wait on itself).
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

 private:
  void WorkerLoop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::queue<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace weightcast
