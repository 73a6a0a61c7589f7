// The versioned on-disk store of an agent or a publisher: per channel, the committed versions as
// plain directories of model files, a `current` symlink switched atomically, and staging areas
// where a version is received chunk by chunk and resumed after a restart.
// The layout and the crash-safety argument are in docs/store_layout.md.
//
// Guarantees:
// - A process killed at any instant leaves `current` at the old version or the new one, each
//   complete and durable; never a mix, never a dangling link.
// - Store::Open cleans what a crash left behind (temporary files and links, half-built staging
//   directories, half-collected versions) and finishes a commit that had passed its commit point.
// - A staging version whose chunks were recorded survives a restart (ResumeStaging).
//
// Thread-safety: every Store method is safe to call from any thread; mutations of a channel are
// serialized by one mutex per store. StagedVersion: WriteChunk/ReadChunk of distinct chunks may
// run concurrently from many threads; MarkVerified/HasChunk/MissingChunks/Flush are safe from any
// thread. Calls block on disk I/O (fsync included); none takes a network or a timer.
// MappedVersion views (store/mapped_version.h) are immutable and safe from any thread; one stays
// valid while held, even after its version is collected or its staging committed or aborted.
// One process holds a store at a time: Open takes an exclusive lock on ROOT/.lock, released when
// the Store is destroyed (or its process dies). Read-only opens take no lock and change nothing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "manifest/manifest.h"
#include "store/mapped_version.h"
#include "store/partial.h"

namespace weightcast {

struct StoreOptions {
  // Committed versions kept per channel, for rollback: the current one and the highest-numbered
  // ones below it that were not rolled back from, this many in all. Versions above the current
  // one (after a rollback) stay until a newer version is committed.
  uint32_t keep_versions = 2;
  // MarkVerified persists records in batches of this many chunks (Flush and Commit persist the
  // rest). A crash loses at most the unflushed batch: those chunks are fetched again.
  uint32_t record_batch = 64;
  // Opens without the lock and without recovery: List, Current, GetManifest, Verify and
  // ReadChunk work; anything that would change the store fails with kFailedPrecondition.
  bool read_only = false;
  // Mapped views of committed versions the store keeps open when no caller holds them (the most
  // recently opened), so repeated reads do not map the files again. A view a caller holds stays
  // cached whatever this is; one of a collected version is dropped from the cache at once.
  uint32_t mapped_versions = 4;
};

struct VersionInfo {
  Version version;
  bool current = false;
  bool has_manifest = false;  // false only when the store was damaged from outside
  Digest root{};
  uint64_t total_size = 0;
  uint32_t chunk_count = 0;
  bool partial = false;   // a tensor-subset agent's version: only some chunks held (CommitPartial)
  bool payloads = false;  // held as payloads (PartialVersion::payloads): no version to switch to
};

// How ImportDirectory brings a publisher's files into the store.
enum class ImportMode {
  kCopy,      // independent copies, reflinked where the filesystem can (the default; safe if the
              // source is modified later)
  kHardlink,  // no copy: the version shares inodes with the source, which must then never be
              // modified in place (Verify would report it). Same filesystem only.
};

namespace store {
struct StagingState;
class StoreImpl;
}  // namespace store

struct StagingOptions {
  // Reserve every file's blocks up front (fallocate), so that the disk cannot run out halfway.
  // Off: sparse files, for a version of which only some chunks are ever written (a partial
  // version); on tmpfs reserving also zeroes every page, which costs as much as writing it.
  bool preallocate = true;
};

// A version being received: its files exist at their full sizes under
// ROOT/<channel>/staging/<v>/files and fill as chunks arrive. A cheap handle; copies share state.
// After the version is committed or aborted every call fails with kFailedPrecondition.
class StagedVersion {
 public:
  const Manifest& manifest() const;
  const std::string& channel() const;
  Version version() const;

  // Writes the bytes of one chunk at its place in the flat byte space (pwrite; a chunk may span
  // files). `bytes` must be exactly the chunk's size. Does not verify or record the chunk.
  Status WriteChunk(ChunkIndex index, std::span<const uint8_t> bytes);
  // Writes `bytes` at `offset` inside the chunk (a piece of it, e.g. a decoder's block written as
  // it is produced; [offset, offset + size) must lie in the chunk). Like WriteChunk it neither
  // verifies nor records: until MarkVerified the chunk counts as missing, so a resume fetches it
  // again whatever was written.
  Status WriteChunkPart(ChunkIndex index, uint64_t offset, std::span<const uint8_t> bytes);
  // Records that the chunk's bytes were written and verified by the caller. Persisted in batches
  // (StoreOptions::record_batch); data files are fsynced before their records are written.
  Status MarkVerified(ChunkIndex index);
  // Checks `bytes` against the manifest's hash (kCorrupt if they differ: nothing is written),
  // then WriteChunk and MarkVerified.
  Status PutChunk(ChunkIndex index, std::span<const uint8_t> bytes);
  // Persists every pending record now.
  Status Flush();

