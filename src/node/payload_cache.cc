#include "node/payload_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <system_error>

namespace weightcast::node {
namespace {

// An unlinked file in `dir`, so that nothing is left behind whatever happens to the process.
int OpenSpillFile(std::filesystem::path dir) {
  if (dir.empty()) {
    std::error_code ec;
    dir = std::filesystem::temp_directory_path(ec);
    if (ec) return -1;
  }
  int fd = ::open(dir.c_str(), O_RDWR | O_TMPFILE | O_CLOEXEC, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR)) return fd;
  // A filesystem without O_TMPFILE: a named file, unlinked at once.
  // Hidden: in a store's root it can never pass for a channel.
  std::string name = (dir / ".weightcast-payloads-XXXXXX").string();
  fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd >= 0) ::unlink(name.c_str());
  return fd;
}

bool PwriteAll(int fd, const uint8_t* data, uint64_t size, uint64_t offset) {
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<uint64_t>(n);
  }
  return true;
}

bool PreadAll(int fd, uint8_t* data, uint64_t size, uint64_t offset) {
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, data + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<uint64_t>(n);
  }
  return true;
}

}  // namespace

PayloadCache::PayloadCache(Version version, PayloadCacheOptions options)
    : version_(version), options_(std::move(options)) {}

PayloadCache::~PayloadCache() {
  if (spill_fd_ >= 0) ::close(spill_fd_);
}

void PayloadCache::Put(ChunkIndex chunk, std::vector<uint8_t> payload) {
  Put(chunk, HeldBytes::Of(std::make_shared<const std::vector<uint8_t>>(std::move(payload))));
}

void PayloadCache::DropLocked(uint32_t chunk) {
  if (auto it = payloads_.find(chunk); it != payloads_.end()) {
    memory_bytes_ -= it->second.bytes.size();
    payloads_.erase(it);
  }
  if (auto it = spilled_.find(chunk); it != spilled_.end()) {
    spilled_bytes_ -= it->second.size;
    spilled_.erase(it);
  }
}

bool PayloadCache::SpillLocked(uint32_t chunk, std::span<const uint8_t> payload) {
  if (spill_failed_) return false;
  if (spill_fd_ < 0) spill_fd_ = OpenSpillFile(options_.spill_dir);
  if (spill_fd_ < 0 || !PwriteAll(spill_fd_, payload.data(), payload.size(), spill_end_)) {
    spill_failed_ = true;
    return false;
  }
  spilled_[chunk] = Spilled{spill_end_, payload.size()};
  spill_end_ += payload.size();
  spilled_bytes_ += payload.size();
  return true;
}

void PayloadCache::Put(ChunkIndex chunk, HeldBytes payload) {
  std::lock_guard lock(mu_);
  DropLocked(chunk.value());
  if (memory_bytes_ + payload.bytes.size() > options_.memory_bytes &&
      SpillLocked(chunk.value(), payload.bytes)) {
    return;
  }
  memory_bytes_ += payload.bytes.size();
  payloads_.emplace(chunk.value(), std::move(payload));
}

std::optional<HeldBytes> PayloadCache::Get(ChunkIndex chunk) const {
  Spilled at;
  {
    std::lock_guard lock(mu_);
    if (auto it = payloads_.find(chunk.value()); it != payloads_.end()) return it->second;
    auto it = spilled_.find(chunk.value());
    if (it == spilled_.end()) return std::nullopt;
    at = it->second;
  }
  // Without the lock: spilled bytes are never rewritten (the file is append-only).
  auto read = std::make_shared<std::vector<uint8_t>>(at.size);
  if (!PreadAll(spill_fd_, read->data(), at.size, at.offset)) return std::nullopt;
  // See the header: a caller keeping only a span may use it until this thread's next read-back.
  thread_local SharedBytes last_read_back;
  last_read_back = read;
  return HeldBytes::Of(std::move(read));
}

bool PayloadCache::Contains(ChunkIndex chunk) const {
  std::lock_guard lock(mu_);
  return payloads_.count(chunk.value()) != 0 || spilled_.count(chunk.value()) != 0;
}

std::vector<ChunkIndex> PayloadCache::Chunks() const {
  std::lock_guard lock(mu_);
  std::vector<ChunkIndex> out;
  out.reserve(payloads_.size() + spilled_.size());
  for (const auto& [index, payload] : payloads_) out.push_back(ChunkIndex(index));
  for (const auto& [index, where] : spilled_) out.push_back(ChunkIndex(index));
  std::sort(out.begin(), out.end());
  return out;
}

size_t PayloadCache::size() const {
  std::lock_guard lock(mu_);
  return payloads_.size() + spilled_.size();
}

uint64_t PayloadCache::bytes() const {
  std::lock_guard lock(mu_);
  return memory_bytes_ + spilled_bytes_;
}

uint64_t PayloadCache::memory_bytes() const {
  std::lock_guard lock(mu_);
  return memory_bytes_;
}

}  // namespace weightcast::node
