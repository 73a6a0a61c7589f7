#include "sim/side_worker.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace weightcast::sim {
namespace {

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins of the idle worker before it sleeps: some tens of microseconds, longer than the usual
// gap between two HAVE events of a run, far shorter than a wake-up from sleep on a VM.
constexpr int kIdleSpins = 2000;

}  // namespace

SideWorker::SideWorker(bool enabled) {
  if (enabled) worker_ = std::thread([this] { WorkerLoop(); });
}

SideWorker::~SideWorker() {
  if (!worker_.joinable()) return;
  stop_.store(true);
  // A new generation with no items wakes the worker, which then sees stop_.
  claim_.store(Pack(++gen_, 0, 0));
  claim_.notify_one();
  worker_.join();
}

void SideWorker::Run(size_t n, void* ctx, Call call) {
  ctx_ = ctx;
  call_ = call;
  done_.store(0, std::memory_order_relaxed);
  // seq_cst, with the load of sleeping_ after it, pairs with the worker's store of sleeping_
  // and its load of claim_: either it sees this job before sleeping, or we see it asleep.
  claim_.store(Pack(++gen_, n, 0));
  if (sleeping_.load()) claim_.notify_one();
  Help(gen_);
  while (done_.load(std::memory_order_acquire) != n) CpuRelax();
}

size_t SideWorker::Help(uint32_t gen) {
  size_t ran = 0;
  uint64_t w = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (Gen(w) != gen || Next(w) >= Count(w)) return ran;
    if (!claim_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;  // w holds the current word
    }
    // The item is ours and its job cannot end before we report it done, so ctx_ and call_
    // still describe it.
    call_(ctx_, Next(w));
    ++ran;
    done_.fetch_add(1, std::memory_order_release);
    w = claim_.load(std::memory_order_acquire);
  }
}

void SideWorker::WorkerLoop() {
  uint32_t seen = 0;
  int idle = 0;
  for (;;) {
    const uint64_t w = claim_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_relaxed)) return;
    if (Gen(w) != seen) {
      seen = Gen(w);
      idle = 0;
      if (const size_t ran = Help(seen)) worker_items_.fetch_add(ran, std::memory_order_relaxed);
      continue;
    }
    if (++idle < kIdleSpins) {
      CpuRelax();
      continue;
    }
    sleeping_.store(true);
    if (Gen(claim_.load()) == seen && !stop_.load()) claim_.wait(w);
    sleeping_.store(false);
    idle = 0;
  }
}

}  // namespace weightcast::sim
