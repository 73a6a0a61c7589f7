#include "client/version_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <thread>

#include "format/safetensors.h"
#include "manifest/builder.h"
#include "manifest/selection.h"
#include "store/abort_log.h"
#include "store/partial.h"

namespace weightcast::client {
namespace {

namespace fs = std::filesystem;

bool Exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

std::string V(Version v) { return "v" + std::to_string(v.value()); }

// The committed version the channel's `current` link names (0: none, or unreadable).
uint64_t CurrentOf(const store::ChannelLayout& layout) {
  std::error_code ec;
  const fs::path target = fs::read_symlink(layout.current_link(), ec);
  if (ec) return 0;
  const std::optional<Version> v = store::ParseVersionName(target.filename().string());
  return v.has_value() ? v->value() : 0;
}

}  // namespace

Result<std::unique_ptr<VersionStreamCore>> VersionStreamCore::Open(
    StreamSpec spec, std::optional<Clock::time_point> deadline) {
  if (spec.version.value() == 0) return InvalidArgument("stream: version 0 names no version");
  std::unique_ptr<VersionStreamCore> s(new VersionStreamCore(std::move(spec)));
  const Version v = s->spec_.version;
  const std::string what = "v" + std::to_string(v.value()) + " of channel " + s->spec_.channel +
                           " in store " + s->spec_.store.string();
  while (true) {
    // Committed first: a staging that was just committed has moved its files there.
    Status loaded = Unavailable("not yet");
    if (Exists(s->layout_.version_dir(v)) && Exists(s->layout_.manifest_file(v))) {
      loaded = s->Load(/*committed=*/true);
    } else if (Exists(s->layout_.staging_live(v))) {
      loaded = s->Load(/*committed=*/false);
    }
    if (loaded.ok()) break;
    if (loaded.code() != Code::kUnavailable) return loaded;
    if (std::optional<std::string> reason = store::FindAbortReason(s->layout_, v)) {
      return Aborted(what + " was aborted: " + *reason);
    }
    if (CurrentOf(s->layout_) > v.value()) {
      return NotFound(what + ": the store is past it (current v" +
                      std::to_string(CurrentOf(s->layout_)) +
                      ") and does not hold it; stream the current version instead");
    }
    WC_RETURN_IF_ERROR(s->Sleep(deadline, what + " to start arriving"));
  }
  WC_RETURN_IF_ERROR(s->Prepare());
  return s;
}

Status VersionStreamCore::Load(bool committed) {
  const Version v = spec_.version;
  const fs::path manifest_path = committed ? layout_.manifest_file(v) : layout_.staging_manifest(v);
  const fs::path dir = committed ? layout_.version_dir(v) : layout_.staging_files(v);
  Result<Manifest> m = ReadManifestFile(manifest_path);
  if (!m.ok()) {
    return m.status().code() == Code::kNotFound ? Unavailable("moved") : m.status();
  }
  if (m->version != v || m->channel != spec_.channel) {
    return Corrupt(manifest_path.string() + " is not the manifest of " + V(v));
  }
  std::vector<MappedFile> files;
  std::vector<int> fds;
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  for (const ManifestFile& f : m->files) {
    const fs::path path = dir / f.path;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      close_all();
      if (err == ENOENT) return Unavailable("moved");
      return ErrnoStatus("open(" + path.string() + ")", err);
    }
    fds.push_back(fd);
    Result<MappedFile> mapped = MappedFile::Map(fd, path);
    if (!mapped.ok()) {
      close_all();
      return mapped.status();
    }
    if (mapped->size() != f.size) {
      close_all();
      return Corrupt(path.string() + " is " + std::to_string(mapped->size()) +
                     " bytes, the manifest says " + std::to_string(f.size));
    }
    files.push_back(std::move(*mapped));
  }
  std::optional<store::ChunkRecordReader> record;
  if (!committed) {
    Result<store::ChunkRecordReader> r =
        store::ChunkRecordReader::Open(layout_.staging_live(v), m->root, m->chunk_count());
    if (!r.ok()) {
      close_all();
      return r.status().code() == Code::kNotFound ? Unavailable("moved") : r.status();
    }
    record.emplace(std::move(*r));
    struct stat live {
    }, durable{};
    if (::stat(layout_.staging_live(v).c_str(), &live) != 0 ||
        ::stat(layout_.staging_record(v).c_str(), &durable) != 0) {
      close_all();
      return Unavailable("moved");
    }
    live_inode_ = static_cast<uint64_t>(live.st_ino);
    record_inode_ = static_cast<uint64_t>(durable.st_ino);
  }
  manifest_ = std::move(*m);
  files_ = std::move(files);
  fds_ = std::move(fds);
  record_ = std::move(record);
  committed_ = committed;
  return Status::Ok();
}