  bool HasChunk(ChunkIndex index) const;
  std::vector<ChunkIndex> MissingChunks() const;
  uint32_t verified_count() const;
  bool complete() const;

  // The staging's mapped view (store/mapped_version.h): chunks read through it once verified,
  // for serving peers before the commit. The same view until the version is committed or
  // aborted (then kFailedPrecondition; views already handed out keep working).
  Result<std::shared_ptr<const MappedVersion>> View() const;
  // A copy of a verified chunk, read through View(). kNotFound if not verified.
  Result<std::vector<uint8_t>> ReadChunk(ChunkIndex index) const;

  // What ResumeStaging found in the chunk record (zero for a fresh staging).
  uint64_t discarded_record_bytes() const;

 private:
  friend class store::StoreImpl;
  explicit StagedVersion(std::shared_ptr<store::StagingState> state) : state_(std::move(state)) {}
  std::shared_ptr<store::StagingState> state_;
};

// A version's files brought into the store before its manifest exists (Store::StageImport), so
// that the manifest can be built from the store's own files: the bytes hashed are the bytes the
// version will serve. Move-only. Destroying it without Store::CommitImport removes the files; a
// crash leaves them for the next Store::Open to remove (they are never a version).
class ImportedFiles {
 public:
  ImportedFiles() = default;
  ImportedFiles(ImportedFiles&& other) noexcept;
  ImportedFiles& operator=(ImportedFiles&& other) noexcept;
  ImportedFiles(const ImportedFiles&) = delete;
  ImportedFiles& operator=(const ImportedFiles&) = delete;
  ~ImportedFiles();

  // The directory holding the files under their relative paths. Read them, never write them.
  const std::filesystem::path& dir() const { return dir_; }
  ImportMode mode() const { return mode_; }
  Version version() const { return version_; }

 private:
  friend class store::StoreImpl;
  // What a file looked like right after it was linked or copied in; CommitImport refuses a file
  // that no longer does (in hard-link mode the trainer shares the inode).
  struct Stamp {
    std::string path;
    uint64_t size = 0;
    uint64_t inode = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
  };
  void Release();

  std::string channel_;
  Version version_;
  ImportMode mode_ = ImportMode::kCopy;
  std::filesystem::path dir_;
  std::vector<Stamp> stamps_;
};

class Store {
 public:
  // Opens (creating if needed) the store at `root`. Unless read_only: takes the lock and
  // recovers every channel (see the header comment).
  static Result<Store> Open(const std::filesystem::path& root, const StoreOptions& options = {});

  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  ~Store();

  const std::filesystem::path& root() const;

  // Channels present under the root, sorted.
  Result<std::vector<std::string>> Channels() const;

  // Starts receiving `manifest` (validated; its channel must be `channel`; its version must be
  // neither committed nor staging). Creates the files at their sizes and persists the manifest
  // and an empty chunk record before it returns.
  Result<StagedVersion> BeginStaging(std::string_view channel, const Manifest& manifest,
                                     StagingOptions options = {});
  // Reopens a staging version after a restart, with the chunks its record holds.
  Result<StagedVersion> ResumeStaging(std::string_view channel, Version version);
  // Versions being staged in a channel, ascending.
  Result<std::vector<Version>> ListStaging(std::string_view channel) const;

  // Makes a fully verified staging version committed and current: fsyncs its files, moves them to
  // versions/<v>, switches `current` atomically, then collects old versions.
  // kFailedPrecondition (naming the missing count) if any chunk is not verified.
  Status Commit(std::string_view channel, Version version);
  // Commits a staging version of which a tensor-subset agent holds only some chunks: every chunk
  // of `wanted.chunks` must be verified (kFailedPrecondition naming the missing count). The
  // version is recorded partial (store/partial.h) with `wanted`'s patterns and tensors and the
  // chunks verified (those wanted, and any other verified before). Otherwise as Commit; a later
  // Commit of a version resumed whole drops a stale record.
  Status CommitPartial(std::string_view channel, Version version, const PartialVersion& wanted);
  // Drops a staging version and its files, first recording `reason` (empty: "dropped") where a
  // reader streaming the version finds it (store/abort_log.h).
  Status Abort(std::string_view channel, Version version, std::string_view reason = {});

  // Switches `current` to a kept committed version: `to`, or the highest kept version below the
  // current one. Nothing is fetched; file sizes are checked against the manifest first.
  Result<Version> Rollback(std::string_view channel, std::optional<Version> to = std::nullopt);

