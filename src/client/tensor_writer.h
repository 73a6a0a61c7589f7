// Writing tensors held in memory as a checkpoint directory, and committing such a
// directory into a local store: what a publisher does instead of asking the trainer to save one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "format/safetensors.h"
#include "manifest/manifest.h"
#include "store/store.h"

namespace weightcast::client {

// One tensor's bytes in memory, C-contiguous, little-endian, borrowed from the caller.
struct TensorBytes {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<uint64_t> shape;
  std::span<const uint8_t> bytes;
};

// Writes `tensors` as `path` (one safetensors file), laid out in name order so that the same set
// of tensors always lands at the same offsets (deltas between steps then line up chunk by chunk).
// kInvalidArgument, before anything is written, for an empty or duplicate name or bytes whose
// size disagrees with dtype and shape. Blocks on disk I/O; fsyncs (SafetensorsWriter).
Status WriteTensorsFile(const std::filesystem::path& path, std::vector<TensorBytes> tensors);

// The bytes WriteTensorsFile writes, laid out in memory: a publisher copies the trainer's tensors
// straight into a file image and hashes, encodes and stores it from there (no file read back).
struct TensorsFileLayout {
  std::string header;             // the file's first bytes: length prefix and padded JSON
  std::vector<uint64_t> offsets;  // where each tensor's bytes start, in the order given
  uint64_t size = 0;              // the whole file
};
// Validates `tensors` as WriteTensorsFile does and lays them out as it would.
Result<TensorsFileLayout> LayOutTensorsFile(std::span<const TensorBytes> tensors);

// Where a publisher writes the checkpoint directory of the next version: a hidden directory in the
// store root (a name that is never a channel, so the store ignores it), on the store's
// filesystem so that the import can hard-link instead of copying. Removes what a crash left.
Result<std::filesystem::path> PrepareScratchDir(const std::filesystem::path& store_root,
                                                std::string_view channel);

struct LocalPublishResult {
  Version version;
  uint64_t total_bytes = 0;
  uint32_t chunk_count = 0;
  Digest root{};
  bool delta = false;       // encoded against the previous version, payloads in a delta file
  uint64_t wire_bytes = 0;  // what a reader holding the previous version reads (payloads)
  double seconds = 0;       // hashing, encoding and committing
};

// Commits the checkpoint in `dir` into `store` as the next version of `channel` (hard links, then
// removes `dir`), with `metadata` in the manifest: a delta against the current version with its
// delta file (publish::PublishLocal). For a publisher without a coordinator: agents or
// subscribers on the same machine read the store, and samplers patch their live tensors.
struct CommitLayout {
  uint64_t chunk_size = 0;     // bytes, or kAutoChunkSize
  bool device_checks = false;  // BuildOptions::device_checks
};
Result<LocalPublishResult> CommitDirectory(Store& store, std::string_view channel,
                                           const std::filesystem::path& dir,
                                           const CommitLayout& layout,
                                           const std::map<std::string, std::string>& metadata);

}  // namespace weightcast::client
