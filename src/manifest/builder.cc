// BuildManifest and HashChunks: stream a checkpoint's bytes through the chunk hasher on all cores.
#include "manifest/builder.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <optional>
#include <utility>

#include "util/thread_pool.h"

namespace weightcast {
namespace {

// A read-only mapping of [offset, offset + size) of one file, opened for one run of chunks (below).
// Mapping per run (rather than every file up front) keeps open descriptors and mappings bounded by
// the number of workers, whatever the number of files.
class FileWindow {
 public:
  static Result<FileWindow> Open(const std::filesystem::path& path, uint64_t expected_size,
                                 uint64_t offset, uint64_t size) {
    FileWindow w;
    w.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (w.fd_ < 0) return ErrnoStatus("open(" + path.string() + ")", errno);
    struct stat st {};
    if (::fstat(w.fd_, &st) != 0) return ErrnoStatus("stat(" + path.string() + ")", errno);
    if (!S_ISREG(st.st_mode)) return InvalidArgument(path.string() + ": not a regular file");
    if (static_cast<uint64_t>(st.st_size) != expected_size) {
      return FailedPrecondition(path.string() + ": file is " + std::to_string(st.st_size) +
                                " bytes, the manifest says " + std::to_string(expected_size) +
                                " (changed while hashing?)");
    }
    if (size == 0) return w;
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t aligned = offset / page * page;
    w.map_size_ = size + (offset - aligned);
    void* p =
        ::mmap(nullptr, w.map_size_, PROT_READ, MAP_SHARED, w.fd_, static_cast<off_t>(aligned));
    if (p == MAP_FAILED) {
      w.map_size_ = 0;
      return ErrnoStatus("mmap(" + path.string() + ")", errno);
    }
    w.map_ = static_cast<uint8_t*>(p);
    // Ask for the whole window now: on a cold page cache the kernel reads ahead while we hash.
    ::madvise(p, w.map_size_, MADV_WILLNEED);
    ::madvise(p, w.map_size_, MADV_SEQUENTIAL);
    w.bytes_ = {w.map_ + (offset - aligned), size};
    return w;
  }

  FileWindow() = default;
  FileWindow(FileWindow&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)),
        map_(std::exchange(o.map_, nullptr)),
        map_size_(std::exchange(o.map_size_, 0)),
        bytes_(std::exchange(o.bytes_, {})) {}
  FileWindow& operator=(FileWindow&&) = delete;
  FileWindow(const FileWindow&) = delete;
  FileWindow& operator=(const FileWindow&) = delete;
  ~FileWindow() {
    if (map_ != nullptr) ::munmap(map_, map_size_);
    if (fd_ >= 0) ::close(fd_);
  }

  std::span<const uint8_t> bytes() const { return bytes_; }

 private:
  int fd_ = -1;
  uint8_t* map_ = nullptr;
  uint64_t map_size_ = 0;
  std::span<const uint8_t> bytes_;
};

// The bytes that one worker hashes for a run of consecutive chunks, read through one window per
// file the run touches instead of one per chunk. At 128 KiB chunks (what ChooseChunkSize picks
// for every version up to 1 GiB) the open/mmap/munmap/close of a window per chunk took more time
// than the hashing (1 GiB: 1.7 s against 0.8 s at 8 MiB chunks, most of it in the kernel;
// docs/bench/manifest.md), so a run covers about kRunBytes whatever the chunk size.
inline constexpr uint64_t kRunBytes = 8ull << 20;

class RunWindows {
 public:
  RunWindows(const std::filesystem::path& root, const std::vector<ManifestFile>& files,
             uint64_t run_end)
      : root_(root), files_(files), run_end_(run_end) {}

  // Bytes [pos, pos + take) of the flat space, all inside file `i`. Maps from pos to the end of
  // the run or of the file, whichever comes first, when the current window does not hold them.
  Result<std::span<const uint8_t>> Bytes(size_t i, uint64_t pos, uint64_t take) {
    if (!window_ || file_ != i || pos < begin_ || pos + take > end_) {
      const ManifestFile& f = files_[i];
      window_.reset();
      const uint64_t end = std::max(pos + take, std::min(run_end_, f.offset + f.size));
      WC_ASSIGN_OR_RETURN(FileWindow w,
                          FileWindow::Open(root_ / f.path, f.size, pos - f.offset, end - pos));
      window_.emplace(std::move(w));
      file_ = i;
      begin_ = pos;
      end_ = end;
    }
    return window_->bytes().subspan(pos - begin_, take);
  }

