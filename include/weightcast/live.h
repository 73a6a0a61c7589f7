// Live tensors: the memory a sampler serves from, updated in place from the versions of a store
// on this machine (docs/live.md).
//
//   auto live = weightcast::LiveTensors::Register({{"w", "BF16", {4096, 4096}, ptr, bytes}});
//   // ... a Subscriber says version 7 is committed in /dev/shm/wc (channel "policy") ...
//   auto report = (*live)->ApplyFromStore("/dev/shm/wc", "policy", weightcast::Version(7));
//
// When the tensors hold the version a delta names as its base, only the payloads are read and
// only the changed elements rewritten; each rewritten chunk is then checked against the
// version's manifest, and one that does not match is copied whole from the store. Otherwise the
// chunks that differ are copied from the version's files and checked.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/device_memory.h>
#include <weightcast/options.h>
#include <weightcast/status.h>
#include <weightcast/tensor.h>
#include <weightcast/types.h>

namespace weightcast {

// One tensor's memory, owned by the caller, which keeps it alive and does not read it during an
// apply (in place) or keeps a second copy to read meanwhile (flip). C-contiguous, little-endian.
struct LiveTensorView {
  std::string name;
  std::string dtype;  // as spelled in safetensors: "BF16", "F32", "F8_E4M3", ...
  std::vector<uint64_t> shape;
  void* data = nullptr;
  uint64_t size = 0;  // bytes; must equal dtype x shape
};

// What a sampler's live tensors hold, as a digest the coordinator compares with the version's
// (docs/live.md, "Attestation").
struct LiveAttestation {
  Version version;       // the version the tensors hold
  std::string digest;    // 32 lowercase hex digits
  bool matches = false;  // equal to the digest of the version's signed bytes
  // Every tensor of the version is registered: the digest covers no bytes read from the store
  // but the files' headers (Subscriber::SetLiveBase needs it).
  bool every_tensor = false;
  double seconds = 0;  // the hash pass over the tensors
};

struct LiveApplyReport {
  Version from;        // the version the tensors held (0: none known)
  Version to;          // the version they hold now
  bool delta = false;  // patched from payloads (only changed elements written)
  uint32_t chunks_patched = 0;
  uint32_t chunks_copied = 0;
  uint32_t chunks_unchanged = 0;
  uint32_t chunks_repaired = 0;  // patched, failed the manifest's check, copied whole
  uint64_t payload_bytes = 0;    // payload bytes read
  uint64_t copied_bytes = 0;     // bytes copied from the version's files
  bool caught_up = false;        // every chunk first taken from the flip's other copy
  // What each chunk written was checked with: "xxh3-128" (the version's fast hashes), its chunk
  // hash algorithm, or "wsum-128" (its device checks, computed in device memory).
  std::string check;
  double seconds = 0;  // time the tensors were being written
  std::string note;    // why no delta was used, or what was repaired
  // The attestation of the tensors as the apply left them, when it hashed every chunk (a
  // flip's catch-up, a first apply): Attest right after it, without its pass. Its `seconds` 0.
  std::optional<LiveAttestation> attestation;
};

// Not thread-safe: one apply at a time, from any thread.
class LiveTensors {
 public:
  // kInvalidArgument for an empty or duplicate name, an unknown dtype or a size that is not
  // dtype x shape.
  static Result<std::unique_ptr<LiveTensors>> Register(std::vector<LiveTensorView> tensors);
  // Tensors in device memory, every `data` an address in `device` (DeviceMemory). Two sets
  // sharing one `device` (a flip's two copies) CopyFrom each other there.
  static Result<std::unique_ptr<LiveTensors>> Register(std::vector<LiveTensorView> tensors,
                                                       std::shared_ptr<DeviceMemory> device);
  ~LiveTensors();
  LiveTensors(const LiveTensors&) = delete;
  LiveTensors& operator=(const LiveTensors&) = delete;

  // Brings the tensors to committed version `version` of `channel` in the store at `store` (read
  // only, beside the process that writes it). Blocks on memory work. kFailedPrecondition, the
  // tensors untouched, when a registered tensor is missing from the version or has another
  // dtype or shape; kNotFound when the store no longer has the version; kCorrupt when a chunk
  // cannot be made to match the manifest (the tensors then hold no known version).
  //
  // With `catch_up_from`, a flip's other copy (the same tensors, in the same memory) that holds
  // the version `version`'s delta names as its base: each chunk is copied from it and patched
  // while in cache, one pass instead of CopyFrom and then the apply (`caught_up` in the report).
  // It is only read, and not at all when it does not hold that base.
  Result<LiveApplyReport> ApplyFromStore(const std::filesystem::path& store,
                                         std::string_view channel, Version version,
                                         const LiveTensors* catch_up_from = nullptr);

