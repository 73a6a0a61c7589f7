#include "store/staging.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <system_error>

#include "hash/digest.h"
#include "manifest/builder.h"
#include "util/file.h"

namespace weightcast::store {
namespace {

// Sizes the file without writing zeros: fallocate reserves the blocks (so the disk cannot run out
// halfway through a transfer); filesystems without it (tmpfs on old kernels) get a sparse file.
Status Preallocate(int fd, uint64_t size, const std::filesystem::path& path) {
  if (size == 0) return Status::Ok();
  if (::fallocate(fd, 0, 0, static_cast<off_t>(size)) == 0) return Status::Ok();
  int err = errno;
  if (err == ENOSPC) return ResourceExhausted("preallocating " + path.string() + ": disk full");
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    return ErrnoStatus("ftruncate(" + path.string() + ")", errno);
  }
  return Status::Ok();
}

Status CopyOrLink(const std::filesystem::path& from, const std::filesystem::path& to,
                  ImportMode mode) {
  std::error_code ec;
  if (mode == ImportMode::kHardlink) {
    std::filesystem::create_hard_link(from, to, ec);
    if (ec) return IoError("link(" + from.string() + " -> " + to.string() + "): " + ec.message());
    return Status::Ok();
  }
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::none, ec);
  if (ec) return IoError("copy(" + from.string() + " -> " + to.string() + "): " + ec.message());
  return Status::Ok();
}

// Every directory below `files_dir` that holds a file of the manifest, deepest first.
std::vector<std::filesystem::path> DirsOf(const std::filesystem::path& files_dir,
                                          const Manifest& manifest) {
  std::set<std::string> dirs;
  for (const ManifestFile& f : manifest.files) {
    for (size_t slash = f.path.find('/'); slash != std::string::npos;
         slash = f.path.find('/', slash + 1)) {
      dirs.insert(f.path.substr(0, slash));
    }
  }
  std::vector<std::filesystem::path> out;
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) out.push_back(files_dir / *it);
  out.push_back(files_dir);
  return out;
}

}  // namespace

StagingState::~StagingState() {
  // The last handle is gone: persist what was verified so a later ResumeStaging keeps it. A crash
  // skips this, which costs refetching the unflushed batch, nothing more.
  {
    std::shared_lock io(io_mu);
    if (!closed) FlushPending().IgnoreError();
  }
  Close();
}

void StagingState::Close() {
  std::unique_lock io(io_mu);
  std::lock_guard rec(rec_mu);
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
  fds.clear();
  record.Close();
  live.Close();
  closed = true;
  std::lock_guard lock(view_mu);
  view.reset();  // held views keep their mappings; the store's reference goes
}

Status StagingState::CheckOpen() const {
  if (closed) {
    return FailedPrecondition("staging version " + channel + "/" + VersionName(manifest.version) +
                              " was committed or aborted");
  }
  return Status::Ok();
}

Status StagingState::OpenFiles(const std::filesystem::path& files_dir, bool create,
                               bool preallocate) {
  dirty = std::make_unique<std::atomic<bool>[]>(manifest.files.size());
  write_mu = std::make_unique<std::mutex[]>(manifest.files.size());
  fds.assign(manifest.files.size(), -1);
  for (size_t i = 0; i < manifest.files.size(); ++i) {
    const ManifestFile& f = manifest.files[i];
    std::filesystem::path path = files_dir / f.path;
    if (create) {
      std::error_code ec;
      std::filesystem::create_directories(path.parent_path(), ec);
      if (ec) return IoError("mkdir(" + path.parent_path().string() + "): " + ec.message());
    }
    int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
    int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) return ErrnoStatus("open(" + path.string() + ")", errno);
    fds[i] = fd;
    if (create && preallocate) {
      WC_RETURN_IF_ERROR(Preallocate(fd, f.size, path));
    } else if (create) {
      if (::ftruncate(fd, static_cast<off_t>(f.size)) != 0) {
        return ErrnoStatus("ftruncate(" + path.string() + ")", errno);
      }
    } else {
      struct stat st {};
      if (::fstat(fd, &st) != 0) return ErrnoStatus("stat(" + path.string() + ")", errno);
      if (static_cast<uint64_t>(st.st_size) != f.size) {
        return Corrupt(path.string() + ": " + std::to_string(st.st_size) +
                       " bytes, the manifest says " + std::to_string(f.size));
      }
    }
  }
  return Status::Ok();
}

