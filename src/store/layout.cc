#include "store/layout.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <system_error>

#include "manifest/builder.h"
#include "util/file.h"

namespace weightcast::store {
namespace {

std::filesystem::path ParentOf(const std::filesystem::path& p) {
  std::filesystem::path parent = p.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

}  // namespace

Status ValidateChannelName(std::string_view channel) {
  // One rule for the whole project (manifest/builder.h); here it also keeps every channel one
  // plain path component that cannot climb out of the root or hit the store's dot-files.
  return ::weightcast::ValidateChannelName(channel);
}

Status ValidateRelativePath(std::string_view path) {
  auto bad = [&](std::string_view why) {
    return Corrupt("manifest file path '" + std::string(path) + "' " + std::string(why));
  };
  if (path.empty()) return bad("is empty");
  if (path.size() > 4096) return bad("is longer than 4096 bytes");
  if (path.front() == '/') return bad("is absolute");
  if (path.find('\0') != std::string_view::npos) return bad("holds a NUL byte");
  if (path.find('\\') != std::string_view::npos) return bad("holds a backslash");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty()) return bad("has an empty component");
    if (part == "." || part == "..") return bad("has a '.' or '..' component");
    if (part.size() > 255) return bad("has a component longer than 255 bytes");
    start = end + 1;
  }
  return Status::Ok();
}

Status ValidateManifestPaths(const Manifest& manifest) {
  std::set<std::string> files;
  for (const ManifestFile& f : manifest.files) {
    WC_RETURN_IF_ERROR(ValidateRelativePath(f.path));
    if (!files.insert(f.path).second) {
      return Corrupt("manifest lists file '" + f.path + "' twice");
    }
  }
  for (const ManifestFile& f : manifest.files) {
    for (size_t slash = f.path.find('/'); slash != std::string::npos;
         slash = f.path.find('/', slash + 1)) {
      std::string dir = f.path.substr(0, slash);
      if (files.count(dir) != 0) {
        return Corrupt("manifest path '" + dir + "' is both a file and the directory of '" +
                       f.path + "'");
      }
    }
  }
  return Status::Ok();
}

std::optional<Version> ParseVersionName(std::string_view name) {
  if (name.empty() || name.size() > 19 || name.front() == '0') return std::nullopt;
  uint64_t v = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return Version(v);
}

std::string VersionName(Version version) { return std::to_string(version.value()); }

Status MakeDirDurable(const std::filesystem::path& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0) {
    if (errno != EEXIST) return ErrnoStatus("mkdir(" + dir.string() + ")", errno);
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return FailedPrecondition(dir.string() + " exists and is not a directory");
    }
    return Status::Ok();
  }
  return FsyncPath(ParentOf(dir));
}

Status RenameDurable(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoStatus("rename(" + from.string() + " -> " + to.string() + ")", errno);
  }
  std::filesystem::path a = ParentOf(from);
  std::filesystem::path b = ParentOf(to);
  WC_RETURN_IF_ERROR(FsyncPath(b));
  if (a != b) WC_RETURN_IF_ERROR(FsyncPath(a));
  return Status::Ok();
}

Status CloneOrCopyFile(const std::filesystem::path& from, const std::filesystem::path& to) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return ErrnoStatus("open(" + from.string() + ")", errno);
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    const int err = errno;
    ::close(in);
    return ErrnoStatus("create(" + to.string() + ")", err);
  }
  const bool cloned = ::ioctl(out, FICLONE, in) == 0;
  ::close(in);
  ::close(out);
  if (cloned) return Status::Ok();
  std::error_code ec;
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return IoError("copy(" + from.string() + " -> " + to.string() + "): " + ec.message());
  return Status::Ok();
}

Status RemoveAll(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return IoError("remove(" + path.string() + "): " + ec.message());
  return Status::Ok();
}

Status SwitchSymlink(const std::filesystem::path& link, const std::filesystem::path& tmp,
                     const std::string& target) {
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus("unlink(" + tmp.string() + ")", errno);
  }
  if (::symlink(target.c_str(), tmp.c_str()) != 0) {
    return ErrnoStatus("symlink(" + tmp.string() + ")", errno);
  }
  // rename(2) replaces `link` in one step: there is no instant without a `current`.
  if (::rename(tmp.c_str(), link.c_str()) != 0) {
    Status st = ErrnoStatus("rename(" + tmp.string() + " -> " + link.string() + ")", errno);
    ::unlink(tmp.c_str());
    return st;
  }
  return FsyncPath(ParentOf(link));
}

Result<std::vector<std::string>> ListDir(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return names;
    return ErrnoStatus("opendir(" + dir.string() + ")", errno);
  }
  while (true) {
    errno = 0;
    struct dirent* e = ::readdir(d);
    if (e == nullptr) break;
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    names.push_back(std::move(name));
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) return ErrnoStatus("readdir(" + dir.string() + ")", err);
  std::sort(names.begin(), names.end());
  return names;
}

size_t FirstFileAt(const std::vector<ManifestFile>& files, uint64_t offset) {
  // Files are sorted by offset; the first that ends after `offset` holds it.
  auto it = std::partition_point(files.begin(), files.end(), [&](const ManifestFile& f) {
    return f.offset + f.size <= offset;
  });
  return static_cast<size_t>(it - files.begin());
}

}  // namespace weightcast::store
