// An append-only file of records that survives crashes: each Append is on disk (fdatasync)
// before it returns, and Open tolerates the one thing a crash can leave behind, a torn last
// record, by cutting it off. Anything else that does not check out is corruption.
//
//   header:  "WCCLOG1\n"
//   record:  u32 length (little endian) | 8-byte check | `length` bytes
//   check:   the first 8 bytes of SHA-256(length bytes || record bytes)
//
// A record is torn when it runs past the end of the file, or when its check fails and it is the
// last record in the file or only zeros follow it (a file extended over an append whose data
// never reached the disk). A failed check with anything else after it is corruption (kCorrupt).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

namespace weightcast::coord {

// Records are small (one version's log entry); this bounds what a corrupt length can make us do.
inline constexpr uint32_t kMaxLogRecordBytes = 1u << 20;

class LogFile {
 public:
  struct Opened;

  // Opens `path`, creating it (with its header, atomically) when it does not exist, and returns
  // the records in order. A torn tail is truncated away (and fsynced) so that the next append
  // follows the last good record. Not thread-safe: one owner.
  static Result<Opened> Open(const std::filesystem::path& path);

  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

  // Appends one record and fdatasyncs. On failure the file is cut back to its previous length so
  // a half-written record never precedes a later one; if even that fails, every later Append
  // fails with the same status (the log is wedged rather than corrupted).
  Status Append(std::string_view record);

  uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  LogFile(std::filesystem::path path, int fd, uint64_t size);

  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  Status wedged_;
};

struct LogFile::Opened {
  std::unique_ptr<LogFile> file;
  std::vector<std::string> records;
  uint64_t torn_bytes = 0;  // bytes cut off the end (0: the file ended cleanly)
};

}  // namespace weightcast::coord
