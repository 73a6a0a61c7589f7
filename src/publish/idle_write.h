// The write of a published image into the publisher's own store, done with CPU that nobody else
// wants (docs/rl_step.md, "The publisher's write in idle time").
//
// A coordinated publisher announces a version before its store holds it (commit_behind): the
// fleet has the version, the store's copy is for the publisher's restart and for serving whole
// chunks later. Written at normal priority, that write competes with the step itself (the
// encode's hashing, the samplers' apply) for cores and memory bandwidth. Here it runs on a thread
// at SCHED_IDLE, in pieces, so it fills the time between steps; when a caller needs the write
// done (the next publish, Stop) it calls Hurry and writes the pieces left on its own thread, at
// its own priority, so no caller ever waits on a starved idle thread for more than one piece.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>

#include <weightcast/status.h>

namespace weightcast::publish {

class IdleWrite {
 public:
  // `bytes` stay unchanged and alive until Write has returned.
  explicit IdleWrite(std::span<const uint8_t> bytes, uint64_t piece_bytes = kPieceBytes);

  // The store's BytesWriter: marks the calling thread SCHED_IDLE (for good: call it on a thread
  // of its own), writes pieces into `fd` until none is left, then waits for the pieces Hurry took
  // and returns the first error. Called once.
  Status Write(int fd, const std::string& what);

  // Writes, on the calling thread, every piece no thread has started yet. Waits first for Write
  // to be called (its thread opens the file at normal priority) or for End.
  void Hurry();

  // Says that Write will not be called any more (the store's write returned, or failed before
  // it): a Hurry waiting for it returns. Called once, by the thread that calls the store.
  void End();

  // Pieces written by Hurry.
  uint64_t hurried_pieces() const { return hurried_.load(); }

  static constexpr uint64_t kPieceBytes = 1u << 20;

 private:
  // Takes pieces and writes them until none is left; returns how many it wrote.
  uint64_t TakePieces();
  void Done(const Status& s);

  const std::span<const uint8_t> bytes_;
  const uint64_t piece_bytes_;
  const uint64_t pieces_;
  std::atomic<uint64_t> next_{0};
  std::atomic<uint64_t> hurried_{0};
  std::atomic<int> fd_{-1};
  std::string what_;  // set before fd_ is published
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t finished_ = 0;  // pieces written or failed (guarded by mu_)
  bool ended_ = false;     // guarded by mu_
  Status first_error_ = Status::Ok();
};

}  // namespace weightcast::publish
