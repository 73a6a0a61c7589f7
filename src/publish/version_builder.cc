#include "publish/version_builder.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "format/safetensors.h"
#include "manifest/signed_manifest.h"

namespace weightcast::publish {
namespace {

namespace fs = std::filesystem;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Result<ImportMode> ChooseImportMode(ImportPolicy policy, const fs::path& dir,
                                    const fs::path& store_root) {
  switch (policy) {
    case ImportPolicy::kCopy:
      return ImportMode::kCopy;
    case ImportPolicy::kHardlink:
      return ImportMode::kHardlink;
    case ImportPolicy::kAuto:
      break;
  }
  struct stat a {
  }, b{};
  if (::stat(dir.c_str(), &a) != 0) return ErrnoStatus("stat(" + dir.string() + ")", errno);
  if (::stat(store_root.c_str(), &b) != 0) {
    return ErrnoStatus("stat(" + store_root.string() + ")", errno);
  }
  return a.st_dev == b.st_dev ? ImportMode::kHardlink : ImportMode::kCopy;
}

// Whether `target` can be encoded against `base`: the codec pairs chunk i with chunk i, which
// only means something when both are cut the same way and hashed alike.
bool DeltaPays(const Manifest& base, const Manifest& target) {
  return base.chunk_size == target.chunk_size && base.hash_algorithm == target.hash_algorithm;
}

struct Encoded {
  DeltaInfo delta;
  std::shared_ptr<agent::PayloadCache> payloads;
  uint64_t payload_bytes = 0;
};

Result<Encoded> Encode(const Manifest& base, const fs::path& base_dir, const Manifest& target,
                       const fs::path& target_dir, const codec::VersionCodecOptions& options) {
  ASSIGN_OR_RETURN(codec::SnapshotReader base_bytes, codec::SnapshotReader::Open(base_dir, base));
  ASSIGN_OR_RETURN(codec::SnapshotReader target_bytes,
                   codec::SnapshotReader::Open(target_dir, target));
  Encoded out;
  out.payloads = std::make_shared<agent::PayloadCache>(target.version);
  ASSIGN_OR_RETURN(out.delta, codec::EncodeVersion(
                                  base, base_bytes, target, target_bytes,
                                  [&](ChunkIndex index, std::span<const uint8_t> payload) {
                                    out.payload_bytes += payload.size();
                                    out.payloads->Put(index, std::vector<uint8_t>(payload.begin(),
                                                                                  payload.end()));
                                    return Status::Ok();
                                  },
                                  options));
  return out;
}

}  // namespace

Result<PreparedVersion> PrepareVersion(Store& store, const fs::path& dir,
                                       const PrepareOptions& options) {
  RETURN_IF_ERROR(ValidateChannelName(options.channel));
  if (options.secret.empty()) return InvalidArgument("no cluster secret to sign the manifest");
  PreparedVersion out;
  ASSIGN_OR_RETURN(out.import_mode, ChooseImportMode(options.import, dir, store.root()));

  auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(dir));
  ASSIGN_OR_RETURN(Version next, store.NextVersion(options.channel));
  next = std::max(next, options.min_version);
  ASSIGN_OR_RETURN(out.manifest, BuildManifest(checkpoint, options.channel, next, options.build));
  for (const auto& [key, value] : options.metadata) out.manifest.metadata[key] = value;
  out.build_seconds = SecondsSince(start);

  // The base: the version the store has current, which is what the publisher last published
  // (or rolled back to). Nodes holding it fetch payloads; everyone else fetches whole chunks.
  Result<Version> current = store.Current(options.channel);
  if (!current.ok() && current.status().code() != Code::kNotFound) return current.status();
  if (options.delta && current.ok()) {
    ASSIGN_OR_RETURN(Manifest base, store.GetManifest(options.channel, *current));
    if (DeltaPays(base, out.manifest)) {
      start = std::chrono::steady_clock::now();
      ASSIGN_OR_RETURN(Encoded encoded, Encode(base, store.VersionPath(options.channel, *current),
                                               out.manifest, checkpoint.root, options.codec));
      out.manifest.delta = std::move(encoded.delta);
      out.payloads = std::move(encoded.payloads);
      out.payload_bytes = encoded.payload_bytes;
      out.encode_seconds = SecondsSince(start);
    }
  }

  // The import hashes every byte again against the manifest, so a file the trainer changed
  // after the manifest (or the payloads) were made is caught here, before anything is signed.
  start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(
      store.ImportDirectory(options.channel, out.manifest, checkpoint.root, out.import_mode));
  out.import_seconds = SecondsSince(start);
  out.signed_manifest = SignManifest(out.manifest, options.secret);
  return out;
}

Result<PreparedVersion> ReloadVersion(const Store& store, Version version,
                                      const PrepareOptions& options) {
  RETURN_IF_ERROR(ValidateChannelName(options.channel));
  if (options.secret.empty()) return InvalidArgument("no cluster secret to sign the manifest");
  PreparedVersion out;
  ASSIGN_OR_RETURN(out.manifest, store.GetManifest(options.channel, version));
  if (out.manifest.delta.has_value()) {
    const DeltaInfo& delta = *out.manifest.delta;
    for (const DeltaChunk& chunk : delta.chunks) out.payload_bytes += chunk.payload_size;
    Result<Manifest> base = store.GetManifest(options.channel, delta.base_version);
    if (base.ok() && base->root == delta.base_root) {
      auto start = std::chrono::steady_clock::now();
      ASSIGN_OR_RETURN(
          Encoded encoded,
          Encode(*base, store.VersionPath(options.channel, delta.base_version), out.manifest,
                 store.VersionPath(options.channel, version), options.codec));
      // The payload hashes say whether the encoder produced the same bytes as when the version
      // was first published; if not (another build of the codec), the stored table is what the
      // coordinator and the agents hold, so the fresh payloads cannot be served under it.
      bool same = encoded.delta.chunks.size() == delta.chunks.size();
      for (size_t i = 0; same && i < delta.chunks.size(); ++i) {
        same = encoded.delta.chunks[i].encoding == delta.chunks[i].encoding &&
               encoded.delta.chunks[i].payload_hash == delta.chunks[i].payload_hash;
      }
      if (same) out.payloads = std::move(encoded.payloads);
      out.encode_seconds = SecondsSince(start);
    }
  }
  out.signed_manifest = SignManifest(out.manifest, options.secret);
  return out;
}

}  // namespace weightcast::publish
