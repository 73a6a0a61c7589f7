#include "client/store_follower.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "manifest/builder.h"
#include "store/store.h"

namespace weightcast::client {

namespace {

// Manifests a follower remembers for changed(); older ones are read again from the store while
// it keeps them.
constexpr size_t kRememberedManifests = 16;
// Upper bound of one sleep: inotify wakes a waiter at once, this only bounds how late it notices
// a store root or channel directory created after it started watching their parent.
constexpr auto kMaxSleep = std::chrono::milliseconds(100);

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

StoreFollower::StoreFollower(std::filesystem::path root, std::string channel, UniqueFd inotify,
                             UniqueFd wake, std::chrono::nanoseconds store_grace)
    : root_(std::move(root)),
      channel_(std::move(channel)),
      created_(std::chrono::steady_clock::now()),
      store_grace_(store_grace),
      inotify_(std::move(inotify)),
      wake_(std::move(wake)) {}

StoreFollower::~StoreFollower() = default;

Result<std::unique_ptr<StoreFollower>> StoreFollower::Create(std::filesystem::path root,
                                                             std::string channel,
                                                             std::chrono::nanoseconds store_grace) {
  if (root.empty()) return InvalidArgument("store path is empty");
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  UniqueFd inotify(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (inotify.get() < 0) return ErrnoStatus("inotify_init1", errno);
  UniqueFd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (wake.get() < 0) return ErrnoStatus("eventfd", errno);
  return std::unique_ptr<StoreFollower>(new StoreFollower(
      std::move(root), std::move(channel), std::move(inotify), std::move(wake), store_grace));
}

Status StoreFollower::CheckRootIsStore() const {
  // Every process that holds a store creates ROOT/.lock right after ROOT (docs/store_layout.md),
  // so a directory without it is a store only while it is still empty.
  std::error_code ec;
  const auto root_status = std::filesystem::status(root_, ec);
  bool missing = !std::filesystem::exists(root_status);
  if (!missing && !std::filesystem::is_directory(root_status)) {
    return FailedPrecondition(root_.string() +
                              " is not a weightcast store (it is a file, not a directory)");
  }
  if (!missing && !std::filesystem::exists(root_ / ".lock", ec)) {
    // Checked again after is_empty: a process creating the store may have made .lock between
    // the two looks, and a directory holding only .lock is not empty.
    if (!std::filesystem::is_empty(root_, ec) && !ec &&
        !std::filesystem::exists(root_ / ".lock", ec)) {
      return FailedPrecondition(
          root_.string() +
          " is not a weightcast store (no .lock; a store is the --store directory of a "
          "weightcast agent, or the store= of a Publisher)");
    }
    missing = true;
  }
  if (missing && std::chrono::steady_clock::now() - created_ >= store_grace_) {
    return NotFound(
        "no weightcast store at " + root_.string() + " after " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(store_grace_).count()) +
        " s: is a weightcast agent running with --store " + root_.string() +
        ", or a Publisher with store=" + root_.string() + "?");
  }
  return Status::Ok();
}

void StoreFollower::Close() {
  closed_.store(true);
  const uint64_t one = 1;
  // A full eventfd counter already wakes every poll; nothing to do on failure.
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
}

void StoreFollower::Remember(const std::shared_ptr<const Manifest>& manifest) {
  std::lock_guard lock(mu_);
  seen_[manifest->version.value()] = manifest;
  while (seen_.size() > kRememberedManifests) seen_.erase(seen_.begin());
}

Result<std::shared_ptr<const Manifest>> StoreFollower::ManifestOf(Version version) {
  {
    std::lock_guard lock(mu_);
    auto it = seen_.find(version.value());
    if (it != seen_.end()) return it->second;
  }
  // A fresh read-only open per lookup: it stats the root and nothing else, and unlike a long-lived
  // Store it caches no manifest beyond this call.
  StoreOptions options;
  options.read_only = true;
  WC_ASSIGN_OR_RETURN(Store store, Store::Open(root_, options));
  auto manifest = store.GetManifest(channel_, version);
  if (!manifest.ok()) {
    if (manifest.status().code() == Code::kNotFound) {
      return NotFound("version " + std::to_string(version.value()) + " of channel " + channel_ +
                      " was never received here and is not in the store " + root_.string());
    }
    return manifest.status();
  }
  return std::make_shared<const Manifest>(std::move(manifest).value());
}

Result<std::optional<OpenedVersion>> StoreFollower::TryOpenCurrent(Version min_version) {
  WC_RETURN_IF_ERROR(CheckRootIsStore());
  StoreOptions options;
  options.read_only = true;
  auto store = Store::Open(root_, options);
  if (!store.ok()) {
    if (store.status().code() == Code::kNotFound) return std::optional<OpenedVersion>();
    return store.status();
  }
  auto current = store->Current(channel_);
  if (!current.ok()) {
    if (current.status().code() == Code::kNotFound) return std::optional<OpenedVersion>();
    // `current` pointing at a directory that is gone: the store collected it after a newer
    // switch, between our readlink and stat. Look again.
    if (current.status().code() == Code::kCorrupt &&
        !std::filesystem::exists(store->CurrentPath(channel_))) {
      return std::optional<OpenedVersion>();
    }
    return current.status();
  }
  if (*current < min_version) return std::optional<OpenedVersion>();

  OpenedVersion opened;
  opened.channel = channel_;
  opened.version = *current;
  opened.dir = store->VersionPath(channel_, *current);
  {
    std::lock_guard lock(mu_);
    auto it = seen_.find(current->value());
    if (it != seen_.end()) opened.manifest = it->second;
  }
  if (opened.manifest == nullptr) {
    auto manifest = store->GetManifest(channel_, *current);
    if (!manifest.ok()) {
      if (manifest.status().code() == Code::kNotFound) return std::optional<OpenedVersion>();
      return manifest.status();
    }
    opened.manifest = std::make_shared<const Manifest>(std::move(manifest).value());
  }
  // Read before the files are opened: a version collected meanwhile then fails to open below
  // (and is looked for again) instead of passing for whole.
  auto partial = store->GetPartial(channel_, *current);
  if (!partial.ok()) {
    if (partial.status().code() == Code::kNotFound) return std::optional<OpenedVersion>();
    return partial.status();
  }
  if (*partial) opened.partial = std::make_shared<const PartialVersion>(std::move(**partial));
  opened.files.reserve(opened.manifest->files.size());
  for (const ManifestFile& file : opened.manifest->files) {
    const std::filesystem::path path = opened.dir / file.path;
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      if (errno == ENOENT) return std::optional<OpenedVersion>();  // collected meanwhile
      return ErrnoStatus("open(" + path.string() + ")", errno);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("fstat(" + path.string() + ")", errno);
    if (static_cast<uint64_t>(st.st_size) != file.size) {
      return Corrupt(path.string() + " has " + std::to_string(st.st_size) +
                     " bytes; the manifest of version " + std::to_string(current->value()) +
                     " says " + std::to_string(file.size));
    }
    opened.files.push_back(std::move(fd));
  }
  Remember(opened.manifest);
  return std::optional<OpenedVersion>(std::move(opened));
}

void StoreFollower::Sleep(std::chrono::steady_clock::time_point until) {
  // Watch whatever exists of ROOT/<channel>: the channel directory (where `current` is renamed
  // into place) and the root (where the channel directory appears). Adding a watch that exists
  // only refreshes it. A failure leaves the bounded sleep below as the fallback.
  const std::filesystem::path channel_dir = root_ / channel_;
  (void)::inotify_add_watch(inotify_.get(), channel_dir.c_str(),
                            IN_MOVED_TO | IN_CREATE | IN_DELETE_SELF | IN_ONLYDIR);
  (void)::inotify_add_watch(inotify_.get(), root_.c_str(), IN_CREATE | IN_MOVED_TO | IN_ONLYDIR);
  const auto now = std::chrono::steady_clock::now();
  if (now >= until) return;
  const auto wait = std::min<std::chrono::steady_clock::duration>(until - now, kMaxSleep);
  const int wait_ms = static_cast<int>(
      std::max<int64_t>(1, std::chrono::ceil<std::chrono::milliseconds>(wait).count()));
  pollfd fds[2] = {{inotify_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
  if (::poll(fds, 2, wait_ms) > 0 && (fds[0].revents & POLLIN)) {
    alignas(inotify_event) char buffer[4096];
    while (::read(inotify_.get(), buffer, sizeof(buffer)) > 0) {
    }
  }
}

Result<Version> StoreFollower::Current() const {
  StoreOptions options;
  options.read_only = true;
  WC_ASSIGN_OR_RETURN(Store store, Store::Open(root_, options));
  return store.Current(channel_);
}

std::string StoreFollower::Describe(Version min_version) const {
  const std::string wanted = min_version.value() == 0
                                 ? std::string("committed version")
                                 : "version " + std::to_string(min_version.value());
  return "no " + wanted + " of channel " + channel_ + " in store " + root_.string();
}

Result<OpenedVersion> StoreFollower::Wait(Version min_version,
                                          std::optional<std::chrono::nanoseconds> timeout) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline =
      timeout ? start + std::chrono::ceil<std::chrono::steady_clock::duration>(*timeout)
              : std::chrono::steady_clock::time_point::max();
  while (true) {
    if (closed_.load()) return Aborted("subscriber closed");
    WC_ASSIGN_OR_RETURN(std::optional<OpenedVersion> opened, TryOpenCurrent(min_version));
    if (opened) return std::move(*opened);
    if (std::chrono::steady_clock::now() >= deadline) {
      return DeadlineExceeded(
          Describe(min_version) + " within " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(*timeout).count()) +
          " ms");
    }
    Sleep(deadline);
  }
}

}  // namespace weightcast::client
