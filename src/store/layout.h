// Paths and names of the on-disk store (docs/store_layout.md), and the small POSIX helpers the
// store's crash-safety argument rests on. Everything here is stateless.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "manifest/manifest.h"

namespace weightcast::store {

// Accepts [A-Za-z0-9._-]{1,128} not starting with '.' (manifest/builder.h), so a channel is always
// one plain path component that cannot climb out of the root or collide with the store's files.
Status ValidateChannelName(std::string_view channel);

// Accepts a manifest file path that stays below the directory it is joined to: relative,
// '/'-separated, no empty, "." or ".." components, no NUL or backslash.
Status ValidateRelativePath(std::string_view path);

// Checks every path of the manifest with ValidateRelativePath and that no path is both a file and
// a directory of another path ("a" and "a/b"), which would make the version impossible to lay out.
Status ValidateManifestPaths(const Manifest& manifest);

// "12" -> Version(12). Only canonical decimal (no sign, no leading zero, non-zero), so that every
// directory name maps to at most one version and back.
std::optional<Version> ParseVersionName(std::string_view name);
std::string VersionName(Version version);

// The paths of one channel below the store root.
class ChannelLayout {
 public:
  ChannelLayout(const std::filesystem::path& root, std::string_view channel)
      : dir_(root / std::string(channel)) {}

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path versions_dir() const { return dir_ / "versions"; }
  std::filesystem::path manifests_dir() const { return dir_ / "manifests"; }
  std::filesystem::path staging_root() const { return dir_ / "staging"; }
  std::filesystem::path current_link() const { return dir_ / "current"; }
  std::filesystem::path current_tmp() const { return dir_ / "current.tmp"; }
  // The versions rolled back from, one decimal number a line: collection does not keep them
  // in place of the versions a later rollback can go to.
  std::filesystem::path withdrawn_file() const { return dir_ / "withdrawn"; }
  // Why the latest staging versions were dropped (store/abort_log.h), for streaming readers.
  std::filesystem::path aborted_file() const { return dir_ / "aborted"; }

  std::filesystem::path version_dir(Version v) const { return versions_dir() / VersionName(v); }
  std::filesystem::path manifest_file(Version v) const {
    return manifests_dir() / (VersionName(v) + ".wcm");
  }
  // What `current` holds: relative, so that the whole root can be moved or mounted elsewhere.
  static std::string CurrentTarget(Version v) { return "versions/" + VersionName(v); }

  std::filesystem::path staging_dir(Version v) const { return staging_root() / VersionName(v); }
  std::filesystem::path staging_files(Version v) const { return staging_dir(v) / "files"; }
  std::filesystem::path staging_manifest(Version v) const {
    return staging_dir(v) / "manifest.wcm";
  }
  std::filesystem::path staging_record(Version v) const { return staging_dir(v) / "chunks.log"; }
  // The chunks verified so far, written as they are, not synced (store/chunk_record.h LiveRecord).
  std::filesystem::path staging_live(Version v) const { return staging_dir(v) / "verified.live"; }
  // Where a staging directory is assembled before one rename publishes it.
  std::filesystem::path staging_partial(Version v) const {
    return staging_root() / (".partial-" + VersionName(v));
  }

 private:
  std::filesystem::path dir_;
};

// Creates `dir` if missing and fsyncs its parent so that the entry survives a crash.
Status MakeDirDurable(const std::filesystem::path& dir);

// rename(2) then fsync of both parent directories (one when they are the same).
Status RenameDurable(const std::filesystem::path& from, const std::filesystem::path& to);

// Makes `to` (which must not exist) an independent copy of `from`: a reflink (FICLONE) where the
// filesystem shares extents copy-on-write (btrfs, XFS), which costs no copy, else a byte copy.
// Either way a later write to `from` never reaches `to`.
Status CloneOrCopyFile(const std::filesystem::path& from, const std::filesystem::path& to);

// Removes a file or a whole tree. A missing path is fine.
Status RemoveAll(const std::filesystem::path& path);

// Points `link` at `target` atomically: a fresh symlink `tmp` is renamed over `link`, then the
// directory is fsynced. A reader sees the old target or the new one, never no link.
Status SwitchSymlink(const std::filesystem::path& link, const std::filesystem::path& tmp,
                     const std::string& target);

// The names in a directory (not recursive, no "." or ".."). A missing directory is empty.
Result<std::vector<std::string>> ListDir(const std::filesystem::path& dir);

// Calls fn(file_index, offset_in_file, length, offset_in_range) for each piece of `range` in the
// flat byte space of `files` (sorted by offset, contiguous). Stops at the first error.
template <typename Fn>
Status ForEachSegment(const std::vector<ManifestFile>& files, ByteRange range, Fn&& fn);

// Implementation of the template above.
size_t FirstFileAt(const std::vector<ManifestFile>& files, uint64_t offset);

template <typename Fn>
Status ForEachSegment(const std::vector<ManifestFile>& files, ByteRange range, Fn&& fn) {
  uint64_t pos = range.offset;
  for (size_t i = FirstFileAt(files, pos); i < files.size() && pos < range.end(); ++i) {
    const ManifestFile& f = files[i];
    if (f.size == 0 || f.offset + f.size <= pos) continue;
    uint64_t in_file = pos - f.offset;
    uint64_t len = std::min<uint64_t>(f.size - in_file, range.end() - pos);
    WC_RETURN_IF_ERROR(fn(i, in_file, len, pos - range.offset));
    pos += len;
  }
  if (pos != range.end()) {
    return Internal("byte range " + std::to_string(range.offset) + "+" +
                    std::to_string(range.size) + " runs past the files of the manifest");
  }
  return Status::Ok();
}

}  // namespace weightcast::store
