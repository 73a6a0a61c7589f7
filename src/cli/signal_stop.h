// SIGINT and SIGTERM as a request to stop, handled in a normal thread instead of a signal
// handler: the signals are blocked in the calling thread (and so in every thread it starts
// afterwards, which inherit the mask) and taken by one thread with sigtimedwait, which then runs
// the stop callback. Create it before starting other threads. Child processes started with
// fork/exec must unblock the signals themselves (the mask survives exec).
#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

namespace weightcast::cli {

class SignalStopper {
 public:
  SignalStopper();
  // Joins the signal thread and restores the previous mask.
  ~SignalStopper();
  SignalStopper(const SignalStopper&) = delete;
  SignalStopper& operator=(const SignalStopper&) = delete;

  // Runs `stop` (on the signal thread) when SIGINT or SIGTERM arrives, at once if one already
  // did. An empty function clears it; once this returns, the previous callback is not running
  // and will not run.
  void OnSignal(std::function<void()> stop);
  bool signalled() const { return signal_ != 0; }
  int signal() const { return signal_; }  // the last one taken; 0: none

 private:
  void Loop();

  sigset_t set_{};
  sigset_t old_{};
  std::atomic<bool> done_{false};
  std::atomic<int> signal_{0};
  std::mutex mu_;
  std::function<void()> stop_;
  std::thread thread_;
};

}  // namespace weightcast::cli
