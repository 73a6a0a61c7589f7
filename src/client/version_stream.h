// A version read while it is still arriving (docs/streaming.md): the reader side of a store an
// agent writes. Each tensor is handed over once every chunk it spans is verified, as a read-only
// span of the version's files, mapped once.
//
// What tells a reader a chunk is verified is the staging's live record (store/chunk_record.h,
// LiveRecord): the agent appends a chunk there as soon as it checked the chunk against the signed
// manifest and wrote it, so a listed chunk's bytes are final and in the page cache. (The durable
// chunk record is written in synced batches, for resuming; waiting for it would hand tensors over
// a batch late.) The reader changes nothing in the store and takes no lock; it polls the live
// record (a stat and a read every few ms) while chunks arrive. The version ends committed (its
// files became versions/<v>: every chunk verified) or aborted (its staging went away; the reason
// is in the channel's abort log, store/abort_log.h).
//
// Thread-safety: none; one caller at a time.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/tensor.h>
#include <weightcast/types.h>

#include "manifest/manifest.h"
#include "store/chunk_record.h"
#include "store/layout.h"
#include "util/file.h"

namespace weightcast::client {

struct StreamSpec {
  std::filesystem::path store;
  std::string channel;
  Version version;
  // Tensor names handed over first, in this order; the rest as their chunks complete.
  std::vector<std::string> order;
  // Only the tensors matching one of these globs (a tensor-subset agent's); empty: all.
  std::vector<std::string> patterns;
  // How long a poll that found nothing new sleeps.
  std::chrono::milliseconds poll{2};
  // Checked between polls: true ends a wait with kAborted (the subscriber was closed).
  std::function<bool()> closed;
};

class VersionStreamCore {
 public:
  using Clock = std::chrono::steady_clock;

  // Waits (until `deadline`) for the version to be staging or committed in the store, reads
  // its manifest and maps its files. kInvalidArgument for an `order` name the version lacks;
  // kAborted when the version was aborted (the reason) or the subscriber closed; kNotFound when
  // the store's current version is past it and the store does not hold it (collected, or
  // skipped); kDeadlineExceeded.
  static Result<std::unique_ptr<VersionStreamCore>> Open(StreamSpec spec,
                                                         std::optional<Clock::time_point> deadline);
  ~VersionStreamCore();
  VersionStreamCore(const VersionStreamCore&) = delete;
  VersionStreamCore& operator=(const VersionStreamCore&) = delete;

  // The next tensor every chunk of which is verified, nullopt after the last. Blocks until one
  // is ready. kAborted (with the abort's reason) when the version is dropped before every
  // tensor was handed over; kDeadlineExceeded; kCorrupt for a damaged chunk record.
  Result<std::optional<TensorView>> Next(std::optional<Clock::time_point> deadline);
  // Blocks until the version is committed (OK) or aborted (kAborted, the reason).
  Status WaitCommitted(std::optional<Clock::time_point> deadline);

  const Manifest& manifest() const { return manifest_; }
  Version version() const { return spec_.version; }
  size_t tensor_count() const { return tensors_.size(); }
  size_t handed_over() const { return handed_; }
  bool committed() const { return committed_; }
  // The chunks in the order the stream wants them (the `order` tensors' chunks first, then the
  // rest ascending), for an agent that fetches them in that order.
  std::vector<ChunkIndex> WantedChunkOrder() const;
  // Where a tensor handed over lies: its file (an index into manifest().files) and offset.
  const ManifestTensor& tensor_info(size_t i) const { return *tensors_[i].info; }
  // The index (into tensor_info) of the tensor Next last returned.
  size_t last_index() const { return last_; }
  // Descriptors of the version's files, open read-only, owned here.
  int file_descriptor(size_t file) const;

 private:
  struct Tensor {
    const ManifestTensor* info = nullptr;
    uint32_t missing = 0;  // chunks of it not verified yet
    bool ready = false;
  };

  explicit VersionStreamCore(StreamSpec spec)
      : spec_(std::move(spec)), layout_(spec_.store, spec_.channel) {}
  // Whether the staging this stream reads is still there (not committed, aborted or replaced).
  bool StagingPresent() const;
  // Reads the manifest and maps the files of the staging (committed = false) or of the
  // committed version; kUnavailable when they moved meanwhile (try again).
  Status Load(bool committed);
  Status Prepare();
  // Takes what the record gained; notices a commit or an abort. True when anything changed.
  Result<bool> Poll();
  void Verified(ChunkIndex chunk);
  void AllVerified();
  // kAborted with the recorded reason, when the staging is gone and the version not committed.
  Status Gone() const;
  Status Sleep(std::optional<Clock::time_point> deadline, const std::string& waiting) const;
  TensorView View(const Tensor& t) const;

  StreamSpec spec_;
  store::ChannelLayout layout_;
  Manifest manifest_;
  std::vector<MappedFile> files_;
  std::vector<int> fds_;
  std::optional<store::ChunkRecordReader> record_;
  uint64_t record_inode_ = 0;  // of the staging's durable record: another is another staging
  uint64_t live_inode_ = 0;    // of the live record being read
  std::vector<bool> seen_;     // chunks verified so far
  bool committed_ = false;
  std::vector<Tensor> tensors_;
  std::vector<std::vector<uint32_t>> chunk_tensors_;  // per chunk, the tensors spanning it
  std::vector<size_t> order_;                         // indices into tensors_, from spec.order
  std::vector<bool> ordered_;                         // per tensor: in order_
  size_t next_in_order_ = 0;
  std::vector<size_t> ready_;  // ready tensors not in `order_`, in the order they became ready
  size_t ready_at_ = 0;
  size_t handed_ = 0;
  size_t last_ = 0;
};

}  // namespace weightcast::client
