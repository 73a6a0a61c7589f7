#include "coord/log_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "hash/digest.h"
#include "util/file.h"

namespace weightcast::coord {
namespace {

constexpr std::string_view kHeader = "WCCLOG1\n";
constexpr size_t kRecordHeaderSize = 4 + 8;

std::array<uint8_t, 8> Check(std::span<const uint8_t, 4> length, std::string_view record) {
  std::string data(reinterpret_cast<const char*>(length.data()), length.size());
  data.append(record);
  Digest digest = Sha256(std::span(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
  std::array<uint8_t, 8> check;
  std::memcpy(check.data(), digest.data(), check.size());
  return check;
}

std::array<uint8_t, 4> EncodeLength(uint32_t n) {
  return {static_cast<uint8_t>(n), static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n >> 16),
          static_cast<uint8_t>(n >> 24)};
}

}  // namespace

LogFile::LogFile(std::filesystem::path path, int fd, uint64_t size)
    : path_(std::move(path)), fd_(fd), size_(size) {}

LogFile::~LogFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<LogFile::Opened> LogFile::Open(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (ec) return IoError("stat(" + path.string() + "): " + ec.message());
    WC_RETURN_IF_ERROR(WriteFileAtomic(path, kHeader));
  }
  auto read = ReadFileToString(path, 4ull << 30);
  if (!read.ok()) return read.status();
  const std::string& bytes = *read;
  if (bytes.size() < kHeader.size() ||
      std::memcmp(bytes.data(), kHeader.data(), kHeader.size()) != 0) {
    return Corrupt(path.string() + ": not a coordinator log (bad header)");
  }
  Opened opened;
  size_t at = kHeader.size();
  size_t good_end = at;
  while (at < bytes.size()) {
    const size_t left = bytes.size() - at;
    if (left < kRecordHeaderSize) break;  // torn inside a record header
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data() + at);
    const uint32_t length = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                            static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
    if (length > left - kRecordHeaderSize) break;  // runs past the end: torn
    if (length > kMaxLogRecordBytes) {
      return Corrupt(path.string() + ": record at offset " + std::to_string(at) + " claims " +
                     std::to_string(length) + " bytes");
    }
    std::string_view record(bytes.data() + at + kRecordHeaderSize, length);
    const auto check = Check(std::span<const uint8_t, 4>(p, 4), record);
    const bool last = at + kRecordHeaderSize + length == bytes.size();
    if (std::memcmp(check.data(), p + 4, check.size()) != 0) {
      if (last) break;  // a torn write of the final record
      // A crash may leave the file extended over the final append with its data never
      // written: zeros to the end, which parse as empty records that fail their check.
      if (bytes.find_first_not_of('\0', at) == std::string::npos) break;
      return Corrupt(path.string() + ": record at offset " + std::to_string(at) +
                     " fails its check and is not the last one");
    }
    opened.records.emplace_back(record);
    at += kRecordHeaderSize + length;
    good_end = at;
  }
  opened.torn_bytes = bytes.size() - good_end;

  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open(" + path.string() + ")", errno);
  opened.file.reset(new LogFile(path, fd, good_end));
  if (opened.torn_bytes != 0) {
    if (::ftruncate(fd, static_cast<off_t>(good_end)) != 0) {
      return ErrnoStatus("ftruncate(" + path.string() + ")", errno);
    }
    if (::fsync(fd) != 0) return ErrnoStatus("fsync(" + path.string() + ")", errno);
  }
  return opened;
}

Status LogFile::Append(std::string_view record) {
  if (!wedged_.ok()) return wedged_;
  if (record.size() > kMaxLogRecordBytes) {
    return OutOfRange("log record of " + std::to_string(record.size()) + " bytes");
  }
  const auto length = EncodeLength(static_cast<uint32_t>(record.size()));
  const auto check = Check(length, record);
  std::vector<uint8_t> out;
  out.reserve(kRecordHeaderSize + record.size());
  out.insert(out.end(), length.begin(), length.end());
  out.insert(out.end(), check.begin(), check.end());
  out.insert(out.end(), record.begin(), record.end());

  // pwrite at our own idea of the end, so a failed write is cut back exactly.
  Status written = Status::Ok();
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n =
        ::pwrite(fd_, out.data() + done, out.size() - done, static_cast<off_t>(size_ + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      written = ErrnoStatus("write(" + path_.string() + ")", errno);
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (written.ok() && ::fdatasync(fd_) != 0) {
    written = ErrnoStatus("fdatasync(" + path_.string() + ")", errno);
  }
  if (!written.ok()) {
    if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0 || ::fdatasync(fd_) != 0) {
      wedged_ = written.WithContext("coordinator log is wedged after a failed append");
    }
    return written;
  }
  size_ += out.size();
  return Status::Ok();
}

}  // namespace weightcast::coord