 private:
  const std::filesystem::path& root_;
  const std::vector<ManifestFile>& files_;
  uint64_t run_end_;
  std::optional<FileWindow> window_;
  size_t file_ = 0;
  uint64_t begin_ = 0;  // flat offsets of the window's bytes
  uint64_t end_ = 0;
};

// Hashes chunk `index`: the bytes [index * chunk_size, ...) of the flat space, which may come from
// several files (a chunk spanning a file boundary, or many small files in one chunk).
Result<Digest> HashOneChunk(const std::vector<ManifestFile>& files, uint64_t total,
                            uint64_t chunk_size, HashAlgorithm algorithm, uint64_t index,
                            RunWindows& windows, Digest* fast_hash) {
  const uint64_t begin = index * chunk_size;
  const uint64_t end = std::min(total, begin + chunk_size);
  // The last file that starts at or before `begin`; skips the empty files sharing its offset.
  auto it = std::upper_bound(files.begin(), files.end(), begin,
                             [](uint64_t off, const ManifestFile& f) { return off < f.offset; });
  size_t i = static_cast<size_t>(it - files.begin()) - 1;
  Hasher hasher(algorithm);
  std::optional<Hasher> fast;
  if (fast_hash != nullptr) fast.emplace(HashAlgorithm::kXxh3_128);
  for (uint64_t pos = begin; pos < end; ++i) {
    const ManifestFile& f = files[i];
    if (f.offset + f.size <= pos) continue;  // empty file, or one that ended exactly at pos
    const uint64_t take = std::min(end, f.offset + f.size) - pos;
    WC_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, windows.Bytes(i, pos, take));
    UpdateStreaming(hasher, algorithm, bytes, fast ? &*fast : nullptr);
    pos += take;
  }
  if (fast_hash != nullptr) *fast_hash = fast->Finish();
  return hasher.Finish();
}

Status CheckLayout(const std::vector<ManifestFile>& files, uint64_t chunk_size) {
  if (chunk_size < kMinChunkSize || chunk_size > kMaxChunkSize) {
    return InvalidArgument("chunk size " + std::to_string(chunk_size) + " is outside [" +
                           std::to_string(kMinChunkSize) + ", " + std::to_string(kMaxChunkSize) +
                           "]");
  }
  uint64_t expected = 0;
  for (const ManifestFile& f : files) {
    if (f.offset != expected) {
      return InvalidArgument(f.path + ": offset " + std::to_string(f.offset) + ", expected " +
                             std::to_string(expected) + " (files must be contiguous)");
    }
    if (f.size > UINT64_MAX - expected) return InvalidArgument(f.path + ": size overflows");
    expected += f.size;
  }
  const uint64_t chunks = expected / chunk_size + (expected % chunk_size != 0 ? 1 : 0);
  if (chunks > kMaxManifestChunks) {
    return OutOfRange(std::to_string(expected) + " bytes in chunks of " +
                      std::to_string(chunk_size) + " make " + std::to_string(chunks) +
                      " chunks, over the limit of " + std::to_string(kMaxManifestChunks));
  }
  return Status::Ok();
}

}  // namespace

void UpdateStreaming(Hasher& hasher, HashAlgorithm algorithm, std::span<const uint8_t> bytes,
                     Hasher* fast) {
  if (algorithm != HashAlgorithm::kSha256) {
    hasher.Update(bytes);
    if (fast != nullptr) fast->Update(bytes);
    return;
  }
  // Each 4 KiB piece is hashed while the next one's cache lines are on their way; hardware
  // prefetch alone leaves SHA-NI waiting on memory. 4 KiB one piece ahead measured best among
  // 4/8/16 KiB and one/two/four pieces ahead (docs/bench/manifest.md).
  constexpr size_t kPiece = 4 << 10;
  constexpr size_t kLine = 64;
  for (size_t pos = 0; pos < bytes.size(); pos += kPiece) {
    const size_t n = std::min(kPiece, bytes.size() - pos);
    const size_t next_end = std::min(bytes.size(), pos + n + kPiece);
    for (size_t q = pos + n; q < next_end; q += kLine) __builtin_prefetch(bytes.data() + q);
    hasher.Update(bytes.subspan(pos, n));
    if (fast != nullptr) fast->Update(bytes.subspan(pos, n));  // from L1: a tenth of the SHA-256
  }
}

