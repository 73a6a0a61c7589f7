#include "store/chunk_record.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "util/file.h"

namespace weightcast::store {
namespace {

constexpr char kMagic[8] = {'W', 'C', 'C', 'H', 'U', 'N', 'K', '1'};

void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

std::vector<uint8_t> Header(const Digest& root) {
  std::vector<uint8_t> h(kRecordHeaderBytes);
  std::memcpy(h.data(), kMagic, sizeof(kMagic));
  std::memcpy(h.data() + 8, root.data(), 8);
  return h;
}

// Rewrites the file to hold only its first `keep` bytes, durably.
Status TruncateDurable(int fd, uint64_t keep, const std::filesystem::path& path) {
  if (::ftruncate(fd, static_cast<off_t>(keep)) != 0) {
    return ErrnoStatus("ftruncate(" + path.string() + ")", errno);
  }
  if (::fdatasync(fd) != 0) return ErrnoStatus("fdatasync(" + path.string() + ")", errno);
  return Status::Ok();
}

}  // namespace

ChunkRecord::ChunkRecord(ChunkRecord&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

ChunkRecord& ChunkRecord::operator=(ChunkRecord&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

ChunkRecord::~ChunkRecord() { Close(); }

void ChunkRecord::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<ChunkRecord> ChunkRecord::Create(const std::filesystem::path& path, const Digest& root) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open(" + path.string() + ")", errno);
  ChunkRecord record(fd, path);
  std::vector<uint8_t> header = Header(root);
  WC_RETURN_IF_ERROR(WriteAll(fd, header, path.string()));
  if (::fdatasync(fd) != 0) return ErrnoStatus("fdatasync(" + path.string() + ")", errno);
  return record;
}

Result<ChunkRecord> ChunkRecord::Open(const std::filesystem::path& path, const Digest& root,
                                      std::vector<bool>& verified, RecordRecovery& recovery) {
  recovery = {};
  int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open(" + path.string() + ")", errno);
  ChunkRecord record(fd, path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoStatus("stat(" + path.string() + ")", errno);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  // Each chunk is recorded at most once per session, but a resumed receiver may record again
  // what a previous session recorded without syncing; bound the read so a huge file is refused.
  uint64_t limit = kRecordHeaderBytes + kRecordBytes * 4 * (uint64_t{verified.size()} + 16);
  std::vector<uint8_t> bytes;
  if (size <= limit) {
    bytes.resize(size);
    WC_RETURN_IF_ERROR(ReadExactAt(fd, 0, bytes, path.string()));
  }
  std::vector<uint8_t> header = Header(root);
  if (size > limit || bytes.size() < kRecordHeaderBytes ||
      std::memcmp(bytes.data(), header.data(), kRecordHeaderBytes) != 0) {
    recovery.header_mismatch = true;
    recovery.discarded_bytes = size;
    WC_RETURN_IF_ERROR(TruncateDurable(fd, 0, path));
    WC_RETURN_IF_ERROR(WriteAll(fd, header, path.string()));
    if (::fdatasync(fd) != 0) return ErrnoStatus("fdatasync(" + path.string() + ")", errno);
    return record;
  }
  uint64_t good = kRecordHeaderBytes;
  while (good + kRecordBytes <= bytes.size()) {
    uint32_t index = GetU32(bytes.data() + good);
    uint32_t check = GetU32(bytes.data() + good + 4);
    if ((index ^ kRecordCheck) != check || index >= verified.size()) break;
    if (!verified[index]) {
      verified[index] = true;
      ++recovery.chunks;
    }
    good += kRecordBytes;
  }
  if (good != size) {
    recovery.discarded_bytes = size - good;
    WC_RETURN_IF_ERROR(TruncateDurable(fd, good, path));
  }
  return record;
}

Status ChunkRecord::Append(std::span<const ChunkIndex> chunks) {
  if (fd_ < 0) return FailedPrecondition(path_.string() + ": chunk record is closed");
  if (chunks.empty()) return Status::Ok();
  std::vector<uint8_t> buf(chunks.size() * kRecordBytes);
  for (size_t i = 0; i < chunks.size(); ++i) {
    PutU32(buf.data() + i * kRecordBytes, chunks[i].value());
    PutU32(buf.data() + i * kRecordBytes + 4, chunks[i].value() ^ kRecordCheck);
  }
  WC_RETURN_IF_ERROR(WriteAll(fd_, buf, path_.string()));
  if (::fdatasync(fd_) != 0) return ErrnoStatus("fdatasync(" + path_.string() + ")", errno);
  return Status::Ok();
}

}  // namespace weightcast::store