Status VersionStreamCore::Prepare() {
  const Manifest& m = manifest_;
  std::map<std::string_view, size_t> by_name;
  for (const ManifestTensor& t : m.tensors) {
    if (!spec_.patterns.empty()) {
      bool selected = false;
      for (const std::string& p : spec_.patterns) selected |= GlobMatch(p, t.name);
      if (!selected) continue;
    }
    by_name[t.name] = tensors_.size();
    tensors_.push_back(Tensor{&t});
  }
  chunk_tensors_.assign(m.chunk_count(), {});
  seen_.assign(m.chunk_count(), false);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const ManifestTensor& t = *tensors_[i].info;
    if (t.size == 0) continue;
    const uint64_t first = t.offset / m.chunk_size;
    const uint64_t last = (t.offset + t.size - 1) / m.chunk_size;
    for (uint64_t c = first; c <= last && c < m.chunk_count(); ++c) {
      chunk_tensors_[c].push_back(static_cast<uint32_t>(i));
      ++tensors_[i].missing;
    }
  }
  std::vector<bool> in_order(tensors_.size(), false);
  for (const std::string& name : spec_.order) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return InvalidArgument("stream order names tensor '" + name + "', which " + V(m.version) +
                             (spec_.patterns.empty() ? "" : " as this subscriber selects it") +
                             " does not have");
    }
    if (in_order[it->second]) {
      return InvalidArgument("stream order names tensor '" + name + "' twice");
    }
    in_order[it->second] = true;
    order_.push_back(it->second);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].missing == 0) {
      tensors_[i].ready = true;
      if (!in_order[i]) ready_.push_back(i);
    }
  }
  ordered_ = std::move(in_order);  // Verified() queues only the others
  if (committed_) AllVerified();
  return Status::Ok();
}

void VersionStreamCore::Verified(ChunkIndex chunk) {
  if (seen_[chunk.value()]) return;  // listed again by a resumed agent's live record
  seen_[chunk.value()] = true;
  for (uint32_t i : chunk_tensors_[chunk.value()]) {
    Tensor& t = tensors_[i];
    if (t.missing == 0 || --t.missing != 0) continue;
    t.ready = true;
    if (!ordered_[i]) ready_.push_back(i);
  }
}

void VersionStreamCore::AllVerified() {
  // A tensor-subset agent's committed version holds only the chunks its record lists; the
  // tensors of the others are holes and are never handed over (Next ends without them).
  Result<std::optional<PartialVersion>> partial =
      ReadPartialFile(layout_.version_dir(spec_.version), manifest_);
  if (partial.ok() && partial->has_value()) {
    for (ChunkIndex c : (*partial)->chunks) Verified(c);
    return;
  }
  for (uint32_t c = 0; c < manifest_.chunk_count(); ++c) Verified(ChunkIndex(c));
}

Result<bool> VersionStreamCore::Poll() {
  if (committed_) return false;
  std::vector<ChunkIndex> fresh;
  struct stat live {};
  if (::stat(layout_.staging_live(spec_.version).c_str(), &live) == 0 &&
      static_cast<uint64_t>(live.st_ino) != live_inode_ && StagingPresent()) {
    // The agent resumed this staging (a restart) and wrote its live record anew: read that one.
    Result<store::ChunkRecordReader> r = store::ChunkRecordReader::Open(
        layout_.staging_live(spec_.version), manifest_.root, manifest_.chunk_count());
    if (r.ok()) {
      record_.emplace(std::move(*r));
      live_inode_ = static_cast<uint64_t>(live.st_ino);
    }
  }
  WC_RETURN_IF_ERROR(record_->Poll(fresh));
  for (ChunkIndex c : fresh) Verified(c);
  if (!fresh.empty()) return true;
  if (StagingPresent()) return false;
  // The staging went away: committed (its files are versions/<v> now, every chunk verified) or
  // aborted. The record may have gained its last batch just before.
  WC_RETURN_IF_ERROR(record_->Poll(fresh));
  for (ChunkIndex c : fresh) Verified(c);
  const bool committed =
      Exists(layout_.version_dir(spec_.version)) ||
      (CurrentOf(layout_) >= spec_.version.value() &&
       !store::FindAbortReason(layout_, spec_.version).has_value());  // committed, collected since
  if (!committed) return Gone();
  committed_ = true;
  AllVerified();
  return true;
}

