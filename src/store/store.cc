#include "store/store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <system_error>
#include <utility>

#include "manifest/builder.h"
#include "store/abort_log.h"
#include "store/store_impl.h"
#include "util/file.h"

namespace weightcast {

using store::StagingState;
using store::StoreImpl;

namespace store {
namespace {

bool Exists(const std::filesystem::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

std::string Name(std::string_view channel, Version v) {
  return std::string(channel) + "/" + VersionName(v);
}

}  // namespace

StoreImpl::~StoreImpl() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Result<std::unique_ptr<StoreImpl>> StoreImpl::Open(const std::filesystem::path& root,
                                                   const StoreOptions& options) {
  if (root.empty()) return InvalidArgument("store root is empty");
  if (options.keep_versions == 0) {
    return InvalidArgument("keep_versions must be at least 1 (the current version)");
  }
  int lock_fd = -1;
  if (options.read_only) {
    struct stat st {};
    if (::stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return NotFound("store root " + root.string() + " does not exist");
    }
  } else {
    std::error_code ec;
    // Only a new or empty directory becomes a store: a mistyped path to a directory of other
    // files (a checkpoint, a home directory) must not be filled with a store's layout.
    const auto status = std::filesystem::status(root, ec);
    if (std::filesystem::exists(status)) {
      if (!std::filesystem::is_directory(status)) {
        return FailedPrecondition(root.string() +
                                  " is not a weightcast store (it is a file, not a directory)");
      }
      if (!std::filesystem::exists(root / ".lock", ec) && !std::filesystem::is_empty(root, ec)) {
        return FailedPrecondition(root.string() +
                                  " is not a weightcast store (a directory with files but no "
                                  ".lock): give a new or empty directory, or an existing store");
      }
    }
    std::filesystem::create_directories(root, ec);
    if (ec) return IoError("mkdir(" + root.string() + "): " + ec.message());
    std::filesystem::path lock_path = root / ".lock";
    lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0) return ErrnoStatus("open(" + lock_path.string() + ")", errno);
    if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      ::close(lock_fd);
      if (err == EWOULDBLOCK) {
        return Unavailable("store " + root.string() + " is in use by another process (" +
                           lock_path.string() + " is locked)");
      }
      return ErrnoStatus("flock(" + lock_path.string() + ")", err);
    }
  }
  auto impl = std::make_unique<StoreImpl>(root, options, lock_fd);
  if (!options.read_only) {
    WC_ASSIGN_OR_RETURN(std::vector<std::string> channels, impl->Channels());
    for (const std::string& channel : channels) {
      WC_RETURN_IF_ERROR(
          impl->RecoverChannel(channel).WithContext("recovering channel " + channel));
    }
  }
  return impl;
}

Status StoreImpl::CheckWritable() const {
  if (options_.read_only) {
    return FailedPrecondition("store " + root_.string() + " is open read-only");
  }
  return Status::Ok();
}

Result<std::vector<std::string>> StoreImpl::Channels() const {
  WC_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(root_));
  std::vector<std::string> out;
  for (std::string& name : names) {
    struct stat st {};
    if (!ValidateChannelName(name).ok()) continue;
    if (::stat((root_ / name).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    out.push_back(std::move(name));
  }
  return out;
}

Result<StagedVersion> StoreImpl::BeginStaging(std::string_view channel, const Manifest& manifest,
                                              StagingOptions options) {
  WC_RETURN_IF_ERROR(CheckNewVersion(channel, manifest));
  std::lock_guard lock(mu_);
  WC_ASSIGN_OR_RETURN(auto state,
                      CreateStagingLocked(channel, manifest, nullptr, ImportMode::kCopy, options));
  return StagedVersion(state);
}

Status StoreImpl::CheckNewVersion(std::string_view channel, const Manifest& manifest) const {
  WC_RETURN_IF_ERROR(CheckWritable());
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  if (manifest.channel != channel) {
    return InvalidArgument("manifest is for channel '" + manifest.channel + "', not '" +
                           std::string(channel) + "'");
  }
  if (manifest.version.value() == 0) return InvalidArgument("manifest has version 0");
  WC_RETURN_IF_ERROR(ValidateManifest(manifest));
  return ValidateManifestPaths(manifest);
}

Result<std::shared_ptr<StagingState>> StoreImpl::CreateStagingLocked(
    std::string_view channel, const Manifest& manifest, const std::filesystem::path* source,
    ImportMode mode, StagingOptions options) {
  ChannelLayout layout = Layout(channel);
  Version v = manifest.version;
  if (Exists(layout.version_dir(v))) {
    return AlreadyExists("version " + Name(channel, v) + " is already committed");
  }
  if (Exists(layout.staging_dir(v))) {
    return AlreadyExists("version " + Name(channel, v) +
                         " is already staging; resume it or abort it");
  }
  for (const auto& dir :
       {layout.dir(), layout.versions_dir(), layout.manifests_dir(), layout.staging_root()}) {
    WC_RETURN_IF_ERROR(MakeDirDurable(dir));
  }
  WC_ASSIGN_OR_RETURN(
      auto state, StagingState::Create(layout, std::string(channel), manifest,
                                       options_.record_batch, source, mode, options.preallocate));
  staging_[{std::string(channel), v.value()}] = state;
  return state;
}

Result<std::shared_ptr<StagingState>> StoreImpl::StagingLocked(std::string_view channel,
                                                               Version version) {
  Key key{std::string(channel), version.value()};
  auto it = staging_.find(key);
  if (it != staging_.end()) {
    if (auto live = it->second.lock()) return live;
    staging_.erase(it);
  }
  WC_ASSIGN_OR_RETURN(auto state, StagingState::Load(Layout(channel), std::string(channel), version,
                                                     options_.record_batch));
  staging_[key] = state;
  return state;
}

Result<StagedVersion> StoreImpl::ResumeStaging(std::string_view channel, Version version) {
  WC_RETURN_IF_ERROR(CheckWritable());
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  std::lock_guard lock(mu_);
  WC_ASSIGN_OR_RETURN(auto state, StagingLocked(channel, version));
  return StagedVersion(state);
}

Result<std::vector<Version>> StoreImpl::ListStaging(std::string_view channel) const {
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  std::lock_guard lock(mu_);
  WC_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(Layout(channel).staging_root()));
  std::vector<Version> out;
  for (const std::string& name : names) {
    if (auto v = ParseVersionName(name)) out.push_back(*v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status StoreImpl::SwitchCurrentLocked(const ChannelLayout& layout, Version version) {
  return SwitchSymlink(layout.current_link(), layout.current_tmp(),
                       ChannelLayout::CurrentTarget(version));
}

Status StoreImpl::Commit(std::string_view channel, Version version) {
  WC_RETURN_IF_ERROR(CheckWritable());
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  std::lock_guard lock(mu_);
  return CommitLocked(channel, version);
}

// The commit protocol. Each step is atomic and durable before the next starts; the crash cases
// are argued in docs/store_layout.md. A step that fails before the commit point leaves the
// staging open and in the table, so the same Commit can be retried once its cause is gone (a full
// disk freed); one that fails after it is finished by the next Commit, or by Open.
Status StoreImpl::CommitPartial(std::string_view channel, Version version,
                                const PartialVersion& wanted) {
  WC_RETURN_IF_ERROR(CheckWritable());
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  std::lock_guard lock(mu_);
  return CommitLocked(channel, version, &wanted);
}

Status StoreImpl::CommitLocked(std::string_view channel, Version v, const PartialVersion* partial) {
  ChannelLayout layout = Layout(channel);
  const Key key{std::string(channel), v.value()};
  if (Exists(layout.version_dir(v)) && Exists(layout.staging_dir(v)) &&
      !Exists(layout.staging_files(v))) {
    // Past its commit point already (an earlier Commit failed after step 3).
    if (auto it = staging_.find(key); it != staging_.end()) {
      if (auto live = it->second.lock()) live->Close();
      staging_.erase(it);
    }
    return FinishCommitLocked(layout, channel, v);
  }
  WC_ASSIGN_OR_RETURN(auto state, StagingLocked(channel, v));
  // 1. Every chunk verified (of a partial version: every chunk of its tensors), every byte and
  //    directory entry of the files durable.
  WC_RETURN_IF_ERROR(state->SealForCommit(partial != nullptr ? &partial->chunks : nullptr));
  // 1b. The partial record among the files, durable before the commit point, so versions/<v>
  //     never exists without it; a whole commit drops one left by an earlier partial attempt.
  const std::filesystem::path record = layout.staging_files(v) / std::string(kPartialFileName);
  const bool listed = std::any_of(state->manifest.files.begin(), state->manifest.files.end(),
                                  [](const ManifestFile& f) { return f.path == kPartialFileName; });
  if (partial != nullptr) {
    if (listed) {
      return FailedPrecondition("cannot commit " + Name(channel, v) + " partially: it has a file " +
                                std::string(kPartialFileName));
    }
    PartialVersion held = *partial;
    held.chunks = state->VerifiedChunks();
    WC_RETURN_IF_ERROR(WriteFileAtomic(record, SerializePartial(held)));
  } else if (!listed && Exists(record)) {
    WC_RETURN_IF_ERROR(RemoveAll(record));
    WC_RETURN_IF_ERROR(FsyncPath(layout.staging_files(v)));
  }
  // 2. The manifest beside the version. A crash after this leaves an orphan manifest (no
  //    versions/<v>) that Open removes; the staging is intact and can be committed again.
  WC_RETURN_IF_ERROR(WriteFileAtomic(layout.manifest_file(v), SerializeManifest(state->manifest)));
  // 3. The commit point: the files become versions/<v>. From here Open rolls the commit forward,
  //    recognising staging/<v> without its files/ directory.
  WC_RETURN_IF_ERROR(RenameDurable(layout.staging_files(v), layout.version_dir(v)));
  state->Close();
  staging_.erase(key);
  return FinishCommitLocked(layout, channel, v);
}

// Steps 4 and 5 of the commit protocol, for a version past its commit point.
Status StoreImpl::FinishCommitLocked(const ChannelLayout& layout, std::string_view channel,
                                     Version v) {
  // 4. `current` moves in one rename.
  WC_RETURN_IF_ERROR(SwitchCurrentLocked(layout, v));
  // 5. Staging leftovers (manifest copy, record) go, renamed away first: a numbered staging
  //    without files/ must exist only between steps 3 and 5, or a later Open would roll this
  //    commit forward again over a rollback made in between.
  std::filesystem::path done = layout.staging_root() / (".done-" + VersionName(v));
  WC_RETURN_IF_ERROR(RemoveAll(done));
  WC_RETURN_IF_ERROR(RenameDurable(layout.staging_dir(v), done));
  WC_RETURN_IF_ERROR(RemoveAll(done));
  return CollectLocked(channel).status();
}

Status StoreImpl::Abort(std::string_view channel, Version version, std::string_view reason) {
  WC_RETURN_IF_ERROR(CheckWritable());
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  std::lock_guard lock(mu_);
  ChannelLayout layout = Layout(channel);
  Key key{std::string(channel), version.value()};
  auto it = staging_.find(key);
  if (it != staging_.end()) {
    if (auto live = it->second.lock()) live->Close();
    staging_.erase(it);
  }
  if (!Exists(layout.staging_dir(version))) {
    return NotFound("no staging version " + Name(channel, version));
  }
  // Advisory, and before the staging goes: a streaming reader that sees it gone finds why.
  RecordAbort(layout, version, reason).IgnoreError();
  // Renamed to a hidden name first so that a crash halfway through the removal never leaves a
  // staging/<v> that looks resumable but lacks files.
  std::filesystem::path doomed = layout.staging_root() / (".aborted-" + VersionName(version));
  WC_RETURN_IF_ERROR(RemoveAll(doomed));
  WC_RETURN_IF_ERROR(RenameDurable(layout.staging_dir(version), doomed));
  return RemoveAll(doomed);
}

Status StoreImpl::CheckSizesLocked(const ChannelLayout& layout, const Manifest& manifest) const {
  std::filesystem::path dir = layout.version_dir(manifest.version);
  for (const ManifestFile& f : manifest.files) {
    std::filesystem::path path = dir / f.path;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("stat(" + path.string() + ")", errno);
    if (static_cast<uint64_t>(st.st_size) != f.size) {
      return Corrupt(path.string() + ": " + std::to_string(st.st_size) +
                     " bytes, the manifest says " + std::to_string(f.size));
    }
  }
  return Status::Ok();
}

Result<Version> StoreImpl::Rollback(std::string_view channel, std::optional<Version> to) {
  WC_RETURN_IF_ERROR(CheckWritable());
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  std::lock_guard lock(mu_);
  ChannelLayout layout = Layout(channel);
  WC_ASSIGN_OR_RETURN(std::vector<Version> committed, CommittedLocked(layout));
  Version target;
  if (to.has_value()) {
    if (std::find(committed.begin(), committed.end(), *to) == committed.end()) {
      return NotFound("version " + Name(channel, *to) + " is not a kept committed version");
    }
    target = *to;
  } else {
    WC_ASSIGN_OR_RETURN(Version current, CurrentLocked(layout));
    auto it = std::lower_bound(committed.begin(), committed.end(), current);
    if (it == committed.begin()) {
      return NotFound("no kept version of channel " + std::string(channel) + " below " +
                      VersionName(current) + " to roll back to");
    }
    target = *std::prev(it);
  }
  WC_ASSIGN_OR_RETURN(Manifest manifest, ManifestLocked(channel, target));
  WC_RETURN_IF_ERROR(CheckSizesLocked(layout, manifest));
  // A damaged `current` is repaired by a rollback; nothing is then known to be withdrawn.
  const Result<Version> from = CurrentLocked(layout);
  WC_ASSIGN_OR_RETURN(std::set<Version> withdrawn, WithdrawnLocked(layout));
  WC_RETURN_IF_ERROR(SwitchCurrentLocked(layout, target));
  // Going back withdraws every kept version above the target up to the one left; going forward
  // (to a version above the current one) takes the target back.
  for (Version v : committed) {
    if (from.ok() && v > target && v <= *from) withdrawn.insert(v);
  }
  withdrawn.erase(target);
  WC_RETURN_IF_ERROR(WriteWithdrawnLocked(layout, withdrawn));
  return target;
}

Status StoreImpl::ImportDirectory(std::string_view channel, const Manifest& manifest,
                                  const std::filesystem::path& dir, ImportMode mode) {
  WC_RETURN_IF_ERROR(CheckNewVersion(channel, manifest));
  std::lock_guard lock(mu_);
  ChannelLayout layout = Layout(channel);
  Version v = manifest.version;
  WC_ASSIGN_OR_RETURN(auto state, CreateStagingLocked(channel, manifest, &dir, mode));
  auto fail = [&](Status st) { return DropStagingLocked(channel, *state, std::move(st)); };
  // The source may differ from what the manifest describes (edited since it was built): every
  // byte is checked before the version can become current.
  auto hashes = HashChunks(layout.staging_files(v), manifest.files, manifest.chunk_size,
                           manifest.hash_algorithm);
  if (!hashes.ok()) return fail(hashes.status().WithContext("importing " + dir.string()));
  for (uint32_t i = 0; i < manifest.chunk_count(); ++i) {
    if ((*hashes)[i] != manifest.chunk_hashes[i]) {
      return fail(Corrupt("importing " + dir.string() + ": chunk " + std::to_string(i) +
                          " does not match the manifest (files changed since it was built?)"));
    }
  }
  return CommitWholeStagingLocked(channel, *state);
}

Status StoreImpl::DropStagingLocked(std::string_view channel, StagingState& state, Status why) {
  const Version v = state.manifest.version;
  state.Close();
  staging_.erase({std::string(channel), v.value()});
  ChannelLayout layout = Layout(channel);
  std::filesystem::path doomed = layout.staging_root() / (".aborted-" + VersionName(v));
  if (RenameDurable(layout.staging_dir(v), doomed).ok()) RemoveAll(doomed).IgnoreError();
  return why;
}

Status StoreImpl::CommitWholeStagingLocked(std::string_view channel, StagingState& state) {
  for (size_t i = 0; i < state.manifest.files.size(); ++i) state.dirty[i].store(true);
  for (uint32_t i = 0; i < state.manifest.chunk_count(); ++i) {
    Status st = state.MarkVerified(ChunkIndex(i));
    if (!st.ok()) return DropStagingLocked(channel, state, st);
  }
  return CommitLocked(channel, state.manifest.version);
}

Result<ImportedFiles::Stamp> StoreImpl::StampOf(const std::filesystem::path& path,
                                                std::string relative) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return ErrnoStatus("stat(" + path.string() + ")", errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path.string() + ": not a regular file");
  auto ns = [](const timespec& t) { return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; };
  return ImportedFiles::Stamp{std::move(relative), static_cast<uint64_t>(st.st_size),
                              static_cast<uint64_t>(st.st_ino), ns(st.st_mtim), ns(st.st_ctim)};
}

Result<ImportedFiles> StoreImpl::BeginImportLocked(std::string_view channel, Version version,
                                                   ImportMode mode) {
  WC_RETURN_IF_ERROR(CheckWritable());
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  if (version.value() == 0) return InvalidArgument("version must be 1 or more");
  ChannelLayout layout = Layout(channel);
  if (Exists(layout.version_dir(version))) {
    return AlreadyExists("version " + Name(channel, version) + " is already committed");
  }
  if (Exists(layout.staging_dir(version))) {
    return AlreadyExists("version " + Name(channel, version) + " is already staging");
  }
  for (const auto& d : {layout.dir(), layout.staging_root()}) WC_RETURN_IF_ERROR(MakeDirDurable(d));
  // A name Open removes (not a version number): a crash before CommitImport leaves nothing that
  // could be mistaken for a staging version. Not made durable: it is never needed after a crash.
  const std::filesystem::path into = layout.staging_root() / (".import-" + VersionName(version));
  WC_RETURN_IF_ERROR(RemoveAll(into));
  ImportedFiles out;
  out.channel_ = std::string(channel);
  out.version_ = version;
  out.mode_ = mode;
  out.dir_ = into;  // from here its destructor removes what was brought in
  std::error_code ec;
  std::filesystem::create_directories(into, ec);
  if (ec) return IoError("mkdir(" + into.string() + "): " + ec.message());
  return out;
}

Result<ImportedFiles> StoreImpl::StageImportBytes(std::string_view channel, Version version,
                                                  const std::string& path,
                                                  std::span<const uint8_t> bytes,
                                                  const Store::BytesWriter& write) {
  WC_RETURN_IF_ERROR(ValidateRelativePath(path));
  if (path.find('/') != std::string::npos) {
    return InvalidArgument("a file imported from memory lies at the version's top: " + path);
  }
  ImportedFiles out;
  {
    std::lock_guard lock(mu_);
    WC_ASSIGN_OR_RETURN(out, BeginImportLocked(channel, version, ImportMode::kCopy));
  }
  // The write runs outside mu_: the directory is private to this import, and readers of the
  // store (a seeding node) must not wait a model's write out.
  const std::filesystem::path to = out.dir_ / path;
  const int fd = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open(" + to.string() + ")", errno);
  Status written = Status::Ok();
  if (write == nullptr) {
    written = WriteAll(fd, bytes, to.string());
  } else if (::ftruncate(fd, static_cast<off_t>(bytes.size())) != 0) {
    written = ErrnoStatus("ftruncate(" + to.string() + ")", errno);
  } else {
    written = write(fd, to.string());
  }
  ::close(fd);
  WC_RETURN_IF_ERROR(written);
  WC_ASSIGN_OR_RETURN(ImportedFiles::Stamp stamp, StampOf(to, path));
  out.stamps_.push_back(std::move(stamp));
  return out;
}

Result<ImportedFiles> StoreImpl::StageImport(std::string_view channel, Version version,
                                             const std::vector<std::string>& paths,
                                             const std::filesystem::path& dir, ImportMode mode) {
  for (const std::string& p : paths) WC_RETURN_IF_ERROR(ValidateRelativePath(p));
  std::lock_guard lock(mu_);
  WC_ASSIGN_OR_RETURN(ImportedFiles out, BeginImportLocked(channel, version, mode));
  const std::filesystem::path& into = out.dir_;
  std::error_code ec;
  for (const std::string& p : paths) {
    // A symlink in the checkpoint (OpenCheckpoint accepts them) brings in the file it names.
    const std::filesystem::path from = std::filesystem::canonical(dir / p, ec);
    if (ec) return IoError("resolve(" + (dir / p).string() + "): " + ec.message());
    const std::filesystem::path to = into / p;
    std::filesystem::create_directories(to.parent_path(), ec);
    if (ec) return IoError("mkdir(" + to.parent_path().string() + "): " + ec.message());
    // Refuses directories and devices before linking them.
    WC_ASSIGN_OR_RETURN(ImportedFiles::Stamp source, StampOf(from, p));
    if (mode == ImportMode::kHardlink) {
      std::filesystem::create_hard_link(from, to, ec);
      if (ec) return IoError("link(" + from.string() + " -> " + to.string() + "): " + ec.message());
    } else {
      WC_RETURN_IF_ERROR(CloneOrCopyFile(from, to));
      // A trainer writing while we copied would leave a torn copy that hashes consistently:
      // the source must be the same file, unchanged, after the copy as before it.
      WC_ASSIGN_OR_RETURN(ImportedFiles::Stamp after, StampOf(from, p));
      if (after.size != source.size || after.inode != source.inode ||
          after.mtime_ns != source.mtime_ns || after.ctime_ns != source.ctime_ns) {
        return Corrupt(from.string() +
                       " was modified while it was being copied into the store; nothing was "
                       "committed");
      }
    }
    WC_ASSIGN_OR_RETURN(ImportedFiles::Stamp stamp, StampOf(to, p));
    out.stamps_.push_back(std::move(stamp));
  }
  return out;
}

Status StoreImpl::CommitImport(std::string_view channel, const Manifest& manifest,
                               ImportedFiles files) {
  WC_RETURN_IF_ERROR(CheckNewVersion(channel, manifest));
  if (files.dir_.empty()) return FailedPrecondition("no staged import to commit");
  if (files.channel_ != channel || files.version_ != manifest.version) {
    return InvalidArgument("the staged import is " + Name(files.channel_, files.version_) +
                           ", the manifest " + Name(channel, manifest.version));
  }
  std::map<std::string_view, const ImportedFiles::Stamp*> staged;
  for (const ImportedFiles::Stamp& s : files.stamps_) staged[s.path] = &s;
  if (staged.size() != manifest.files.size()) {
    return InvalidArgument("the manifest lists " + std::to_string(manifest.files.size()) +
                           " files, " + std::to_string(staged.size()) + " were imported");
  }
  // The last check before the version becomes current. In hard-link mode the staged file is the
  // trainer's inode: a write since StageImport (during the hashing) changes its mtime/ctime.
  for (const ManifestFile& f : manifest.files) {
    auto it = staged.find(f.path);
    if (it == staged.end()) return InvalidArgument(f.path + " was not imported");
    const ImportedFiles::Stamp& before = *it->second;
    WC_ASSIGN_OR_RETURN(ImportedFiles::Stamp now, StampOf(files.dir_ / f.path, f.path));
    if (now.size != f.size || before.size != f.size) {
      return Corrupt(f.path + ": " + std::to_string(now.size) + " bytes, the manifest says " +
                     std::to_string(f.size) + " (changed while it was being published)");
    }
    if (now.inode != before.inode || now.mtime_ns != before.mtime_ns ||
        now.ctime_ns != before.ctime_ns) {
      return Corrupt(f.path + " was modified while it was being published; nothing was committed");
    }
  }
  std::lock_guard lock(mu_);
  // The staged files are on the store's filesystem: linking them into the staging copies nothing.
  WC_ASSIGN_OR_RETURN(auto state,
                      CreateStagingLocked(channel, manifest, &files.dir_, ImportMode::kHardlink));
  return CommitWholeStagingLocked(channel, *state);
}

}  // namespace store

const Manifest& StagedVersion::manifest() const { return state_->manifest; }
const std::string& StagedVersion::channel() const { return state_->channel; }
Version StagedVersion::version() const { return state_->manifest.version; }

Status StagedVersion::WriteChunk(ChunkIndex index, std::span<const uint8_t> bytes) {
  return state_->WriteChunk(index, bytes);
}

Status StagedVersion::WriteChunkPart(ChunkIndex index, uint64_t offset,
                                     std::span<const uint8_t> bytes) {
  return state_->WriteChunkPart(index, offset, bytes);
}

Status StagedVersion::MarkVerified(ChunkIndex index) { return state_->MarkVerified(index); }

Status StagedVersion::PutChunk(ChunkIndex index, std::span<const uint8_t> bytes) {
  const Manifest& m = state_->manifest;
  if (index.value() >= m.chunk_count()) {
    return OutOfRange("chunk " + std::to_string(index.value()) + " is beyond the " +
                      std::to_string(m.chunk_count()) + " chunks of the version");
  }
  const uint64_t size = m.ChunkRange(index).size;
  if (bytes.size() != size) {
    return Corrupt("chunk " + std::to_string(index.value()) + " of " + state_->channel + "/" +
                   store::VersionName(m.version) + " has " + std::to_string(bytes.size()) +
                   " bytes, the manifest says " + std::to_string(size));
  }
  // Streaming with prefetch: bytes received from a peer come from memory, not from cache.
  Hasher hasher(m.hash_algorithm);
  UpdateStreaming(hasher, m.hash_algorithm, bytes);
  if (hasher.Finish() != m.chunk_hashes[index.value()]) {
    return Corrupt("chunk " + std::to_string(index.value()) + " of " + state_->channel + "/" +
                   store::VersionName(m.version) + " does not match its hash in the manifest");
  }
  WC_RETURN_IF_ERROR(state_->WriteChunk(index, bytes));
  return state_->MarkVerified(index);
}

Status StagedVersion::Flush() { return state_->Flush(); }
bool StagedVersion::HasChunk(ChunkIndex index) const { return state_->HasChunk(index); }

std::vector<ChunkIndex> StagedVersion::MissingChunks() const {
  std::lock_guard rec(state_->rec_mu);
  std::vector<ChunkIndex> out;
  for (uint32_t i = 0; i < state_->verified.size(); ++i) {
    if (!state_->verified[i]) out.emplace_back(i);
  }
  return out;
}

uint32_t StagedVersion::verified_count() const {
  std::lock_guard rec(state_->rec_mu);
  return state_->verified_count;
}

bool StagedVersion::complete() const { return verified_count() == state_->manifest.chunk_count(); }

Result<std::shared_ptr<const MappedVersion>> StagedVersion::View() const {
  return store::StagingState::View(state_);
}

Result<std::vector<uint8_t>> StagedVersion::ReadChunk(ChunkIndex index) const {
  WC_ASSIGN_OR_RETURN(std::shared_ptr<const MappedVersion> view, View());
  WC_ASSIGN_OR_RETURN(HeldBytes chunk, view->Chunk(index));
  return std::vector<uint8_t>(chunk.bytes.begin(), chunk.bytes.end());
}

uint64_t StagedVersion::discarded_record_bytes() const {
  std::lock_guard rec(state_->rec_mu);
  return state_->discarded_bytes;
}

Store::Store(std::unique_ptr<StoreImpl> impl) : impl_(std::move(impl)) {}
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

Result<Store> Store::Open(const std::filesystem::path& root, const StoreOptions& options) {
  WC_ASSIGN_OR_RETURN(auto impl, StoreImpl::Open(root, options));
  return Store(std::move(impl));
}

const std::filesystem::path& Store::root() const { return impl_->root(); }
Result<std::vector<std::string>> Store::Channels() const { return impl_->Channels(); }
Result<StagedVersion> Store::BeginStaging(std::string_view channel, const Manifest& manifest,
                                          StagingOptions options) {
  return impl_->BeginStaging(channel, manifest, options);
}
Result<StagedVersion> Store::ResumeStaging(std::string_view channel, Version version) {
  return impl_->ResumeStaging(channel, version);
}
Result<std::vector<Version>> Store::ListStaging(std::string_view channel) const {
  return impl_->ListStaging(channel);
}
Status Store::Commit(std::string_view channel, Version version) {
  return impl_->Commit(channel, version);
}
Status Store::CommitPartial(std::string_view channel, Version version,
                            const PartialVersion& wanted) {
  return impl_->CommitPartial(channel, version, wanted);
}
Status Store::Abort(std::string_view channel, Version version, std::string_view reason) {
  return impl_->Abort(channel, version, reason);
}
Result<Version> Store::Rollback(std::string_view channel, std::optional<Version> to) {
  return impl_->Rollback(channel, to);
}
Result<std::vector<VersionInfo>> Store::List(std::string_view channel) const {
  return impl_->List(channel);
}
Result<Version> Store::Current(std::string_view channel) const { return impl_->Current(channel); }
Result<Manifest> Store::GetManifest(std::string_view channel, Version version) const {
  return impl_->GetManifest(channel, version);
}
Result<std::optional<PartialVersion>> Store::GetPartial(std::string_view channel,
                                                        Version version) const {
  return impl_->GetPartial(channel, version);
}
std::filesystem::path Store::VersionPath(std::string_view channel, Version version) const {
  return impl_->Layout(channel).version_dir(version);
}
std::filesystem::path Store::CurrentPath(std::string_view channel) const {
  return impl_->Layout(channel).current_link();
}
Result<Version> Store::NextVersion(std::string_view channel) const {
  return impl_->NextVersion(channel);
}
Status Store::Verify(std::string_view channel, Version version) const {
  return impl_->Verify(channel, version);
}
Result<std::shared_ptr<const MappedVersion>> Store::OpenView(std::string_view channel,
                                                             Version version) const {
  return impl_->OpenView(channel, version);
}
Result<std::vector<uint8_t>> Store::ReadChunk(std::string_view channel, Version version,
                                              ChunkIndex index) const {
  return impl_->ReadChunk(channel, version, index);
}
Status Store::ImportDirectory(std::string_view channel, const Manifest& manifest,
                              const std::filesystem::path& dir, ImportMode mode) {
  return impl_->ImportDirectory(channel, manifest, dir, mode);
}
Result<ImportedFiles> Store::StageImport(std::string_view channel, Version version,
                                         const std::vector<std::string>& paths,
                                         const std::filesystem::path& dir, ImportMode mode) {
  return impl_->StageImport(channel, version, paths, dir, mode);
}
Result<ImportedFiles> Store::StageImportBytes(std::string_view channel, Version version,
                                              const std::string& path,
                                              std::span<const uint8_t> bytes,
                                              const BytesWriter& write) {
  return impl_->StageImportBytes(channel, version, path, bytes, write);
}
Result<std::vector<Version>> Store::ForgetPayloadVersions(std::string_view channel,
                                                          std::optional<Version> only) {
  return impl_->ForgetPayloadVersions(channel, only);
}
Status Store::CommitImport(std::string_view channel, const Manifest& manifest,
                           ImportedFiles files) {
  return impl_->CommitImport(channel, manifest, std::move(files));
}

ImportedFiles::ImportedFiles(ImportedFiles&& other) noexcept { *this = std::move(other); }

ImportedFiles& ImportedFiles::operator=(ImportedFiles&& other) noexcept {
  if (this != &other) {
    Release();
    channel_ = std::move(other.channel_);
    version_ = other.version_;
    mode_ = other.mode_;
    dir_ = std::exchange(other.dir_, {});
    stamps_ = std::move(other.stamps_);
  }
  return *this;
}

ImportedFiles::~ImportedFiles() { Release(); }

void ImportedFiles::Release() {
  // Only names go: in hard-link mode the inodes live on in the trainer's directory and, after a
  // commit, in versions/<v>.
  if (!dir_.empty()) store::RemoveAll(dir_).IgnoreError();
  dir_.clear();
  stamps_.clear();
}

Result<std::vector<Version>> Store::CollectGarbage(std::string_view channel) {
  return impl_->CollectGarbage(channel);
}

}  // namespace weightcast
