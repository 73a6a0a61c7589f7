// A second thread for the simulator's one parallel step: the HAVE fan-out.
//
// When a node announces a chunk, each of its neighbours' protocols takes the HAVE on its own
// state alone (swarm::PeerProtocol shares nothing between instances), so the calls can run side
// by side; the fleet then carries out their effects one neighbour after the other, in the order
// one thread would have, so a run is the same event for event with or without the worker
// (tests/unit/sim/side_worker_test.cc, tests/unit/sim/fleet_test.cc).
//
// Items are claimed one at a time from a shared counter, by the caller and the worker alike: a
// worker that is late (descheduled, asleep) only means the caller does more of the items itself,
// never that it waits for the worker to wake. Between jobs the worker spins briefly (jobs come
// every few microseconds during a run), then sleeps until the next one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>

namespace weightcast::sim {

class SideWorker {
 public:
  // With `enabled` false no thread is started and ForEach runs everything on the caller.
  explicit SideWorker(bool enabled);
  ~SideWorker();
  SideWorker(const SideWorker&) = delete;
  SideWorker& operator=(const SideWorker&) = delete;

  // Calls fn(i) for every i in [0, n), each once, on this thread and the worker; returns when
  // every call has returned. fn must be safe to run for two different i at once.
  template <typename Fn>
  void ForEach(size_t n, Fn&& fn) {
    if (!worker_.joinable() || n < 2 || n > kMaxItems) {
      for (size_t i = 0; i < n; ++i) fn(i);
      return;
    }
    Run(n, &fn, [](void* f, size_t i) { (*static_cast<Fn*>(f))(i); });
  }

  // How many calls the worker made (for tests: that it took part).
  uint64_t worker_items() const { return worker_items_.load(std::memory_order_relaxed); }

 private:
  using Call = void (*)(void*, size_t);
  // The claim word: generation (32 bits), item count (16), next item (16). One atomic, so a
  // claim names its job: a worker still looking at an old job cannot take an item of a new one.
  static constexpr size_t kMaxItems = 0xffff;
  static uint64_t Pack(uint32_t gen, size_t n, size_t next) {
    return uint64_t{gen} << 32 | uint64_t(n) << 16 | uint64_t(next);
  }
  static uint32_t Gen(uint64_t w) { return static_cast<uint32_t>(w >> 32); }
  static size_t Count(uint64_t w) { return (w >> 16) & 0xffff; }
  static size_t Next(uint64_t w) { return w & 0xffff; }

  void Run(size_t n, void* ctx, Call call);
  // Claims and runs items of job `gen` until none is left; returns how many it ran.
  size_t Help(uint32_t gen);
  void WorkerLoop();

  void* ctx_ = nullptr;  // the current job; written before its claim word is published
  Call call_ = nullptr;
  uint32_t gen_ = 0;  // the caller's
  std::atomic<uint64_t> claim_{0};
  std::atomic<size_t> done_{0};
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> worker_items_{0};
  std::thread worker_;
};

}  // namespace weightcast::sim