Result<std::vector<Digest>> HashChunksInMemory(std::span<const uint8_t> bytes, uint64_t chunk_size,
                                               HashAlgorithm algorithm, size_t threads,
                                               std::vector<Digest>* fast_hashes) {
  if (chunk_size < kMinChunkSize || chunk_size > kMaxChunkSize) {
    return InvalidArgument("chunk size " + std::to_string(chunk_size) + " is outside [" +
                           std::to_string(kMinChunkSize) + ", " + std::to_string(kMaxChunkSize) +
                           "]");
  }
  const uint64_t total = bytes.size();
  const size_t count = static_cast<size_t>(total / chunk_size + (total % chunk_size != 0 ? 1 : 0));
  std::vector<Digest> out(count);
  if (fast_hashes != nullptr) fast_hashes->assign(count, Digest{});
  const size_t per_run = static_cast<size_t>(std::max<uint64_t>(1, kRunBytes / chunk_size));
  const size_t runs = (count + per_run - 1) / per_run;
  ThreadPool pool(threads);
  pool.ParallelFor(runs, [&](size_t run) {
    const size_t last = std::min(count, (run + 1) * per_run);
    for (size_t index = run * per_run; index < last; ++index) {
      const uint64_t at = index * chunk_size;
      const std::span<const uint8_t> chunk = bytes.subspan(at, std::min(chunk_size, total - at));
      Hasher hasher(algorithm);
      std::optional<Hasher> fast;
      if (fast_hashes != nullptr) fast.emplace(HashAlgorithm::kXxh3_128);
      UpdateStreaming(hasher, algorithm, chunk, fast ? &*fast : nullptr);
      out[index] = hasher.Finish();
      if (fast_hashes != nullptr) (*fast_hashes)[index] = fast->Finish();
    }
  });
  return out;
}

Result<std::vector<Digest>> HashChunks(const std::filesystem::path& root,
                                       const std::vector<ManifestFile>& files, uint64_t chunk_size,
                                       HashAlgorithm algorithm, size_t threads,
                                       std::vector<Digest>* fast_hashes) {
  WC_RETURN_IF_ERROR(CheckLayout(files, chunk_size));
  const uint64_t total = files.empty() ? 0 : files.back().offset + files.back().size;
  const size_t count = static_cast<size_t>(total / chunk_size + (total % chunk_size != 0 ? 1 : 0));
  std::vector<Digest> out(count);
  if (fast_hashes != nullptr) fast_hashes->assign(count, Digest{});
  if (count == 0) return out;

  std::atomic<bool> failed{false};
  std::mutex error_mu;
  Status error;
  const size_t per_run = static_cast<size_t>(std::max<uint64_t>(1, kRunBytes / chunk_size));
  const size_t runs = (count + per_run - 1) / per_run;
  ThreadPool pool(threads);
  pool.ParallelFor(runs, [&](size_t run) {
    const size_t first = run * per_run;
    const size_t last = std::min(count, first + per_run);
    RunWindows windows(root, files, std::min<uint64_t>(total, last * chunk_size));
    for (size_t index = first; index < last; ++index) {
      if (failed.load(std::memory_order_relaxed)) return;
      Result<Digest> digest =
          HashOneChunk(files, total, chunk_size, algorithm, index, windows,
                       fast_hashes != nullptr ? &(*fast_hashes)[index] : nullptr);
      if (digest.ok()) {
        out[index] = *digest;
        continue;
      }
      std::lock_guard<std::mutex> lock(error_mu);
      if (!failed.exchange(true)) {
        error = digest.status().WithContext("chunk " + std::to_string(index));
      }
      return;
    }
  });
  if (failed.load()) return error;
  return out;
}

