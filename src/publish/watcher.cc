#include "publish/watcher.h"

#include <sys/stat.h>

#include <algorithm>
#include <system_error>
#include <utility>

#include "format/safetensors.h"
#include "util/file.h"

namespace weightcast::publish {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kStateHeader = "weightcast publish watch state v1";
constexpr uint64_t kMaxStateBytes = 64ull << 20;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The files below `dir` with their sizes and modification times, one line each, sorted. Any
// change a writer makes to the directory (a new file, a write, a rename) changes it.
Result<std::string> Fingerprint(const fs::path& dir) {
  std::vector<std::string> lines;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec);
  if (ec) return IoError("list " + dir.string() + ": " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) continue;  // removed while we looked: a change
    std::string line = it->path().lexically_relative(dir).generic_string();
    line += '\0';
    line += std::to_string(st.st_mode & S_IFMT) + ' ' + std::to_string(st.st_size) + ' ' +
            std::to_string(st.st_mtim.tv_sec) + '.' + std::to_string(st.st_mtim.tv_nsec);
    lines.push_back(std::move(line));
  }
  if (ec) return IoError("list " + dir.string() + ": " + ec.message());
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const std::string& line : lines) {
    out += line;
    out += '\n';
  }
  // An empty directory still differs from "never scanned".
  return out.empty() ? std::string("(empty)") : out;
}

}  // namespace

bool NaturalLess(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (IsDigit(a[i]) && IsDigit(b[j])) {
      size_t ei = i, ej = j;
      while (ei < a.size() && IsDigit(a[ei])) ++ei;
      while (ej < b.size() && IsDigit(b[ej])) ++ej;
      // Compare the numbers without leading zeros: longer is larger, then digit by digit.
      size_t zi = i, zj = j;
      while (zi + 1 < ei && a[zi] == '0') ++zi;
      while (zj + 1 < ej && b[zj] == '0') ++zj;
      const std::string_view na = a.substr(zi, ei - zi), nb = b.substr(zj, ej - zj);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ei;
      j = ej;
      continue;
    }
    if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
    ++i;
    ++j;
  }
  if ((i < a.size()) != (j < b.size())) return j < b.size();
  return a < b;  // equal but for zero padding: any fixed order will do
}

fs::path WatchStatePath(const fs::path& store_root, std::string_view channel) {
  // A dot name: never taken for a channel directory by the store.
  return store_root / (".publish-watch-" + std::string(channel));
}

Watcher::Watcher(WatchOptions options, const net::Clock& clock)
    : options_(std::move(options)), clock_(&clock) {}

Result<Watcher> Watcher::Open(WatchOptions options, const net::Clock& clock) {
  std::error_code ec;
  if (!fs::is_directory(options.dir, ec)) {
    return InvalidArgument("--watch " + options.dir.string() + ": not a directory");
  }
  if (options.settle < net::Duration::zero()) {
    return InvalidArgument("the settle time must not be negative");
  }
  Watcher watcher(std::move(options), clock);
  const fs::path& state = watcher.options_.state_file;
  if (fs::exists(state, ec)) {
    WC_ASSIGN_OR_RETURN(std::string text, ReadFileToString(state, kMaxStateBytes));
    size_t pos = text.find('\n');
    if (pos == std::string::npos || std::string_view(text).substr(0, pos) != kStateHeader) {
      return Corrupt(state.string() + ": not a weightcast publish watch state file");
    }
    ++pos;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) {
        // Written atomically, so a missing final newline means someone else wrote it.
        return Corrupt(state.string() + ": truncated last line");
      }
      if (end > pos) watcher.published_.insert(text.substr(pos, end - pos));
      pos = end + 1;
    }
  }
  return watcher;
}

Status Watcher::Save() const {
  std::string text(kStateHeader);
  text += '\n';
  for (const std::string& name : published_) {
    text += name;
    text += '\n';
  }
  return WriteFileAtomic(options_.state_file, text);
}

Status Watcher::MarkPublished(std::string_view name) {
  if (name.empty() || name.find('\n') != std::string_view::npos) {
    return InvalidArgument("a watched directory name must be non-empty and hold no newline");
  }
  auto [it, inserted] = published_.insert(std::string(name));
  if (!inserted) return Status::Ok();
  Status saved = Save();
  if (!saved.ok()) {
    published_.erase(it);  // the state on disk and in memory stay the same
    return saved.WithContext("saving " + options_.state_file.string());
  }
  tracked_.erase(std::string(name));
  return Status::Ok();
}

Result<std::vector<WatchEvent>> Watcher::Poll() {
  const net::TimePoint now = clock_->Now();
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(options_.dir, ec);
  if (ec) return IoError("list " + options_.dir.string() + ": " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.empty() || name.front() == '.') continue;
    if (!it->is_directory(ec) || it->is_symlink(ec)) continue;
    if (published_.contains(name)) continue;
    names.push_back(std::move(name));
  }
  if (ec) return IoError("list " + options_.dir.string() + ": " + ec.message());
  std::sort(names.begin(), names.end(), NaturalLess);

  // Forget directories that disappeared, so one that comes back starts over.
  for (auto t = tracked_.begin(); t != tracked_.end();) {
    t = std::binary_search(names.begin(), names.end(), t->first, NaturalLess) ? std::next(t)
                                                                              : tracked_.erase(t);
  }

  std::vector<WatchEvent> reports;
  std::vector<WatchEvent> ready;
  bool held_back = false;  // an earlier directory is still settling
  const std::string* newest = published_.empty() ? nullptr : &*published_.rbegin();
  for (const std::string& name : names) {
    const fs::path path = options_.dir / name;
    Result<std::string> fingerprint = Fingerprint(path);
    if (!fingerprint.ok()) continue;  // removed between listing and scanning
    Tracked& t = tracked_[name];
    if (t.fingerprint != *fingerprint) {
      t.fingerprint = std::move(*fingerprint);
      t.changed_at = now;
      t.reported = false;
    }
    if (t.reported) continue;
    if (newest != nullptr && NaturalLess(name, *newest)) {
      t.reported = true;
      reports.push_back({WatchEventKind::kSkippedOlder, name, path,
                         FailedPrecondition("sorts before " + *newest +
                                            ", which was already published; not publishing it "
                                            "as a newer version")});
      continue;
    }
    if (name.find('\n') != std::string::npos) {
      t.reported = true;
      reports.push_back({WatchEventKind::kBroken, name, path,
                         InvalidArgument("the directory name holds a newline")});
      continue;
    }
    if (now - t.changed_at < options_.settle) {
      held_back = true;
      continue;
    }
    Result<Checkpoint> checkpoint = OpenCheckpoint(path);
    if (!checkpoint.ok()) {
      t.reported = true;
      reports.push_back({WatchEventKind::kBroken, name, path, checkpoint.status()});
      continue;
    }
    if (!held_back) ready.push_back({WatchEventKind::kReady, name, path, Status::Ok()});
  }
  reports.insert(reports.end(), std::make_move_iterator(ready.begin()),
                 std::make_move_iterator(ready.end()));
  return reports;
}

}  // namespace weightcast::publish