Result<std::shared_ptr<StagingState>> StagingState::Create(const ChannelLayout& layout,
                                                           std::string channel,
                                                           const Manifest& manifest, uint32_t batch,
                                                           const std::filesystem::path* import_from,
                                                           ImportMode mode, bool preallocate) {
  Version v = manifest.version;
  std::filesystem::path partial = layout.staging_partial(v);
  WC_RETURN_IF_ERROR(RemoveAll(partial));  // left by an earlier failure in this process
  WC_RETURN_IF_ERROR(MakeDirDurable(partial));
  auto state = std::make_shared<StagingState>(layout, std::move(channel), manifest, batch);
  auto build = [&]() -> Status {
    std::filesystem::path files_dir = partial / "files";
    WC_RETURN_IF_ERROR(MakeDirDurable(files_dir));
    if (import_from != nullptr) {
      for (const ManifestFile& f : manifest.files) {
        std::filesystem::path to = files_dir / f.path;
        std::error_code ec;
        std::filesystem::create_directories(to.parent_path(), ec);
        if (ec) return IoError("mkdir(" + to.parent_path().string() + "): " + ec.message());
        WC_RETURN_IF_ERROR(CopyOrLink(*import_from / f.path, to, mode));
      }
    }
    WC_RETURN_IF_ERROR(state->OpenFiles(files_dir, import_from == nullptr, preallocate));
    // Directory entries of the files must be durable before the rename publishes the staging.
    for (const auto& dir : DirsOf(files_dir, manifest)) WC_RETURN_IF_ERROR(FsyncPath(dir));
    WC_RETURN_IF_ERROR(WriteFileAtomic(partial / "manifest.wcm", SerializeManifest(manifest)));
    WC_ASSIGN_OR_RETURN(state->record, ChunkRecord::Create(partial / "chunks.log", manifest.root));
    WC_ASSIGN_OR_RETURN(state->live,
                        LiveRecord::Create(partial / "verified.live", manifest.root, {}));
    return FsyncPath(partial);
  };
  Status st = build();
  if (st.ok()) st = RenameDurable(partial, layout.staging_dir(v));
  if (!st.ok()) {
    state->Close();
    RemoveAll(partial).IgnoreError();
    return st;
  }
  state->verified.assign(manifest.chunk_count(), false);
  return state;
}

Result<std::shared_ptr<StagingState>> StagingState::Load(const ChannelLayout& layout,
                                                         std::string channel, Version version,
                                                         uint32_t batch) {
  std::filesystem::path dir = layout.staging_dir(version);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return NotFound("no staging version " + channel + "/" + VersionName(version));
  }
  WC_ASSIGN_OR_RETURN(Manifest manifest, ReadManifestFile(layout.staging_manifest(version)));
  if (manifest.version != version || manifest.channel != channel) {
    return Corrupt(layout.staging_manifest(version).string() + ": manifest is for " +
                   manifest.channel + "/" + VersionName(manifest.version));
  }
  WC_RETURN_IF_ERROR(ValidateManifestPaths(manifest));
  auto state = std::make_shared<StagingState>(layout, std::move(channel), manifest, batch);
  WC_RETURN_IF_ERROR(state->OpenFiles(layout.staging_files(version), /*create=*/false));
  state->verified.assign(manifest.chunk_count(), false);
  RecordRecovery recovery;
  std::filesystem::path record_path = layout.staging_record(version);
  if (::stat(record_path.c_str(), &st) != 0) {
    // Only damage from outside removes the record; start it over.
    WC_ASSIGN_OR_RETURN(state->record, ChunkRecord::Create(record_path, manifest.root));
  } else {
    WC_ASSIGN_OR_RETURN(state->record,
                        ChunkRecord::Open(record_path, manifest.root, state->verified, recovery));
  }
  state->verified_count = recovery.chunks;
  state->discarded_bytes = recovery.discarded_bytes;
  WC_ASSIGN_OR_RETURN(state->live, LiveRecord::Create(layout.staging_live(version), manifest.root,
                                                      state->VerifiedChunks()));
  return state;
}

Status StagingState::WriteChunk(ChunkIndex index, std::span<const uint8_t> bytes) {
  if (index.value() < manifest.chunk_count() && bytes.size() != manifest.ChunkRange(index).size) {
    return InvalidArgument("chunk " + std::to_string(index.value()) + " has " +
                           std::to_string(manifest.ChunkRange(index).size) + " bytes, got " +
                           std::to_string(bytes.size()));
  }
  return WriteChunkPart(index, 0, bytes);
}

Status StagingState::WriteChunkPart(ChunkIndex index, uint64_t offset,
                                    std::span<const uint8_t> bytes) {
  std::shared_lock io(io_mu);
  WC_RETURN_IF_ERROR(CheckOpen());
  if (index.value() >= manifest.chunk_count()) {
    return OutOfRange("chunk " + std::to_string(index.value()) + " is beyond the " +
                      std::to_string(manifest.chunk_count()) + " chunks of the version");
  }
  const ByteRange chunk = manifest.ChunkRange(index);
  if (offset > chunk.size || bytes.size() > chunk.size - offset) {
    return InvalidArgument("bytes [" + std::to_string(offset) + ", " +
                           std::to_string(offset + bytes.size()) + ") lie outside chunk " +
                           std::to_string(index.value()) + " of " + std::to_string(chunk.size) +
                           " bytes");
  }
  const ByteRange range{chunk.offset + offset, bytes.size()};
  if (range.size == 0) return Status::Ok();
  return ForEachSegment(
      manifest.files, range, [&](size_t file, uint64_t at, uint64_t len, uint64_t from) -> Status {
        const uint8_t* p = bytes.data() + from;
        uint64_t done = 0;
        std::lock_guard one_writer(write_mu[file]);
        while (done < len) {
          ssize_t n = ::pwrite(fds[file], p + done, len - done, static_cast<off_t>(at + done));
          if (n < 0) {
            if (errno == EINTR) continue;
            return ErrnoStatus("write(" + manifest.files[file].path + ")", errno);
          }
          done += static_cast<uint64_t>(n);
        }
        dirty[file].store(true, std::memory_order_release);
        return Status::Ok();
      });
}

