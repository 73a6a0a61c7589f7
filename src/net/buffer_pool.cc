#include "net/buffer_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <new>
#include <vector>

// Under AddressSanitizer, idle blocks are poisoned: a frame body used after it was freed (now
// idle in the pool, not freed to the allocator) is still reported.
#if defined(WC_ASAN)
#include <sanitizer/asan_interface.h>
#define WC_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define WC_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define WC_POISON(p, n) ((void)(p), (void)(n))
#define WC_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace weightcast::net {
namespace {

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// What is mapped for a block of `bytes`: room in front so that byte kHeadBytes starts a page.
size_t MappedSize(size_t bytes) {
  const size_t page = PageSize();
  return (page - kPooledHeadBytes + bytes + page - 1) / page * page;
}

void* Start(void* mapping) { return static_cast<char*>(mapping) + PageSize() - kPooledHeadBytes; }
// The block of a mapping, handed out for `bytes`: under ASan only those bytes are addressable.
void* Handed(void* mapping, size_t size, size_t bytes) {
  void* start = Start(mapping);
  WC_UNPOISON(mapping, size);
  WC_POISON(mapping, PageSize() - kPooledHeadBytes);
  WC_POISON(static_cast<char*>(start) + bytes, size - (PageSize() - kPooledHeadBytes) - bytes);
  return start;
}

void* Mapping(void* start) { return static_cast<char*>(start) - (PageSize() - kPooledHeadBytes); }

}  // namespace

BufferPool::~BufferPool() {
  for (const Block& b : idle_) {
    WC_UNPOISON(b.mapping, b.size);
    munmap(b.mapping, b.size);
  }
}

BufferPool& BufferPool::Global() {
  static BufferPool* pool =
      new BufferPool();  // NOLINT(cppcoreguidelines-owning-memory): never freed
  return *pool;
}

void* BufferPool::Allocate(size_t bytes) {
  const size_t size = MappedSize(bytes);
  {
    std::lock_guard lock(mu_);
    // The most recently freed block of the size is the likeliest to be in cache.
    for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
      if (it->size != size) continue;
      void* mapping = it->mapping;
      idle_.erase(std::next(it).base());
      stats_.idle_bytes -= size;
      ++stats_.hits;
      return Handed(mapping, size, bytes);
    }
    ++stats_.misses;
  }
  void* mapping = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) throw std::bad_alloc();
  return Handed(mapping, size, bytes);
}

void BufferPool::Free(void* block, size_t bytes) {
  const Block freed{Mapping(block), MappedSize(bytes)};
  std::vector<Block> evicted;
  {
    std::lock_guard lock(mu_);
    if (freed.size > idle_budget_) {
      evicted.push_back(freed);
    } else {
      idle_.push_back(freed);
      WC_POISON(freed.mapping, freed.size);
      stats_.idle_bytes += freed.size;
      while (stats_.idle_bytes > idle_budget_) {
        evicted.push_back(idle_.front());
        stats_.idle_bytes -= idle_.front().size;
        idle_.pop_front();
      }
    }
    stats_.evictions += evicted.size();
  }
  // Outside the lock: unmapping megabytes takes a while.
  for (const Block& b : evicted) {
    WC_UNPOISON(b.mapping, b.size);  // the shadow of unmapped memory must not stay poisoned
    munmap(b.mapping, b.size);
  }
}

BufferPoolStats BufferPool::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace weightcast::net
