// Turning a trainer's checkpoint directory into a published version in the publisher's own store:
// the manifest, the delta against the version the store holds committed (docs/agent.md "Delta
// rule"), the import of the files, and the signature. No network: publish::Publisher registers
// the result with the coordinator and seeds it.
//
// Blocks on disk I/O and CPU (hashing, delta encoding over a thread pool). Not thread-safe with
// respect to one store and channel: one publisher prepares one version at a time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "codec/version_codec.h"
#include "manifest/builder.h"
#include "manifest/chunk_size.h"
#include "manifest/manifest.h"
#include "node/payload_cache.h"
#include "store/store.h"
#include "trust/signing_identity.h"

namespace weightcast::publish {

enum class ImportPolicy {
  // Copies (reflinks where the filesystem shares extents): trainers rewrite the same checkpoint
  // path every step, and a write into a linked inode would change a committed version.
  kAuto,
  kCopy,      // the same as kAuto
  kHardlink,  // hard links: no copy, but the files must never be modified in place afterwards
              // (replacing them by rename is fine); fails across filesystems
};

struct PrepareOptions {
  std::string channel;
  std::string secret;  // the cluster secret that signs the manifest
  // Signs manifests with this publisher certificate's key; null: with the cluster secret
  // (development mode).
  std::shared_ptr<const trust::SigningIdentity> signing_identity;
  // build.chunk_size: kAutoChunkSize picks it (ResolveChunkSize).
  BuildOptions build;
  codec::VersionCodecOptions codec;
  // Encode against the store's current version when there is one. Off: always a full version.
  bool delta = true;
  // The version number is the larger of this and one above the newest the store holds (a
  // coordinator that already logged higher versions from elsewhere raises it).
  Version min_version{1};
  ImportPolicy import = ImportPolicy::kAuto;
  // Refuse (kInvalidArgument, nothing staged) a directory that holds no tensor at all.
  bool allow_no_tensors = false;
  // Carried in the manifest's metadata (not part of the root), e.g. the source directory.
  std::map<std::string, std::string> metadata;
  // Called once the manifest is final and before the version becomes current, with the version's
  // payloads (null for a full version): e.g. live::WriteDeltaFile, so that readers on this
  // machine find the payloads as soon as they can see the version. An error fails the publish.
  std::function<Status(const Manifest&, const node::PayloadCache*)> before_commit;
  // PrepareVersionFromMemory only: return once the version is hashed, encoded and signed, with
  // its store commit (the write of the image, then Store::CommitImport) left to
  // PreparedVersion::commit, so that the version can be announced while it is written.
  bool commit_behind = false;
};

struct PreparedVersion {
  Manifest manifest;  // committed in the store; `delta` set when encoded against a base
  std::vector<uint8_t> signed_manifest;
  // Delta payloads by chunk (xor and full chunks of the delta; `same` ones have none). Null for a
  // full version.
  std::shared_ptr<node::PayloadCache> payloads;
  uint64_t payload_bytes = 0;  // what a node holding the base receives
  ImportMode import_mode = ImportMode::kCopy;
  double build_seconds = 0;   // layout and hashing of a full version (0 for a delta)
  double encode_seconds = 0;  // a delta: layout, then hashing and encoding in one pass
  double import_seconds = 0;  // links or copies into the store, and the commit (no re-hash)
  // The files of the directory that are neither safetensors nor a safetensors index (name, size):
  // published as opaque bytes, with no tensors (the publisher warns about them).
  std::vector<std::pair<std::string, uint64_t>> other_files;
  // With PrepareOptions::commit_behind: the version is signed but not yet in the store. Call
  // once, with the image unchanged until it returns: it waits for the image's write and commits
  // the version (kAlreadyExists and the like when the store moved meanwhile). Dropped uncalled,
  // it waits for the write and commits nothing.
  std::function<Status()> commit;
  // With commit_behind: makes the image's write, which uses idle CPU only, finish on the calling
  // thread (the pieces no thread has started). Call before waiting for `commit`'s result.
  std::function<void()> hurry_commit;
};

// The metadata key that records which directory a version was published from.
inline constexpr std::string_view kSourceMetadataKey = "weightcast.publish.source";

// Opens `dir` as a checkpoint, brings its files into `store` (Store::StageImport), builds the
// manifest of the next version of the channel from the store's copy, encoding it as a delta
// against the store's current version when there is one (same chunk size and hash algorithm)
// while hashing it, commits it (Store::CommitImport, no second hash) and signs the manifest.
// Every new byte is read from memory once. Leaves the store unchanged when it fails; a file
// that changes while it is published (other files or sizes than `dir` showed, or written to
// after it was hard-linked) fails it.
Result<PreparedVersion> PrepareVersion(Store& store, const std::filesystem::path& dir,
                                       const PrepareOptions& options);

// A version held in memory as the bytes of one safetensors file.
struct VersionImage {
  std::string file;  // its name in the version, e.g. "model.safetensors"
  std::span<const uint8_t> bytes;
};
// The bytes of a version the caller still holds in memory, the base of the next one.
struct HeldBase {
  Version version;
  Digest root{};
  std::span<const uint8_t> bytes;
};

// PrepareVersion for a version held in memory (a trainer's tensors copied into one file's image,
// client::LayOutTensorsFile): hashed and encoded where it lies while a thread writes it into the
// store; the base is read from `held` when it is the store's current version with that root and
// size, else from the store's files. `image` and `held` must not change during the call. Leaves
// the store unchanged when it fails.
Result<PreparedVersion> PrepareVersionFromMemory(Store& store, const VersionImage& image,
                                                 const HeldBase* held,
                                                 const PrepareOptions& options);

// Rebuilds the PreparedVersion of `version`, already committed in `store` (a publisher that
// restarts and seeds again): its manifest from the store and, when it is a delta whose base the
// store still holds with the same root, the payloads encoded again (the encoding is
// deterministic, so they match the delta table). A delta whose base is gone comes back with
// `payloads` null; its delta table stays, and nodes holding the base need a peer with payloads.
// With `encode_payloads` false the payloads are not rebuilt (null): no byte is read.
Result<PreparedVersion> ReloadVersion(const Store& store, Version version,
                                      const PrepareOptions& options, bool encode_payloads = true);

}  // namespace weightcast::publish