  // Committed versions, ascending.
  Result<std::vector<VersionInfo>> List(std::string_view channel) const;
  // The current version; kNotFound when the channel has none yet.
  Result<Version> Current(std::string_view channel) const;
  Result<Manifest> GetManifest(std::string_view channel, Version version) const;
  // What a partial committed version holds (nullopt for a whole one).
  Result<std::optional<PartialVersion>> GetPartial(std::string_view channel, Version version) const;
  // The directory an engine loads for a committed version (ROOT/<channel>/versions/<v>) and the
  // stable path of the current one (ROOT/<channel>/current).
  std::filesystem::path VersionPath(std::string_view channel, Version version) const;
  std::filesystem::path CurrentPath(std::string_view channel) const;
  // One more than the highest committed or staging version (1 for a new channel).
  Result<Version> NextVersion(std::string_view channel) const;

  // Re-hashes the files of a committed version against its manifest and checks the root (of a
  // partial version, the chunks it holds). kCorrupt naming the file and chunk on a mismatch, a
  // wrong size or a missing manifest.
  Status Verify(std::string_view channel, Version version) const;

  // The mapped view of a committed version (store/mapped_version.h), the read path for bytes
  // sent to peers: chunks as spans of the mapping, kept valid by their owner. Cached per version
  // (StoreOptions::mapped_versions), so a repeated call costs a map lookup under a mutex of its
  // own (not the store's, which a commit holds while it fsyncs). kNotFound when the version is
  // not committed; kCorrupt when a file's size is not the manifest's.
  Result<std::shared_ptr<const MappedVersion>> OpenView(std::string_view channel,
                                                        Version version) const;
  // A copy of a chunk of a committed version, read through OpenView (delta bases, tests).
  // kNotFound for a chunk a partial version does not hold.
  Result<std::vector<uint8_t>> ReadChunk(std::string_view channel, Version version,
                                         ChunkIndex index) const;

  // Commits the files of `dir` (the checkpoint `manifest` describes) as manifest.version through
  // staging: files are copied or hard-linked in, hashed against the manifest, then committed.
  Status ImportDirectory(std::string_view channel, const Manifest& manifest,
                         const std::filesystem::path& dir, ImportMode mode = ImportMode::kCopy);

  // The import in two steps, for a caller that builds the manifest from the store's own files
  // (publish::PrepareVersion: one pass over the bytes instead of hashing the source and then the
  // import again):
  // StageImport copies or hard-links `paths` (relative, as in a manifest) from `dir` into a
  // private directory of the store for `version` (neither committed nor staging). Nothing is
  // hashed. Fails (and leaves nothing behind) when a file is missing or is not a regular file.
  Result<ImportedFiles> StageImport(std::string_view channel, Version version,
                                    const std::vector<std::string>& paths,
                                    const std::filesystem::path& dir, ImportMode mode);
  // How the bytes of StageImportBytes reach the file the store opened for them: by default one
  // write loop; a publisher may spread the write over threads or idle time (publish/idle_write.h).
  // Must write every byte at its offset, or fail.
  using BytesWriter = std::function<Status(int fd, const std::string& what)>;
  // StageImport of one file held in memory: writes `bytes` as `path` (a top-level name) into the
  // private directory, without holding the store's lock during the write (a caller may hash the
  // same bytes meanwhile) and without an fsync (the commit makes the version durable). With
  // `write`, the file (created empty, sized to the bytes) is written by it.
  Result<ImportedFiles> StageImportBytes(std::string_view channel, Version version,
                                         const std::string& path, std::span<const uint8_t> bytes,
                                         const BytesWriter& write = nullptr);
  // Commits `files` as `manifest` (validated; same version, exactly the staged paths at their
  // sizes) WITHOUT hashing them again: the caller vouches that the manifest's chunk hashes were
  // computed from files.dir(). Refuses with kCorrupt, committing nothing, when a staged file was
  // modified, replaced or resized since StageImport (its size, inode, mtime or ctime changed).
  // The staged files are removed either way.
  Status CommitImport(std::string_view channel, const Manifest& manifest, ImportedFiles files);

  // Removes committed versions beyond the kept ones (never the current one). Returns the removed.
  Result<std::vector<Version>> CollectGarbage(std::string_view channel);
  // Removes every version held as payloads (PartialVersion::payloads), or only `only` when it is
  // one: their bytes were only ever whole in the live tensors of the sampler whose agent
  // committed them, which a new process no longer has (nor the same one once it moved on: a
  // rollback to one fetches it again). `current`, when removed, first moves to the newest
  // version left, or goes. Returns the removed.
  Result<std::vector<Version>> ForgetPayloadVersions(std::string_view channel,
                                                     std::optional<Version> only = std::nullopt);

 private:
  explicit Store(std::unique_ptr<store::StoreImpl> impl);
  std::unique_ptr<store::StoreImpl> impl_;
};

}  // namespace weightcast
