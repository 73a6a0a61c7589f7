#include "store/chunk_record.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

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

Result<LiveRecord> LiveRecord::Create(const std::filesystem::path& path, const Digest& root,
                                      std::span<const ChunkIndex> verified) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open(" + tmp.string() + ")", errno);
  LiveRecord record(fd);
  std::vector<uint8_t> bytes = Header(root);
  bytes.resize(kRecordHeaderBytes + verified.size() * kRecordBytes);
  for (size_t i = 0; i < verified.size(); ++i) {
    PutU32(bytes.data() + kRecordHeaderBytes + i * kRecordBytes, verified[i].value());
    PutU32(bytes.data() + kRecordHeaderBytes + i * kRecordBytes + 4,
           verified[i].value() ^ kRecordCheck);
  }
  WC_RETURN_IF_ERROR(WriteAll(fd, bytes, tmp.string()));
  // Renamed into place whole: a reader never sees this file without its header.
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoStatus("rename(" + tmp.string() + ")", errno);
  }
  return record;
}

LiveRecord::LiveRecord(LiveRecord&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

LiveRecord& LiveRecord::operator=(LiveRecord&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

LiveRecord::~LiveRecord() { Close(); }

void LiveRecord::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void LiveRecord::Append(ChunkIndex chunk) const {
  if (fd_ < 0) return;
  uint8_t bytes[kRecordBytes];
  PutU32(bytes, chunk.value());
  PutU32(bytes + 4, chunk.value() ^ kRecordCheck);
  // Advisory: a short or failed write leaves a reader waiting for the commit, nothing worse.
  [[maybe_unused]] const ssize_t n = ::write(fd_, bytes, sizeof(bytes));
}

size_t ParseChunkRecords(std::span<const uint8_t> bytes, uint32_t chunk_count,
                         std::vector<ChunkIndex>& out) {
  size_t at = 0;
  while (at + kRecordBytes <= bytes.size()) {
    const uint32_t index = GetU32(bytes.data() + at);
    const uint32_t check = GetU32(bytes.data() + at + 4);
    if ((index ^ kRecordCheck) != check || index >= chunk_count) break;
    out.push_back(ChunkIndex(index));
    at += kRecordBytes;
  }
  return at;
}

ChunkRecordReader::ChunkRecordReader(int fd, std::filesystem::path path, const Digest& root,
                                     uint32_t count)
    : fd_(fd), path_(std::move(path)), root_(root), seen_(count, false) {}

ChunkRecordReader::ChunkRecordReader(ChunkRecordReader&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      root_(other.root_),
      offset_(other.offset_),
      seen_(std::move(other.seen_)) {}

ChunkRecordReader& ChunkRecordReader::operator=(ChunkRecordReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    root_ = other.root_;
    offset_ = other.offset_;
    seen_ = std::move(other.seen_);
  }
  return *this;
}

ChunkRecordReader::~ChunkRecordReader() {
  if (fd_ >= 0) ::close(fd_);
}

Result<ChunkRecordReader> ChunkRecordReader::Open(const std::filesystem::path& path,
                                                  const Digest& root, uint32_t chunk_count) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(path.string() + " does not exist");
    return ErrnoStatus("open(" + path.string() + ")", errno);
  }
  return ChunkRecordReader(fd, path, root, chunk_count);
}

Status ChunkRecordReader::Poll(std::vector<ChunkIndex>& fresh) {
  if (fd_ < 0) return FailedPrecondition(path_.string() + ": chunk record reader is closed");
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return ErrnoStatus("stat(" + path_.string() + ")", errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < offset_) offset_ = 0;  // cut back by a resuming writer: read it again
  if (offset_ == 0) {
    if (size < kRecordHeaderBytes) return Status::Ok();
    std::vector<uint8_t> header(kRecordHeaderBytes);
    WC_RETURN_IF_ERROR(ReadExactAt(fd_, 0, header, path_.string()));
    if (header != Header(root_)) {
      return Corrupt(path_.string() + " is not the chunk record of this version");
    }
    offset_ = kRecordHeaderBytes;
  }
  // Whole records only, and a bounded read per call.
  const uint64_t available = (size - offset_) / kRecordBytes * kRecordBytes;
  const uint64_t take = std::min<uint64_t>(available, uint64_t{1} << 20);
  if (take == 0) return Status::Ok();
  std::vector<uint8_t> bytes(take);
  WC_RETURN_IF_ERROR(ReadExactAt(fd_, offset_, bytes, path_.string()));
  std::vector<ChunkIndex> parsed;
  offset_ += ParseChunkRecords(bytes, static_cast<uint32_t>(seen_.size()), parsed);
  for (ChunkIndex c : parsed) {
    if (seen_[c.value()]) continue;
    seen_[c.value()] = true;
    fresh.push_back(c);
  }
  return Status::Ok();
}

}  // namespace weightcast::store
