// Recycled memory for large received frame bodies.
//
// Every transport receives a chunk into a freshly allocated body (`Bytes`). For bodies of
// megabytes the allocator hands back memory the kernel has just unmapped (glibc maps large
// blocks on their own and trims freed heap tops), so each receive first page-faults and zeroes
// every page of its buffer: measured, a quarter of a loopback receiver's CPU went to the faults
// (docs/transport_ucx.md, "Receive buffers"). The pool keeps freed large blocks, mapped and
// touched, and hands them out again for the same size, so a steady stream of chunks lands in
// warm pages; a UCX registration of such a block is a hit in UCX's registration cache, since
// the address comes back.
//
// Where a block starts: large bodies are chunk frames, a 24-byte chunk header and the payload,
// so a block is placed with its byte kPooledHeadBytes on a page boundary: the payload is page
// aligned, as the store's mapping that most senders read from is. A copy between the two then
// keeps source and destination at the same offset in their pages; a destination a few bytes
// past the source's offset (a page-aligned block, header first) makes the CPU's loads alias
// its recent stores (4K aliasing) and ran the UCX shared-memory receive at 0.4x its speed
// (docs/transport_ucx.md, "Receive buffers"). Page-aligned payloads are also what RDMA
// registration and O_DIRECT want.
//
// Bounded: at most `idle_budget` bytes wait in the pool; past that the oldest idle blocks are
// unmapped. Thread-safe; bodies are allocated on transport threads and freed on the caller's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>

// WC_ASAN: defined when built under AddressSanitizer (GCC or Clang); the pool then poisons
// idle blocks.
#if defined(__SANITIZE_ADDRESS__)  // GCC
#define WC_ASAN 1
#elif defined(__has_feature)  // Clang
#if __has_feature(address_sanitizer)
#define WC_ASAN 1
#endif
#endif

namespace weightcast::net {

// The offset in a block that starts a page (net::kChunkHeaderSize; frame.h checks they agree).
inline constexpr size_t kPooledHeadBytes = 24;

struct BufferPoolStats {
  uint64_t hits = 0;        // allocations served by an idle block
  uint64_t misses = 0;      // allocations that mapped new memory
  uint64_t evictions = 0;   // idle blocks unmapped for the budget
  uint64_t idle_bytes = 0;  // bytes waiting in the pool now
};

class BufferPool {
 public:
  // Bodies below this size are left to the ordinary allocator.
  static constexpr size_t kMinPooledBytes = 128u << 10;
  static constexpr size_t kDefaultIdleBudget = 128u << 20;

  explicit BufferPool(size_t idle_budget = kDefaultIdleBudget) : idle_budget_(idle_budget) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // The process-wide pool behind `Bytes`; never destroyed (bodies may be freed during exit).
  static BufferPool& Global();

  // A block of at least `bytes` whose byte kPooledHeadBytes starts a page. Throws
  // std::bad_alloc when memory is exhausted.
  void* Allocate(size_t bytes);
  // Returns a block from Allocate of the same `bytes`.
  void Free(void* block, size_t bytes);

  BufferPoolStats stats() const;

 private:
  struct Block {
    void* mapping;  // page aligned; the block starts kPooledHeadBytes before its second page
    size_t size;    // mapped bytes
  };

  mutable std::mutex mu_;
  const size_t idle_budget_;
  std::deque<Block> idle_;  // oldest first
  BufferPoolStats stats_;
};

}  // namespace weightcast::net
