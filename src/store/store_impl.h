// The implementation behind Store. Internal to the store layer.
#pragma once

#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "store/layout.h"
#include "store/staging.h"
#include "store/store.h"

namespace weightcast::store {

class StoreImpl {
 public:
  StoreImpl(std::filesystem::path root, StoreOptions options, int lock_fd)
      : root_(std::move(root)), options_(options), lock_fd_(lock_fd) {}
  ~StoreImpl();

  static Result<std::unique_ptr<StoreImpl>> Open(const std::filesystem::path& root,
                                                 const StoreOptions& options);

  const std::filesystem::path& root() const { return root_; }
  ChannelLayout Layout(std::string_view channel) const { return ChannelLayout(root_, channel); }

  Result<std::vector<std::string>> Channels() const;
  Result<StagedVersion> BeginStaging(std::string_view channel, const Manifest& manifest,
                                     StagingOptions options);
  Result<StagedVersion> ResumeStaging(std::string_view channel, Version version);
  Result<std::vector<Version>> ListStaging(std::string_view channel) const;
  Status Commit(std::string_view channel, Version version);
  Status CommitPartial(std::string_view channel, Version version, const PartialVersion& wanted);
  Status Abort(std::string_view channel, Version version, std::string_view reason);
  Result<Version> Rollback(std::string_view channel, std::optional<Version> to);
  Result<std::vector<VersionInfo>> List(std::string_view channel) const;
  Result<Version> Current(std::string_view channel) const;
  Result<Manifest> GetManifest(std::string_view channel, Version version) const;
  Result<std::optional<PartialVersion>> GetPartial(std::string_view channel, Version version) const;
  Result<Version> NextVersion(std::string_view channel) const;
  Status Verify(std::string_view channel, Version version) const;
  Result<std::shared_ptr<const MappedVersion>> OpenView(std::string_view channel,
                                                        Version version) const;
  Result<std::vector<uint8_t>> ReadChunk(std::string_view channel, Version version,
                                         ChunkIndex index) const;
  Status ImportDirectory(std::string_view channel, const Manifest& manifest,
                         const std::filesystem::path& dir, ImportMode mode);
  Result<ImportedFiles> StageImport(std::string_view channel, Version version,
                                    const std::vector<std::string>& paths,
                                    const std::filesystem::path& dir, ImportMode mode);
  Result<ImportedFiles> StageImportBytes(std::string_view channel, Version version,
                                         const std::string& path, std::span<const uint8_t> bytes,
                                         const Store::BytesWriter& write);
  Status CommitImport(std::string_view channel, const Manifest& manifest, ImportedFiles files);
  Result<std::vector<Version>> CollectGarbage(std::string_view channel);
  Result<std::vector<Version>> ForgetPayloadVersions(std::string_view channel,
                                                     std::optional<Version> only);

 private:
  using Key = std::pair<std::string, uint64_t>;

  Status CheckWritable() const;
  // Size, inode and times of the regular file at `path` (kInvalidArgument for anything else).
  // The private directory of an import of `version` (StageImport), empty (mu_ held).
  Result<ImportedFiles> BeginImportLocked(std::string_view channel, Version version,
                                          ImportMode mode);
  static Result<ImportedFiles::Stamp> StampOf(const std::filesystem::path& path,
                                              std::string relative);
  // Checks a manifest offered as a new version of `channel` (no lock needed: touches no state).
  Status CheckNewVersion(std::string_view channel, const Manifest& manifest) const;
  // Creates and registers the staging of a version that is neither committed nor staging
  // (mu_ held). `source` (may be null) is a directory whose files are brought in with `mode`.
  Result<std::shared_ptr<StagingState>> CreateStagingLocked(std::string_view channel,
                                                            const Manifest& manifest,
                                                            const std::filesystem::path* source,
                                                            ImportMode mode,
                                                            StagingOptions options = {});
  // Drops a staging that will not be committed and returns `why` (mu_ held).
  Status DropStagingLocked(std::string_view channel, StagingState& state, Status why);
  // Records every chunk of a staging whose files were brought in whole and already checked
  // against the manifest, and commits it; on failure the staging is dropped (mu_ held).
  Status CommitWholeStagingLocked(std::string_view channel, StagingState& state);
  // Removes committed version `v` (never `current`: the caller moved it), mu_ held.
  Status RemoveVersionLocked(const ChannelLayout& layout, std::string_view channel, Version v);
  // Recovery of one channel at Open (store_recovery.cc).
  Status RecoverChannel(const std::string& channel);
  // Switches `current` (mu_ held).
  Status SwitchCurrentLocked(const ChannelLayout& layout, Version version);
  // `partial` (may be null: a whole version) is the record of a tensor-subset commit.
  Status CommitLocked(std::string_view channel, Version version,
                      const PartialVersion* partial = nullptr);
  Status FinishCommitLocked(const ChannelLayout& layout, std::string_view channel, Version v);
  Result<std::vector<Version>> CollectLocked(std::string_view channel);
  // The versions rolled back from (ChannelLayout::withdrawn_file), and their replacement.
  Result<std::set<Version>> WithdrawnLocked(const ChannelLayout& layout) const;
  Status WriteWithdrawnLocked(const ChannelLayout& layout, const std::set<Version>& withdrawn);
  Result<std::vector<Version>> CommittedLocked(const ChannelLayout& layout) const;
  Result<Version> CurrentLocked(const ChannelLayout& layout) const;
  Result<Manifest> ManifestLocked(std::string_view channel, Version version) const;
  // The same, shared: no copy of the manifest (a chunk read should not copy 8,192 hashes).
  Result<std::shared_ptr<const Manifest>> SharedManifestLocked(std::string_view channel,
                                                               Version version) const;
  // The partial record of a committed version (null: whole), read once.
  Result<std::shared_ptr<const PartialVersion>> PartialLocked(std::string_view channel,
                                                              Version version) const;
  // The cached view of a committed version, or null (views_mu_ taken here).
  std::shared_ptr<const MappedVersion> CachedView(const Key& key) const;
  // Caches a view just mapped, keeping the newest options_.mapped_versions strongly.
  void RememberView(const Key& key, const std::shared_ptr<const MappedVersion>& view) const;
  // Drops the cache's references to a version being collected (mu_ held).
  void ForgetView(const Key& key);
  Result<std::shared_ptr<StagingState>> StagingLocked(std::string_view channel, Version version);
  Status CheckSizesLocked(const ChannelLayout& layout, const Manifest& manifest) const;

  const std::filesystem::path root_;
  const StoreOptions options_;
  const int lock_fd_;

  mutable std::mutex mu_;
  // Staging versions with a live handle, so that every handle and Commit see one state.
  std::map<Key, std::weak_ptr<StagingState>> staging_;
  // Manifests of committed versions, read once (they are immutable once committed).
  mutable std::map<Key, std::shared_ptr<const Manifest>> manifests_;
  // Partial records of committed versions (null: whole), read once.
  mutable std::map<Key, std::shared_ptr<const PartialVersion>> partials_;

  // Mapped views of committed versions. Lock order: mu_, then views_mu_; a hit takes views_mu_
  // alone, a miss maps under mu_, so that a collection (under mu_) cannot interleave with it.
  mutable std::mutex views_mu_;
  // Every view made and still alive somewhere (expired entries are pruned as views are added).
  mutable std::map<Key, std::weak_ptr<const MappedVersion>> views_;
  // The most recently opened views, kept alive while no caller holds them; oldest first.
  mutable std::deque<std::pair<Key, std::shared_ptr<const MappedVersion>>> kept_views_;
};

}  // namespace weightcast::store
