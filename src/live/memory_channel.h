// A memory channel: the versions of one channel kept in shared memory on this machine, for
// samplers on the same machine (docs/live.md, "Memory channel"). No durable store, no fsync, no
// fresh pages per version: the publisher keeps two slots (the current version and the one being
// built) and rewrites the older one for each new version, so after the first two versions a
// publish copies the trainer's tensors into pages that are already there.
//
// Layout, under DIR/<channel>.memory/:
//   slot-0/model.safetensors, slot-1/model.safetensors   the two slots (safetensors files)
//   <v>.manifest                                          the manifest of version v (its slot in
//                                                         the metadata "weightcast.memory.slot")
//   <v>.delta                                             v's payloads (live/delta_file.h)
//   current                                               "<v>\n", replaced atomically
// A version's slot is rewritten when the version after next is published: a reader applies the
// current version or the one before it; every byte it takes from a slot is checked against the
// manifest, so a reader overtaken by two publishes gets kCorrupt/kAborted, never mixed weights.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "format/safetensors.h"
#include "hash/digest.h"
#include "live/live_set.h"
#include "manifest/builder.h"
#include "manifest/manifest.h"
#include "util/thread_pool.h"

namespace weightcast::live {

// DIR/<channel>.memory
std::filesystem::path MemoryChannelDir(const std::filesystem::path& dir, std::string_view channel);

// One tensor's bytes in memory, borrowed from the caller for the length of a Snapshot.
struct SnapshotTensor {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<uint64_t> shape;
  std::span<const uint8_t> bytes;
};

struct MemoryChannelOptions {
  uint64_t chunk_size = kAutoChunkSize;  // ChooseChunkSize; later versions keep the first's
  HashAlgorithm algorithm = HashAlgorithm::kXxh3_128;  // same-host readers (docs/live.md)
  size_t threads = 0;                                  // hashing and encoding; 0: one per core
  bool deltas = false;  // encode against the current version (MemoryPublisherOptions::deltas)
};

struct MemoryPublished {
  Version version;
  bool delta = false;
  uint64_t total_bytes = 0;
  uint64_t chunk_count = 0;
  uint64_t payload_bytes = 0;  // what a sampler holding the previous version reads
  Digest root{};
  double snapshot_seconds = 0;  // the copy of the tensors (what the trainer waits for)
  double encode_seconds = 0;    // hashing and delta encoding
  double publish_seconds = 0;   // manifest, delta file, the switch of `current`
};

// The publisher's side. Thread-safety: Snapshot and Finish may be called from different threads
// (the trainer snapshots, a background thread finishes), one publish at a time: a Snapshot
// waits for the previous Finish.
class MemoryChannelWriter {
 public:
  // Creates DIR/<channel>.memory (DIR should be on tmpfs, e.g. /dev/shm/...) and continues the
  // numbering after a version found there (a restarted publisher; its slots are rewritten).
  // One writer per channel: the writer holds an exclusive lock on the channel's `.lock` for its
  // lifetime, and a second one (in this process or another) gets kUnavailable.
  static Result<std::unique_ptr<MemoryChannelWriter>> Open(const std::filesystem::path& dir,
                                                           std::string channel,
                                                           const MemoryChannelOptions& options);
  ~MemoryChannelWriter();

  // Lays the tensors out in the free slot as one safetensors file (wider dtypes first, then by
  // name, so a model lands at the same offsets every step) and copies their bytes: when this
  // returns the caller may change its tensors. kInvalidArgument (nothing changed) for bad
  // tensors. Blocks while a previous snapshot is not finished.
  Status Snapshot(std::vector<SnapshotTensor> tensors, std::map<std::string, std::string> metadata);
  // Makes the slots for tensors of these names, dtypes and shapes (their bytes are not read), so
  // that the first Snapshot copies into pages that are already there, as every later one does.
  // Making a slot costs about as much as filling it (tmpfs allocates and zeroes each page), and
  // without this the first Snapshot pays it while the trainer waits. Both slots on a fresh channel;
  // on a restarted one only the slot readers are not using. kInvalidArgument for bad shapes
  // (nothing made). A Snapshot of other tensors still works: it makes its slot anew.
  Status Reserve(std::vector<SnapshotTensor> tensors);
  // Turns the last snapshot into the next version: hashes it, encodes it against the current
  // version when the layout allows (chunk size, algorithm), writes its manifest and delta file,
  // then makes it current. kFailedPrecondition without a snapshot.
  Result<MemoryPublished> Finish();

 private:
  struct Slot;
  MemoryChannelWriter(std::filesystem::path dir, std::string channel, MemoryChannelOptions options);
  Status MapSlot(int index, uint64_t size);
  // The safetensors header of `tensors` in the order Snapshot copies them (sorts `tensors`);
  // `with_bytes`: each tensor's bytes must be as long as its dtype and shape say.
  static Result<EncodedHeader> LayOut(std::vector<SnapshotTensor>& tensors, bool with_bytes);

  const std::filesystem::path dir_;
  const std::string channel_;
  const MemoryChannelOptions options_;
  int lock_fd_ = -1;  // flock(LOCK_EX) on dir_/.lock while this writer lives
  ThreadPool pool_;   // hashing; options_.threads
  std::mutex mu_;
  std::condition_variable cv_;
  bool snapshot_pending_ = false;  // Snapshot done, Finish not yet
  std::unique_ptr<Slot> slots_[2];
  int building_ = -1;  // slot of the pending snapshot
  Version next_{1};
  std::map<std::string, std::string> metadata_;
  double snapshot_seconds_ = 0;
  std::shared_ptr<const Manifest> current_;  // null before the first version
  int current_slot_ = -1;
  // After the channel's very first version: the other slot (a fresh tmpfs
  // file whose pages cost about as much to populate as to copy), made while the trainer trains
  // so that the next snapshot is one memcpy. Joined before any snapshot and at destruction.
  std::thread preparing_;
};

// Blocks until the channel's current version is at least `min_version` (inotify on the channel's
// directory), or `timeout` passes (kDeadlineExceeded; nullopt waits forever), or `*cancel` turns
// true (kAborted; checked at least every 100 ms).
Result<Version> WaitMemoryChannel(const std::filesystem::path& dir, std::string_view channel,
                                  Version min_version, std::optional<double> timeout_seconds,
                                  const std::atomic<bool>* cancel);

// Brings `live` to `version` of the memory channel: one delta when the tensors hold its base,
// the two deltas in turn when they hold the one before (a flipped second copy), otherwise the
// chunks that differ copied from the version's slot; every chunk written checked.
Result<ApplyReport> ApplyFromMemory(const std::filesystem::path& dir, std::string_view channel,
                                    Version version, LiveSet& live);

}  // namespace weightcast::live
