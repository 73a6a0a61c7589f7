// A read-only, reference-counted view of one version's bytes through mmaps of its files: the
// store's one read path for bytes that leave the node (uploads to peers, the fetch server) and
// for readers that want a copy (Store::ReadChunk, StagedVersion::ReadChunk). Why the bytes stay
// valid while a view is held, whatever the store does meanwhile, is argued in
// docs/store_layout.md, "Reading through a mapped view".
//
// Thread-safety: a view is immutable once made; every method is safe from any thread. Nothing
// here blocks on disk I/O: pages fault in when the bytes are read (by whoever reads them, e.g.
// the transport writing them to a socket). A chunk that spans files is the exception: Chunk
// gathers it into a buffer of its own, which reads its pages then.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "manifest/manifest.h"
#include "store/partial.h"
#include "util/file.h"
#include "util/held_bytes.h"

namespace weightcast {

namespace store {
struct StagingState;
}  // namespace store

class MappedVersion : public std::enable_shared_from_this<MappedVersion> {
 public:
  // Maps every file of a committed version (in `dir`) read-only. kCorrupt when a file's size is
  // not the manifest's (reading past its end would fault). `partial` null: a whole version.
  static Result<std::shared_ptr<const MappedVersion>> MapCommitted(
      const std::filesystem::path& dir, std::string channel,
      std::shared_ptr<const Manifest> manifest, std::shared_ptr<const PartialVersion> partial);
  // Maps the files of a staging through its open descriptors (the caller holds its io_mu
  // shared and has checked that it is open). Its chunks read once they are verified; the view
  // keeps the staging state only weakly (the state keeps its view: StagingState::View).
  static Result<std::shared_ptr<const MappedVersion>> MapStaging(
      const std::shared_ptr<const store::StagingState>& state);

  MappedVersion(const MappedVersion&) = delete;
  MappedVersion& operator=(const MappedVersion&) = delete;
  ~MappedVersion();

  const Manifest& manifest() const { return *manifest_; }
  const std::string& channel() const { return channel_; }
  Version version() const { return manifest_->version; }
  bool staging() const { return staging_; }
  bool partial() const { return partial_ != nullptr; }

  // Whether Chunk(index) would return bytes now: in range and held (a partial version holds
  // only some chunks; a staging only those verified so far).
  bool Holds(ChunkIndex index) const;

  // The bytes of chunk `index`: a view of the mapping when the chunk lies in one file (owner:
  // this view), else gathered into a buffer of its own (owner: that buffer; one per call, freed
  // with its owner, so the buffers alive are the reads in flight, not a function of the model's
  // size). kOutOfRange beyond the last chunk; kNotFound for a chunk a partial version does not
  // hold or a staging has not verified yet; kFailedPrecondition when every handle of a staging
  // is gone (its record of what is verified with them).
  Result<HeldBytes> Chunk(ChunkIndex index) const;

  // The mapped bytes of file `index` of the manifest (empty for an empty file), for readers
  // that take files whole. Holes (of a partial version, an unfinished staging) read as whatever
  // is on disk: ask Holds first.
  std::span<const uint8_t> File(size_t index) const { return files_[index].bytes(); }

  // Bytes Chunk copied so far for chunks that span files (the only copies this view makes).
  uint64_t gathered_bytes() const { return gathered_bytes_.load(std::memory_order_relaxed); }

 private:
  MappedVersion(std::string channel, std::shared_ptr<const Manifest> manifest,
                std::shared_ptr<const PartialVersion> partial,
                std::weak_ptr<const store::StagingState> staging_state,
                std::vector<MappedFile> files);

  // Why chunk `index` cannot be read (OK when it can).
  Status CheckHeld(ChunkIndex index) const;

  const std::string channel_;
  const std::shared_ptr<const Manifest> manifest_;
  const std::shared_ptr<const PartialVersion> partial_;
  const bool staging_;
  const std::weak_ptr<const store::StagingState> staging_state_;
  const std::vector<MappedFile> files_;
  mutable std::atomic<uint64_t> gathered_bytes_{0};
};

}  // namespace weightcast
