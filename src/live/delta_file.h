// The delta payloads of a committed version, kept in a file beside the store so that readers on
// the same machine (samplers applying a version into their live tensors) patch only the changed
// elements instead of copying every chunk. The format is in docs/live.md.
//
// The file is a cache, not part of the store's crash-safety argument: it is written (temporary
// file, then rename) before the version it belongs to becomes current, and a reader that finds
// it missing, stale or damaged falls back to the version's own files. Every payload in it is
// checked against the payload hash of the store's manifest before it is used.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "manifest/manifest.h"
#include "util/file.h"

namespace weightcast::live {

// ROOT/.live/<channel>/<version>.delta: a hidden directory of the store root (never a channel
// name, so the store ignores it).
std::filesystem::path DeltaFilePath(const std::filesystem::path& store_root,
                                    std::string_view channel, Version version);

// The payload of chunk `index` (empty for `same` chunks), for WriteDeltaFile.
using PayloadOf = std::function<std::span<const uint8_t>(ChunkIndex index)>;

// Writes the delta file of `manifest` (which must carry a delta table): the header, then the
// payload of every non-`same` chunk in chunk order, each of exactly the size the delta table
// lists (kInvalidArgument otherwise, nothing left behind). Not durable (no fsync): a crash loses
// at most a cache. Replaces an older file of the same version.
Status WriteDeltaFile(const std::filesystem::path& store_root, const Manifest& manifest,
                      const PayloadOf& payload_of);
// The same, at an explicit path (a memory channel's directory).
Status WriteDeltaFileAt(const std::filesystem::path& path, const Manifest& manifest,
                        const PayloadOf& payload_of);

// Checks the bytes of a delta file against the manifest it must belong to (header fields, payload
// total, size) and returns where each chunk's payload starts. Never reads outside `bytes`.
// kCorrupt otherwise. Payload hashes are checked later, one by one (DeltaFile::Payload).
Result<std::vector<uint64_t>> CheckDeltaFileBytes(std::span<const uint8_t> bytes,
                                                  const Manifest& manifest, std::string_view name);

// A delta file opened read-only against the manifest it must belong to.
class DeltaFile {
 public:
  // Maps the file and checks its header against `manifest` (version, base, root, chunk count,
  // payload total, file size). kNotFound when there is no file; kCorrupt when it does not belong
  // to `manifest` or is truncated. Payload hashes are checked later, one by one (Payload).
  static Result<DeltaFile> Open(const std::filesystem::path& store_root, const Manifest& manifest);
  static Result<DeltaFile> OpenAt(const std::filesystem::path& path, const Manifest& manifest);

  // The payload of chunk `index`, checked against the manifest's payload hash (kCorrupt if it
  // differs). Empty for a `same` chunk.
  Result<std::span<const uint8_t>> Payload(const Manifest& manifest, ChunkIndex index) const;

 private:
  MappedFile file_;
  std::vector<uint64_t> offsets_;  // where each chunk's payload starts in the file
};

// Removes the delta files of `channel` whose version is not in `keep`.
void CollectDeltaFiles(const std::filesystem::path& store_root, std::string_view channel,
                       const std::vector<Version>& keep);

}  // namespace weightcast::live