  // The same from a memory channel (MemoryPublisher) in `dir`. kAborted when the version was
  // overwritten by two newer ones while it was applied (apply the current one).
  Result<LiveApplyReport> ApplyFromMemory(const std::filesystem::path& dir,
                                          std::string_view channel, Version version);

  // Copies `other`'s tensors into these (registered with the same names, dtypes and shapes, in
  // the same order; kFailedPrecondition otherwise) and takes over the version they hold; the
  // next apply checks every chunk. For a flip: the idle copy catches up with one memcpy.
  Status CopyFrom(const LiveTensors& other);

  // The version the tensors hold (0: none known).
  Version version() const;

  // Hashes the tensors as they are now against the version they hold, committed in the store at
  // `store` (read only): each chunk's check computed from the live bytes, combined into one
  // digest, and compared with the digest of the version's signed manifest. Catches bytes that
  // changed after the apply (an engine writing into its weights, a memory error). One hash pass
  // over the tensors; reads only. kFailedPrecondition when the tensors hold no known version;
  // kNotFound when the store no longer has it. Subscriber::ReportAttestation sends the result to
  // the coordinator.
  Result<LiveAttestation> Attest(const std::filesystem::path& store,
                                 std::string_view channel) const;

 private:
  struct Impl;
  explicit LiveTensors(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A memory channel's publisher (docs/live.md, "Memory channel"): versions kept in shared memory
// under DIR/<channel>.memory (DIR on tmpfs, e.g. /dev/shm/...) for samplers on this machine, two
// slots reused in turn, so a publish copies the tensors into pages that already exist. Each
// version after the first is a delta against the previous one, its payloads in a delta file.
struct MemoryPublisherOptions {
  uint64_t chunk_size = ChunkSizeLimits::kAuto;  // bytes: kAuto (options.h), or in [kMin, kMax]
  size_t threads = 0;                            // hashing and encoding; 0: one per core
  bool sha256 = false;  // chunk hashes: XXH3-128 by default (same-host readers), or SHA-256
  // Encode each version as a delta against the one before. Off by default: samplers on the same
  // machine copy the chunks whose hashes changed, which costs less than encoding them
  // (docs/live.md, "Copy or delta"). On, a sampler applying in place writes only the changed
  // elements.
  bool deltas = false;
};

struct MemoryPublishResult {
  Version version;
  bool delta = false;
  uint64_t total_bytes = 0;
  uint64_t chunk_count = 0;
  uint64_t payload_bytes = 0;   // what a sampler holding the previous version reads
  std::string root;             // lowercase hex
  double snapshot_seconds = 0;  // the copy of the tensors: what the trainer waits for
  double encode_seconds = 0;    // hashing and delta encoding
  double publish_seconds = 0;   // manifest, delta file, the switch of the current version
};

// Thread-safety: Snapshot and Finish may be called from different threads; one publish at a
// time (a Snapshot waits for the previous Finish).
class MemoryPublisher {
 public:
  static Result<std::unique_ptr<MemoryPublisher>> Open(const std::filesystem::path& dir,
                                                       std::string channel,
                                                       const MemoryPublisherOptions& options = {});
  ~MemoryPublisher();
  MemoryPublisher(const MemoryPublisher&) = delete;
  MemoryPublisher& operator=(const MemoryPublisher&) = delete;

  // Copies `tensors` into the free slot; once it returns the caller may change them. `step`
  // goes into the manifest's metadata. kInvalidArgument (nothing changed) for bad tensors.
  Status Snapshot(const std::vector<TensorView>& tensors, std::optional<int64_t> step);
  // Makes the shared memory the channel's versions of these tensors (names, dtypes, shapes; the
  // bytes are not read) will occupy; blocks while it does (about two copies of the tensors).
  // Call it at start-up: the first Snapshot then costs one copy, as every later one does,
  // instead of also making the pages while the trainer waits. Optional; other tensors later
  // are fine.
  Status Reserve(const std::vector<TensorView>& tensors);
  // Publishes the last snapshot: hashes it, encodes it against the current version, writes its
  // manifest and delta file, then makes it current.
  Result<MemoryPublishResult> Finish();
  // Snapshot, then Finish.
  Result<MemoryPublishResult> Publish(const std::vector<TensorView>& tensors,
                                      std::optional<int64_t> step);

 private:
  struct Impl;
  explicit MemoryPublisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Blocks until the memory channel's current version is at least `min_version` (inotify), then
// returns it. kDeadlineExceeded after `timeout_seconds` (nullopt: no limit).
Result<Version> WaitMemoryVersion(const std::filesystem::path& dir, std::string_view channel,
                                  Version min_version, std::optional<double> timeout_seconds);

}  // namespace weightcast
