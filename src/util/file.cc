#include "util/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

namespace weightcast {
namespace {

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

// The EINTR-safe loop of WriteAll and WriteAllAt: `write_some(done)` writes from byte `done` on
// and returns what the system call did.
template <typename WriteSome>
Status WriteLoop(std::span<const uint8_t> data, const char* call, std::string_view what,
                 WriteSome write_some) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write_some(done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(std::string(call) + "(" + std::string(what) + ")", errno);
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

Result<MappedFile> MappedFile::Open(const std::filesystem::path& path, bool populate) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open(" + path.string() + ")", errno);
  FdCloser closer(fd);
  return Map(fd, path, populate);
}

Result<MappedFile> MappedFile::Map(int fd, const std::filesystem::path& path, bool populate) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoStatus("stat(" + path.string() + ")", errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path.string() + ": not a regular file");
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<uint64_t>(st.st_size);
  if (file.size_ == 0) return file;
  void* p =
      ::mmap(nullptr, file.size_, PROT_READ, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  if (p == MAP_FAILED) return ErrnoStatus("mmap(" + path.string() + ")", errno);
  ::madvise(p, file.size_, MADV_SEQUENTIAL);
  file.data_ = static_cast<const uint8_t*>(p);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(other.data_), size_(other.size_), path_(std::move(other.path_)) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = other.data_;
    size_ = other.size_;
    path_ = std::move(other.path_);
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

Result<std::string> ReadFileToString(const std::filesystem::path& path, uint64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open(" + path.string() + ")", errno);
  FdCloser closer(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoStatus("stat(" + path.string() + ")", errno);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return OutOfRange(path.string() + ": " + std::to_string(st.st_size) +
                      " bytes is over the limit of " + std::to_string(max_bytes));
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  WC_RETURN_IF_ERROR(
      ReadExactAt(fd, 0, {reinterpret_cast<uint8_t*>(out.data()), out.size()}, path.string()));
  return out;
}

Status ReadExactAt(int fd, uint64_t offset, std::span<uint8_t> out, std::string_view what) {
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read(" + std::string(what) + ")", errno);
    }
    if (n == 0) {
      return Corrupt(std::string(what) + ": file ends at byte " + std::to_string(offset + done) +
                     ", expected " + std::to_string(out.size() - done) + " more bytes");
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status WriteAll(int fd, std::span<const uint8_t> data, std::string_view what) {
  return WriteLoop(data, "write", what, [&](size_t done) {
    return ::write(fd, data.data() + done, data.size() - done);
  });
}

Status WriteAllAt(int fd, uint64_t offset, std::span<const uint8_t> data, std::string_view what) {
  return WriteLoop(data, "pwrite", what, [&](size_t done) {
    return ::pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
  });
}

Status WritePrivateFile(const std::filesystem::path& path, std::string_view data, bool overwrite) {
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  if (!overwrite) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (errno == EEXIST) {
        return AlreadyExists(path.string() + " exists; pass --force to replace it");
      }
      return IoError("create " + path.string() + ": " + std::strerror(errno));
    }
    Status written = WriteAll(fd, bytes, path.string());
    if (written.ok() && ::fsync(fd) != 0) {
      written = IoError("fsync " + path.string() + ": " + std::strerror(errno));
    }
    ::close(fd);
    if (!written.ok()) ::unlink(path.c_str());
    return written;
  }
  std::string tmp = path.string() + ".tmp-XXXXXX";
  int fd = ::mkstemp(tmp.data());  // mode 0600
  if (fd < 0) return IoError("create a file beside " + path.string() + ": " + std::strerror(errno));
  Status written = WriteAll(fd, bytes, tmp);
  if (written.ok() && ::fsync(fd) != 0) {
    written = IoError("fsync " + tmp + ": " + std::strerror(errno));
  }
  ::close(fd);
  if (written.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    written = IoError("replace " + path.string() + ": " + std::strerror(errno));
  }
  if (!written.ok()) ::unlink(tmp.c_str());
  return written;
}

Status FsyncPath(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open(" + path.string() + ")", errno);
  FdCloser closer(fd);
  if (::fsync(fd) != 0) return ErrnoStatus("fsync(" + path.string() + ")", errno);
  return Status::Ok();
}

Status WriteFileAtomic(const std::filesystem::path& path, std::string_view data) {
  std::random_device rd;
  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(rd());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open(" + tmp.string() + ")", errno);
  Status st =
      WriteAll(fd, {reinterpret_cast<const uint8_t*>(data.data()), data.size()}, tmp.string());
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoStatus("fsync(" + tmp.string() + ")", errno);
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = ErrnoStatus("rename(" + tmp.string() + ")", errno);
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  std::filesystem::path dir = path.parent_path();
  return FsyncPath(dir.empty() ? std::filesystem::path(".") : dir);
}

}  // namespace weightcast
