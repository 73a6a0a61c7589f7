// File helpers over POSIX: read-only mappings, bounded reads, durable atomic writes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include <weightcast/status.h>

namespace weightcast {

// A read-only mmap of a whole file. Move-only; unmaps on destruction. An empty file maps to an
// empty span. Thread-safe to read from many threads once opened.
class MappedFile {
 public:
  // `populate`: map every page now (MAP_POPULATE), for a file that will be read whole and often:
  // one call instead of a page fault per 4 KiB.
  static Result<MappedFile> Open(const std::filesystem::path& path, bool populate = false);
  // Maps the file open as `fd` (readable; not closed here, and the mapping outlives it). `path`
  // names it in errors and path().
  static Result<MappedFile> Map(int fd, const std::filesystem::path& path, bool populate = false);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::filesystem::path path_;
};

// Reads a whole file, refusing files larger than `max_bytes`.
Result<std::string> ReadFileToString(const std::filesystem::path& path,
                                     uint64_t max_bytes = 64ull << 20);

// Reads exactly `out.size()` bytes at `offset` (pread loop). Short files give kCorrupt.
Status ReadExactAt(int fd, uint64_t offset, std::span<uint8_t> out, std::string_view what);

// Writes all of `data` to fd (write loop, EINTR-safe).
Status WriteAll(int fd, std::span<const uint8_t> data, std::string_view what);

// Writes all of `data` to fd at `offset` (pwrite loop, EINTR-safe); the file offset is unused, so
// threads may write different ranges of one file at once.
Status WriteAllAt(int fd, uint64_t offset, std::span<const uint8_t> data, std::string_view what);

// Writes `data` to `path` so that readers see the old content or the new, never a mix, and the
// new content survives a crash once this returns: write to a temporary file beside it, fsync,
// rename over `path`, fsync the directory.
Status WriteFileAtomic(const std::filesystem::path& path, std::string_view data);

// Writes `data` to a file of mode 0600 (a secret, a private key), durably. Refuses
// (kAlreadyExists) when `path` exists, unless `overwrite`; then the old file is replaced
// atomically (a 0600 temporary file beside it, renamed over it), so it is never seen half-written
// or with a wider mode. Without `overwrite` an existing file, or a link planted at the path, is
// never followed or truncated (O_EXCL).
Status WritePrivateFile(const std::filesystem::path& path, std::string_view data, bool overwrite);

// fsyncs a file or a directory by path.
Status FsyncPath(const std::filesystem::path& path);

}  // namespace weightcast
