// The shared state behind a StagedVersion handle. Internal to the store layer.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "manifest/manifest.h"
#include "store/chunk_record.h"
#include "store/layout.h"
#include "store/mapped_version.h"
#include "store/store.h"

namespace weightcast::store {

struct StagingState {
  StagingState(ChannelLayout layout_in, std::string channel_in, Manifest manifest_in,
               uint32_t batch)
      : layout(std::move(layout_in)),
        channel(std::move(channel_in)),
        manifest(std::move(manifest_in)),
        record_batch(batch == 0 ? 1 : batch) {}
  ~StagingState();

  // Builds staging/<v> for `manifest` (ValidateManifest and path checks are the caller's): files
  // preallocated in a hidden partial directory, the manifest and an empty record written and
  // fsynced, then one rename publishes it. A crash before the rename leaves only the partial
  // directory, which Store::Open removes. With `import_from`, files are copied or linked from that
  // directory instead of preallocated.
  static Result<std::shared_ptr<StagingState>> Create(const ChannelLayout& layout,
                                                      std::string channel, const Manifest& manifest,
                                                      uint32_t batch,
                                                      const std::filesystem::path* import_from,
                                                      ImportMode mode, bool preallocate = true);
  // Reopens staging/<v>: reads its manifest, checks the files' sizes, loads the chunk record.
  static Result<std::shared_ptr<StagingState>> Load(const ChannelLayout& layout,
                                                    std::string channel, Version version,
                                                    uint32_t batch);

  Status WriteChunk(ChunkIndex index, std::span<const uint8_t> bytes);
  // Writes `bytes` at `offset` inside the chunk (a piece of it; the chunk stays unverified).
  Status WriteChunkPart(ChunkIndex index, uint64_t offset, std::span<const uint8_t> bytes);
  Status MarkVerified(ChunkIndex index);
  Status Flush();
  bool HasChunk(ChunkIndex index) const;
  // The staging's mapped view, made on first use and kept until Close (so uploads do not map
  // the files again per chunk); views handed out live on after Close for as long as they are
  // held. kFailedPrecondition once committed or aborted.
  static Result<std::shared_ptr<const MappedVersion>> View(
      const std::shared_ptr<const StagingState>& self);

  // For Commit: persists pending records, requires every chunk verified (or, when `required` is
  // given, those chunks), fsyncs every file and
  // directory of the version. Leaves the handles open: a commit that fails before its commit
  // point is retried with them; Commit calls Close once the files are a version.
  Status SealForCommit(const std::vector<ChunkIndex>* required = nullptr);
  // The verified chunks, ascending.
  std::vector<ChunkIndex> VerifiedChunks() const;
  // Closes the handles without syncing (Abort).
  void Close();

  const ChannelLayout layout;
  const std::string channel;
  const Manifest manifest;
  const uint32_t record_batch;

  // Shared by chunk I/O and flushes, exclusive to close. Lock order: io_mu, flush_mu, rec_mu.
  mutable std::shared_mutex io_mu;
  bool closed = false;
  std::vector<int> fds;                        // one per manifest file, O_RDWR
  std::unique_ptr<std::atomic<bool>[]> dirty;  // file written since its last fdatasync
  // One writer per file at a time. The kernel runs buffered writes to one file one at a time
  // anyway (the inode lock), and a writer that finds that lock held spins on it while the
  // holder copies: 4-8% of all CPU in the swarm benchmarks here (docs/store_layout.md). Waiting
  // here sleeps instead, leaving the CPU to other work.
  std::unique_ptr<std::mutex[]> write_mu;

  std::mutex flush_mu;        // one flush at a time; guards `record`
  mutable std::mutex rec_mu;  // guards verified, verified_count, pending
  std::vector<bool> verified;
  uint32_t verified_count = 0;
  std::vector<ChunkIndex> pending;  // verified, not yet in the record
  ChunkRecord record;
  // Every verified chunk at once, for streaming readers (io_mu: written shared, closed exclusive).
  LiveRecord live;
  uint64_t discarded_bytes = 0;

  // Lock order: io_mu, then view_mu. The view holds this state weakly, so no cycle.
  mutable std::mutex view_mu;
  mutable std::shared_ptr<const MappedVersion> view;

 private:
  // `create`: new files at their sizes, blocks reserved when `preallocate` (else sparse).
  Status OpenFiles(const std::filesystem::path& files_dir, bool create, bool preallocate = true);
  // Persists the queued records (io_mu held by the caller, shared or exclusive).
  Status FlushPending();
  Status CheckOpen() const;
};

}  // namespace weightcast::store
