// Waiting for a channel's committed version in a store on this machine and opening its files:
// the reading half of weightcast::Subscriber (subscriber.cc).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "manifest/manifest.h"
#include "store/partial.h"

namespace weightcast::client {

// An owned file descriptor, closed on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// The files of one committed version, open. Open descriptors keep the bytes readable even when
// the store later collects the version (its files are unlinked, not overwritten: committed files
// are never modified in place).
struct OpenedVersion {
  std::string channel;
  Version version;
  std::filesystem::path dir;  // ROOT/<channel>/versions/<v> when it was opened
  std::shared_ptr<const Manifest> manifest;
  // Of a tensor-subset agent's version (store/partial.h): only these tensors' bytes are real.
  // Null for a whole version.
  std::shared_ptr<const PartialVersion> partial;
  std::vector<UniqueFd> files;  // one per manifest->files entry, same order, sizes checked
};

// Follows one channel of a store on this machine, read-only (the store is maintained by an agent
// in this process or another one). Never changes the store and takes no lock, so it can run
// beside the agent that holds the store.
//
// Thread-safety: every method is safe from any thread. Waits in several threads at once share
// one inotify queue, so all but one may notice a change up to 100 ms late. Wait blocks (see
// below); nothing else blocks beyond reading small files.
class StoreFollower {
 public:
  // How long `root` may be missing (or an empty directory) before Wait gives up on it.
  static constexpr std::chrono::seconds kStoreGrace{5};

  // `root` need not exist yet (the agent may not have created it), but once `store_grace` has
  // passed since Create a Wait that still finds no store there fails with kNotFound, and a
  // `root` that is a file, or a directory with files but without a store's `.lock`, fails
  // every Wait at once (kFailedPrecondition): waiting on a path that is not a store would never
  // end. `channel` must be a valid channel name (kInvalidArgument otherwise).
  static Result<std::unique_ptr<StoreFollower>> Create(
      std::filesystem::path root, std::string channel,
      std::chrono::nanoseconds store_grace = kStoreGrace);
  ~StoreFollower();
  StoreFollower(const StoreFollower&) = delete;
  StoreFollower& operator=(const StoreFollower&) = delete;

  // Blocks until the channel's current version is at least `min_version` (any version when it is
  // 0), then opens it. Wakes on changes of the store (inotify), so it returns within
  // milliseconds of a commit. kDeadlineExceeded when `timeout` passes first (nullopt: no limit),
  // kAborted after Close(). Errors of the store other than "nothing committed yet" are returned.
  Result<OpenedVersion> Wait(Version min_version, std::optional<std::chrono::nanoseconds> timeout);

  // The manifest of a version this follower opened before, or else of a committed version still
  // in the store. kNotFound otherwise.
  Result<std::shared_ptr<const Manifest>> ManifestOf(Version version);

  // The channel's current version in the store (kNotFound when none yet).
  Result<Version> Current() const;

  // "no version 3 of channel policy in store /x": what a Wait for `min_version` waits for.
  std::string Describe(Version min_version) const;

  // Makes a blocked Wait (and later ones) return kAborted. Idempotent.
  void Close();

  const std::filesystem::path& root() const { return root_; }
  const std::string& channel() const { return channel_; }

 private:
  StoreFollower(std::filesystem::path root, std::string channel, UniqueFd inotify, UniqueFd wake,
                std::chrono::nanoseconds store_grace);
  // OK when `root` is a store, or may still become one within the grace; see Create.
  Status CheckRootIsStore() const;
  // The current version opened, or nullopt when the channel has none yet (or the version was
  // collected between reading `current` and opening its files: the caller looks again).
  Result<std::optional<OpenedVersion>> TryOpenCurrent(Version min_version);
  // Sleeps until the store may have changed, `until` passes or Close() is called.
  void Sleep(std::chrono::steady_clock::time_point until);
  void Remember(const std::shared_ptr<const Manifest>& manifest);

  const std::filesystem::path root_;
  const std::string channel_;
  const std::chrono::steady_clock::time_point created_;
  const std::chrono::nanoseconds store_grace_;
  UniqueFd inotify_;
  UniqueFd wake_;  // eventfd written by Close
  std::atomic<bool> closed_{false};

  std::mutex mu_;
  // Manifests this follower returned, newest last; bounded so a long run does not grow.
  std::map<uint64_t, std::shared_ptr<const Manifest>> seen_;
};

}  // namespace weightcast::client