bool VersionStreamCore::StagingPresent() const {
  // The durable record names the staging: a resume keeps it, an abort and a new staging of the
  // same version make another.
  struct stat st {};
  if (::stat(layout_.staging_record(spec_.version).c_str(), &st) != 0) return false;
  if (static_cast<uint64_t>(st.st_ino) != record_inode_) return false;
  return Exists(layout_.staging_files(spec_.version));  // gone at a commit's point
}

Status VersionStreamCore::Gone() const {
  const std::string what = V(spec_.version) + " of channel " + spec_.channel;
  std::optional<std::string> reason = store::FindAbortReason(layout_, spec_.version);
  return Aborted(what + " was aborted: " +
                 (reason.has_value() ? *reason : std::string("its staging was dropped")) +
                 "; drop what was loaded from it");
}

Status VersionStreamCore::Sleep(std::optional<Clock::time_point> deadline,
                                const std::string& waiting) const {
  if (spec_.closed && spec_.closed()) return Aborted("the subscriber was closed");
  if (deadline.has_value() && Clock::now() >= *deadline) {
    return DeadlineExceeded("timed out waiting for " + waiting);
  }
  std::this_thread::sleep_for(spec_.poll);
  return Status::Ok();
}

TensorView VersionStreamCore::View(const Tensor& t) const {
  const ManifestTensor& info = *t.info;
  const ManifestFile& f = manifest_.files[info.file_index];
  TensorView view;
  view.name = info.name;
  view.dtype = std::string(DTypeName(info.dtype));
  view.shape = info.shape;
  view.bytes = files_[info.file_index].bytes().subspan(info.offset - f.offset, info.size);
  return view;
}

Result<std::optional<TensorView>> VersionStreamCore::Next(
    std::optional<Clock::time_point> deadline) {
  while (true) {
    // The caller's order first, strictly; then whatever is ready.
    if (next_in_order_ < order_.size()) {
      const Tensor& t = tensors_[order_[next_in_order_]];
      if (t.ready) {
        last_ = order_[next_in_order_++];
        ++handed_;
        return std::optional<TensorView>(View(t));
      }
    } else if (ready_at_ < ready_.size()) {
      last_ = ready_[ready_at_++];
      ++handed_;
      return std::optional<TensorView>(View(tensors_[last_]));
    }
    if (handed_ == tensors_.size()) return std::optional<TensorView>();
    if (committed_) {
      // Every chunk the version holds is verified: a tensor still not ready is not in it (a
      // subset agent's version), so it is skipped, in the order too.
      while (next_in_order_ < order_.size() && !tensors_[order_[next_in_order_]].ready) {
        ++next_in_order_;
      }
      if (next_in_order_ < order_.size() || ready_at_ < ready_.size()) continue;
      return std::optional<TensorView>();
    }
    WC_ASSIGN_OR_RETURN(const bool changed, Poll());
    if (!changed) {
      WC_RETURN_IF_ERROR(
          Sleep(deadline, "the chunks of " + V(spec_.version) + " (" + std::to_string(handed_) +
                              " of " + std::to_string(tensors_.size()) + " tensors handed over)"));
    }
  }
}

Status VersionStreamCore::WaitCommitted(std::optional<Clock::time_point> deadline) {
  while (!committed_) {
    WC_ASSIGN_OR_RETURN(const bool changed, Poll());
    if (!changed) {
      WC_RETURN_IF_ERROR(Sleep(deadline, "the commit of " + V(spec_.version)));
    }
  }
  return Status::Ok();
}

std::vector<ChunkIndex> VersionStreamCore::WantedChunkOrder() const {
  std::vector<ChunkIndex> out;
  std::vector<bool> taken(manifest_.chunk_count(), false);
  const uint64_t chunk = manifest_.chunk_size;
  for (size_t i : order_) {
    const ManifestTensor& t = *tensors_[i].info;
    if (t.size == 0) continue;
    for (uint64_t c = t.offset / chunk; c <= (t.offset + t.size - 1) / chunk; ++c) {
      if (c < taken.size() && !taken[c]) {
        taken[c] = true;
        out.push_back(ChunkIndex(static_cast<uint32_t>(c)));
      }
    }
  }
  for (uint32_t c = 0; c < taken.size(); ++c) {
    if (!taken[c]) out.push_back(ChunkIndex(c));
  }
  return out;
}

int VersionStreamCore::file_descriptor(size_t file) const {
  return file < fds_.size() ? fds_[file] : -1;
}

VersionStreamCore::~VersionStreamCore() {
  for (int fd : fds_) ::close(fd);
}

}  // namespace weightcast::client
