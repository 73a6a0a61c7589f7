// Recovery at Open, garbage collection and forgetting payload versions: the places that remove
// things. Both only remove
// what the crash-safety argument in docs/store_layout.md shows can be neither current nor
// resumable.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "manifest/builder.h"
#include "store/partial.h"
#include "store/store_impl.h"
#include "util/file.h"

namespace weightcast::store {
namespace {

bool Exists(const std::filesystem::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

constexpr std::string_view kManifestSuffix = ".wcm";

std::optional<Version> ParseManifestName(std::string_view name) {
  if (name.size() <= kManifestSuffix.size() ||
      name.substr(name.size() - kManifestSuffix.size()) != kManifestSuffix) {
    return std::nullopt;
  }
  return ParseVersionName(name.substr(0, name.size() - kManifestSuffix.size()));
}

}  // namespace

Status StoreImpl::RecoverChannel(const std::string& channel) {
  std::lock_guard lock(mu_);
  ChannelLayout layout = Layout(channel);
  bool rolled_forward = false;

  // A crash between creating current.tmp and renaming it over current.
  if (::unlink(layout.current_tmp().c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus("unlink(" + layout.current_tmp().string() + ")", errno);
  }

  WC_ASSIGN_OR_RETURN(std::vector<std::string> staging, ListDir(layout.staging_root()));
  std::vector<Version> resumable;
  for (const std::string& name : staging) {
    std::filesystem::path dir = layout.staging_root() / name;
    auto v = ParseVersionName(name);
    if (!v) {
      // .partial-<v> (BeginStaging before its publishing rename), .aborted-<v>, .done-<v>,
      // .import-<v> (a publisher's import that never reached CommitImport).
      WC_RETURN_IF_ERROR(RemoveAll(dir));
      continue;
    }
    bool has_files = Exists(layout.staging_files(*v));
    bool committed = Exists(layout.version_dir(*v));
    if (!has_files && committed) {
      // Killed after the commit point (files renamed to versions/<v>): finish the commit.
      if (!Exists(layout.manifest_file(*v))) {
        WC_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(layout.staging_manifest(*v)));
        WC_RETURN_IF_ERROR(WriteFileAtomic(layout.manifest_file(*v), bytes));
      }
      WC_RETURN_IF_ERROR(SwitchCurrentLocked(layout, *v));
      std::filesystem::path done = layout.staging_root() / (".done-" + name);
      WC_RETURN_IF_ERROR(RemoveAll(done));
      WC_RETURN_IF_ERROR(RenameDurable(dir, done));
      WC_RETURN_IF_ERROR(RemoveAll(done));
      rolled_forward = true;
      continue;
    }
    if (!has_files || committed) {
      // Half removed, or a leftover of a version that is committed already.
      WC_RETURN_IF_ERROR(RemoveAll(dir));
      continue;
    }
    auto manifest = ReadManifestFile(layout.staging_manifest(*v));
    if (!manifest.ok() || manifest->version != *v || manifest->channel != channel) {
      // Only damage from outside does this (the manifest is written before the staging is
      // published); the staging cannot be resumed without it.
      WC_RETURN_IF_ERROR(RemoveAll(dir));
      continue;
    }
    resumable.push_back(*v);
  }
  // A staging version below the current one is stale: the channel moved past it, nobody will
  // resume it, and it would hold disk space forever. (Going back is Rollback's job.)
  if (auto current = CurrentLocked(layout); current.ok()) {
    for (Version v : resumable) {
      if (v < *current) WC_RETURN_IF_ERROR(RemoveAll(layout.staging_dir(v)));
    }
  }
  if (!staging.empty()) WC_RETURN_IF_ERROR(FsyncPath(layout.staging_root()));

  // Versions: anything not named by a number is a version GC had started to remove.
  WC_ASSIGN_OR_RETURN(std::vector<std::string> versions, ListDir(layout.versions_dir()));
  bool removed = false;
  for (const std::string& name : versions) {
    if (ParseVersionName(name)) continue;
    WC_RETURN_IF_ERROR(RemoveAll(layout.versions_dir() / name));
    removed = true;
  }
  if (removed) WC_RETURN_IF_ERROR(FsyncPath(layout.versions_dir()));

  // Manifests: temporaries of WriteFileAtomic, and manifests whose version never reached its
  // commit point or was collected.
  WC_ASSIGN_OR_RETURN(std::vector<std::string> manifests, ListDir(layout.manifests_dir()));
  removed = false;
  for (const std::string& name : manifests) {
    auto v = ParseManifestName(name);
    if (v && Exists(layout.version_dir(*v))) continue;
    WC_RETURN_IF_ERROR(RemoveAll(layout.manifests_dir() / name));
    removed = true;
  }
  if (removed) WC_RETURN_IF_ERROR(FsyncPath(layout.manifests_dir()));

  if (rolled_forward) {
    WC_RETURN_IF_ERROR(CollectLocked(channel).status());
  }
  return Status::Ok();
}

Result<std::vector<Version>> StoreImpl::CollectGarbage(std::string_view channel) {
  WC_RETURN_IF_ERROR(CheckWritable());
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  std::lock_guard lock(mu_);
  return CollectLocked(channel);
}

Result<std::vector<Version>> StoreImpl::CollectLocked(std::string_view channel) {
  ChannelLayout layout = Layout(channel);
  WC_ASSIGN_OR_RETURN(std::vector<Version> committed, CommittedLocked(layout));
  auto current = CurrentLocked(layout);
  if (!current.ok()) {
    // Without a readable `current` we cannot tell which version must stay: remove nothing.
    if (current.status().code() == Code::kNotFound && committed.empty()) {
      return std::vector<Version>{};
    }
    return current.status().WithContext("not collecting old versions");
  }
  // The current version; the versions above it (rolled back from: a store can still roll
  // forward to them until a newer version is committed); and below it, the highest-numbered
  // versions up to keep_versions in all, leaving out the ones rolled back from: they are not
  // where a rollback goes, and keeping them would push out the known-good versions that are.
  WC_ASSIGN_OR_RETURN(std::set<Version> withdrawn, WithdrawnLocked(layout));
  std::set<Version> keep{*current};
  uint32_t kept = 1;
  for (auto it = committed.rbegin(); it != committed.rend(); ++it) {
    if (*it > *current) {
      keep.insert(*it);
    } else if (*it < *current && kept < options_.keep_versions && withdrawn.count(*it) == 0) {
      keep.insert(*it);
      ++kept;
    }
  }
  std::vector<Version> removed;
  for (Version v : committed) {
    if (keep.count(v) != 0) continue;
    WC_RETURN_IF_ERROR(RemoveVersionLocked(layout, channel, v));
    removed.push_back(v);
  }
  bool pruned = false;
  for (Version v : removed) pruned |= withdrawn.erase(v) != 0;
  if (pruned) WC_RETURN_IF_ERROR(WriteWithdrawnLocked(layout, withdrawn));
  return removed;
}

Status StoreImpl::RemoveVersionLocked(const ChannelLayout& layout, std::string_view channel,
                                      Version v) {
  // Hidden name first: a crash mid-removal leaves a non-numeric entry that Open finishes off,
  // never a numbered version with half its files.
  std::filesystem::path doomed = layout.versions_dir() / (".gc-" + VersionName(v));
  WC_RETURN_IF_ERROR(RemoveAll(doomed));
  WC_RETURN_IF_ERROR(RenameDurable(layout.version_dir(v), doomed));
  // Views held elsewhere keep their mappings of the unlinked files (docs/store_layout.md).
  ForgetView({std::string(channel), v.value()});
  manifests_.erase({std::string(channel), v.value()});
  partials_.erase({std::string(channel), v.value()});
  if (::unlink(layout.manifest_file(v).c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus("unlink(" + layout.manifest_file(v).string() + ")", errno);
  }
  WC_RETURN_IF_ERROR(FsyncPath(layout.manifests_dir()));
  return RemoveAll(doomed);
}

Result<std::vector<Version>> StoreImpl::ForgetPayloadVersions(std::string_view channel,
                                                              std::optional<Version> only) {
  WC_RETURN_IF_ERROR(CheckWritable());
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  std::lock_guard lock(mu_);
  ChannelLayout layout = Layout(channel);
  if (!Exists(layout.dir())) return std::vector<Version>{};
  WC_ASSIGN_OR_RETURN(std::vector<Version> committed, CommittedLocked(layout));
  std::vector<Version> doomed, kept;
  for (Version v : committed) {
    if (only.has_value() && v != *only) {
      kept.push_back(v);
      continue;
    }
    WC_ASSIGN_OR_RETURN(Manifest manifest, ManifestLocked(channel, v));
    WC_ASSIGN_OR_RETURN(std::optional<PartialVersion> partial,
                        ReadPartialFile(layout.version_dir(v), manifest));
    (partial.has_value() && partial->payloads ? doomed : kept).push_back(v);
  }
  if (doomed.empty()) return doomed;
  // `current` moves first, so that it never names a version without its files: to the newest
  // version left, or away when none is.
  const Result<Version> current = CurrentLocked(layout);
  if (!current.ok() || std::find(doomed.begin(), doomed.end(), *current) != doomed.end()) {
    if (!kept.empty()) {
      WC_RETURN_IF_ERROR(SwitchCurrentLocked(layout, kept.back()));
    } else {
      if (::unlink(layout.current_link().c_str()) != 0 && errno != ENOENT) {
        return ErrnoStatus("unlink(" + layout.current_link().string() + ")", errno);
      }
      WC_RETURN_IF_ERROR(FsyncPath(layout.dir()));
    }
  }
  WC_ASSIGN_OR_RETURN(std::set<Version> withdrawn, WithdrawnLocked(layout));
  for (Version v : doomed) {
    WC_RETURN_IF_ERROR(RemoveVersionLocked(layout, channel, v));
    withdrawn.erase(v);
  }
  WC_RETURN_IF_ERROR(WriteWithdrawnLocked(layout, withdrawn));
  return doomed;
}

Result<std::set<Version>> StoreImpl::WithdrawnLocked(const ChannelLayout& layout) const {
  std::set<Version> out;
  if (!Exists(layout.withdrawn_file())) return out;
  WC_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(layout.withdrawn_file(), 1 << 20));
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + start, end - start);
    const std::optional<Version> v = ParseVersionName(line);
    if (!v.has_value()) {
      return Corrupt(layout.withdrawn_file().string() + ": not a version number: '" +
                     std::string(line) + "'");
    }
    out.insert(*v);
    start = end + 1;
  }
  return out;
}

Status StoreImpl::WriteWithdrawnLocked(const ChannelLayout& layout,
                                       const std::set<Version>& withdrawn) {
  if (withdrawn.empty()) return RemoveAll(layout.withdrawn_file());
  std::string text;
  for (Version v : withdrawn) text += VersionName(v) + "\n";
  return WriteFileAtomic(layout.withdrawn_file(), text);
}

}  // namespace weightcast::store
