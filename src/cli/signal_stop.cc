#include "cli/signal_stop.h"

#include <pthread.h>

#include <ctime>
#include <utility>

namespace weightcast::cli {

SignalStopper::SignalStopper() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, &old_);
  thread_ = std::thread([this] { Loop(); });
}

SignalStopper::~SignalStopper() {
  done_ = true;
  thread_.join();
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

void SignalStopper::OnSignal(std::function<void()> stop) {
  std::lock_guard lock(mu_);
  stop_ = std::move(stop);
  if (signal_ != 0 && stop_) stop_();
}

void SignalStopper::Loop() {
  while (!done_) {
    // Wakes up now and then to notice done_: the destructor must not need a signal to return.
    timespec wait{0, 100'000'000};
    const int sig = sigtimedwait(&set_, nullptr, &wait);
    if (sig <= 0) continue;
    signal_ = sig;
    std::lock_guard lock(mu_);
    if (stop_) stop_();
  }
}

}  // namespace weightcast::cli