Result<Manifest> BuildManifestLayout(const Checkpoint& checkpoint, std::string channel,
                                     Version version, const BuildOptions& options) {
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  if (version.value() == 0) return InvalidArgument("version must be 1 or more");
  if (options.algorithm != HashAlgorithm::kSha256 &&
      options.algorithm != HashAlgorithm::kXxh3_128) {
    return InvalidArgument("unknown hash algorithm");
  }
  if (checkpoint.files.empty()) {
    return InvalidArgument(checkpoint.root.string() + ": the checkpoint has no files");
  }
  if (checkpoint.files.size() > kMaxManifestFiles) {
    return OutOfRange(checkpoint.root.string() + ": " + std::to_string(checkpoint.files.size()) +
                      " files, over the limit of " + std::to_string(kMaxManifestFiles));
  }

  Manifest m;
  m.channel = std::move(channel);
  m.version = version;
  m.hash_algorithm = options.algorithm;
  m.chunk_size = options.chunk_size;

  // Relative-path order (bytewise), whatever order the checkpoint came in.
  std::vector<const CheckpointFile*> order;
  order.reserve(checkpoint.files.size());
  for (const CheckpointFile& f : checkpoint.files) order.push_back(&f);
  std::sort(order.begin(), order.end(), [](const CheckpointFile* a, const CheckpointFile* b) {
    return a->relative_path < b->relative_path;
  });

  uint64_t offset = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const CheckpointFile& f = *order[i];
    m.files.push_back({f.relative_path, f.size, offset});
    if (f.is_safetensors) {
      for (const TensorInfo& t : f.header.tensors) {
        // Translate to the flat byte space; the header was validated against the file size, but
        // re-check so a hand-built Checkpoint cannot put a tensor outside its file.
        const uint64_t start = f.header.data_offset() + t.begin;
        if (t.end < t.begin || t.begin > f.size || start > f.size ||
            t.end - t.begin > f.size - start) {
          return InvalidArgument(f.relative_path + ": tensor " + t.name + " lies outside the file");
        }
        m.tensors.push_back(
            {t.name, t.dtype, t.shape, static_cast<uint32_t>(i), offset + start, t.end - t.begin});
      }
    }
    if (f.size > UINT64_MAX - offset) return InvalidArgument(f.relative_path + ": size overflows");
    offset += f.size;
  }
  std::stable_sort(
      m.tensors.begin(), m.tensors.end(),
      [](const ManifestTensor& a, const ManifestTensor& b) { return a.offset < b.offset; });

  if (m.chunk_size == kAutoChunkSize) m.chunk_size = ChooseChunkSize(offset);
  WC_RETURN_IF_ERROR(CheckLayout(m.files, m.chunk_size));
  // Placeholders, so that chunk_count() and ChunkRange work before the hashes are known.
  const uint64_t total = offset;
  m.chunk_hashes.assign(total / m.chunk_size + (total % m.chunk_size != 0 ? 1 : 0), Digest{});
  return m;
}

Status FinishManifest(Manifest& manifest, std::vector<Digest> chunk_hashes) {
  if (chunk_hashes.size() != manifest.chunk_count()) {
    return InvalidArgument(std::to_string(chunk_hashes.size()) +
                           " chunk hashes for a manifest of " +
                           std::to_string(manifest.chunk_count()) + " chunks");
  }
  manifest.chunk_hashes = std::move(chunk_hashes);
  manifest.root = ComputeRoot(manifest);
  return ValidateManifest(manifest);
}

Status FinishManifest(Manifest& manifest, std::vector<Digest> chunk_hashes,
                      std::vector<Digest> fast_hashes) {
  if (!fast_hashes.empty() && fast_hashes.size() != chunk_hashes.size()) {
    return InvalidArgument(std::to_string(fast_hashes.size()) + " fast hashes for " +
                           std::to_string(chunk_hashes.size()) + " chunk hashes");
  }
  manifest.fast_hashes = std::move(fast_hashes);
  return FinishManifest(manifest, std::move(chunk_hashes));
}

Result<Manifest> BuildManifest(const Checkpoint& checkpoint, std::string channel, Version version,
                               const BuildOptions& options) {
  WC_ASSIGN_OR_RETURN(Manifest m,
                      BuildManifestLayout(checkpoint, std::move(channel), version, options));
  std::vector<Digest> fast;
  WC_ASSIGN_OR_RETURN(std::vector<Digest> hashes,
                      HashChunks(checkpoint.root, m.files, m.chunk_size, m.hash_algorithm,
                                 options.threads, WantsFastHashes(options) ? &fast : nullptr));
  if (Status s = FinishManifest(m, std::move(hashes), std::move(fast)); !s.ok()) {
    return InvalidArgument(checkpoint.root.string() + ": " + s.message());
  }
  return m;
}

}  // namespace weightcast