Status StagingState::MarkVerified(ChunkIndex index) {
  std::shared_lock io(io_mu);
  WC_RETURN_IF_ERROR(CheckOpen());
  if (index.value() >= manifest.chunk_count()) {
    return OutOfRange("chunk " + std::to_string(index.value()) + " is beyond the " +
                      std::to_string(manifest.chunk_count()) + " chunks of the version");
  }
  {
    std::lock_guard rec(rec_mu);
    if (verified[index.value()]) return Status::Ok();
    verified[index.value()] = true;
    ++verified_count;
    pending.push_back(index);
    live.Append(index);
    if (pending.size() < record_batch && verified_count < manifest.chunk_count()) {
      return Status::Ok();
    }
  }
  return FlushPending();
}

Status StagingState::FlushPending() {
  // flush_mu serializes whole flushes: a flush that finds a file clean must not append its records
  // while another flush is still inside that file's fdatasync. rec_mu is held only to take the
  // queue, so HasChunk never waits on a disk.
  std::lock_guard flush(flush_mu);
  std::vector<ChunkIndex> batch;
  {
    std::lock_guard rec(rec_mu);
    batch.swap(pending);
  }
  if (batch.empty()) return Status::Ok();
  auto requeue = [&](Status st) {
    std::lock_guard rec(rec_mu);
    pending.insert(pending.end(), batch.begin(), batch.end());
    return st;
  };
  // Data first: a record must never reach the disk before the bytes it vouches for.
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!dirty[i].exchange(false, std::memory_order_acq_rel)) continue;
    if (::fdatasync(fds[i]) != 0) {
      dirty[i].store(true);
      return requeue(ErrnoStatus("fdatasync(" + manifest.files[i].path + ")", errno));
    }
  }
  Status st = record.Append(batch);
  if (!st.ok()) return requeue(st);
  return Status::Ok();
}

Status StagingState::Flush() {
  std::shared_lock io(io_mu);
  WC_RETURN_IF_ERROR(CheckOpen());
  return FlushPending();
}

bool StagingState::HasChunk(ChunkIndex index) const {
  std::lock_guard rec(rec_mu);
  return index.value() < verified.size() && verified[index.value()];
}

Result<std::shared_ptr<const MappedVersion>> StagingState::View(
    const std::shared_ptr<const StagingState>& self) {
  std::shared_lock io(self->io_mu);
  WC_RETURN_IF_ERROR(self->CheckOpen());
  std::lock_guard lock(self->view_mu);
  if (self->view == nullptr) {
    WC_ASSIGN_OR_RETURN(self->view, MappedVersion::MapStaging(self));
  }
  return self->view;
}

std::vector<ChunkIndex> StagingState::VerifiedChunks() const {
  std::lock_guard rec(rec_mu);
  std::vector<ChunkIndex> out;
  for (uint32_t i = 0; i < verified.size(); ++i) {
    if (verified[i]) out.emplace_back(i);
  }
  return out;
}

Status StagingState::SealForCommit(const std::vector<ChunkIndex>* required) {
  std::unique_lock io(io_mu);
  WC_RETURN_IF_ERROR(CheckOpen());
  WC_RETURN_IF_ERROR(FlushPending());
  std::unique_lock rec(rec_mu);
  if (required != nullptr) {
    const auto missing = std::count_if(required->begin(), required->end(), [&](ChunkIndex c) {
      return c.value() >= verified.size() || !verified[c.value()];
    });
    if (missing != 0) {
      return FailedPrecondition("cannot commit " + channel + "/" + VersionName(manifest.version) +
                                " partially: " + std::to_string(missing) + " of the " +
                                std::to_string(required->size()) +
                                " chunks of its tensors are not verified");
    }
  } else if (verified_count != manifest.chunk_count()) {
    return FailedPrecondition("cannot commit " + channel + "/" + VersionName(manifest.version) +
                              ": " + std::to_string(manifest.chunk_count() - verified_count) +
                              " of " + std::to_string(manifest.chunk_count()) +
                              " chunks are not verified");
  }
  for (size_t i = 0; i < fds.size(); ++i) {
    if (::fsync(fds[i]) != 0) return ErrnoStatus("fsync(" + manifest.files[i].path + ")", errno);
  }
  for (const auto& dir : DirsOf(layout.staging_files(manifest.version), manifest)) {
    WC_RETURN_IF_ERROR(FsyncPath(dir));
  }
  return Status::Ok();
}

}  // namespace weightcast::store
