#include "publish/idle_write.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

#include "util/file.h"

namespace weightcast::publish {

IdleWrite::IdleWrite(std::span<const uint8_t> bytes, uint64_t piece_bytes)
    : bytes_(bytes),
      piece_bytes_(std::max<uint64_t>(piece_bytes, 1)),
      pieces_((bytes.size() + piece_bytes_ - 1) / piece_bytes_) {}

Status IdleWrite::Write(int fd, const std::string& what) {
  // Lowering a thread to SCHED_IDLE needs no privilege (raising it back would): this thread
  // stays idle for the rest of its life, which is why Write wants a thread of its own.
  sched_param param{};
  (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);
  {
    std::lock_guard lock(mu_);
    what_ = what;
    fd_.store(fd, std::memory_order_release);
  }
  cv_.notify_all();
  TakePieces();
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return finished_ == pieces_; });
  return first_error_;
}

void IdleWrite::Hurry() {
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return fd_.load() >= 0 || ended_; });
    if (fd_.load() < 0) return;
  }
  hurried_ += TakePieces();
}

void IdleWrite::End() {
  {
    std::lock_guard lock(mu_);
    ended_ = true;
  }
  cv_.notify_all();
}

uint64_t IdleWrite::TakePieces() {
  const int fd = fd_.load(std::memory_order_acquire);
  uint64_t written = 0;
  // A piece is written only once taken, and Write returns only when every taken piece is done,
  // so `fd` is open for every write here.
  for (uint64_t k = next_.fetch_add(1); k < pieces_; k = next_.fetch_add(1)) {
    const uint64_t offset = k * piece_bytes_;
    const uint64_t size = std::min<uint64_t>(piece_bytes_, bytes_.size() - offset);
    Done(WriteAllAt(fd, offset, bytes_.subspan(offset, size), what_));
    ++written;
  }
  return written;
}

void IdleWrite::Done(const Status& s) {
  {
    std::lock_guard lock(mu_);
    if (!s.ok() && first_error_.ok()) first_error_ = s;
    ++finished_;
  }
  cv_.notify_all();
}

}  // namespace weightcast::publish
