#include "publish/version_builder.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "format/safetensors.h"
#include "publish/idle_write.h"
#include "trust/signed_manifest.h"
#include "util/stopwatch.h"

namespace weightcast::publish {
namespace {

namespace fs = std::filesystem;

ImportMode ChooseImportMode(ImportPolicy policy) {
  return policy == ImportPolicy::kHardlink ? ImportMode::kHardlink : ImportMode::kCopy;
}

// Whether `target` can be encoded against `base`: the codec pairs chunk i with chunk i, which
// only means something when both are cut the same way and hashed alike.
bool DeltaPays(const Manifest& base, const Manifest& target) {
  return base.chunk_size == target.chunk_size && base.hash_algorithm == target.hash_algorithm;
}

}  // namespace

namespace {

struct Encoded {
  DeltaInfo delta;
  std::shared_ptr<node::PayloadCache> payloads;
  uint64_t payload_bytes = 0;
};

// Encodes `target` against `base`. With `target_hashes`, the target's chunk hashes are computed
// while encoding (its manifest's hashes are placeholders); without, they are taken from its
// manifest. With `target_fast_hashes` too, its fast hashes as well. Payloads past the cache's
// memory bound spill into `spill_dir` (node/payload_cache.h).
Result<Encoded> EncodeBytes(const Manifest& base, const codec::SnapshotReader& base_bytes,
                            const Manifest& target, const codec::SnapshotReader& target_bytes,
                            const fs::path& spill_dir, const codec::VersionCodecOptions& options,
                            std::vector<Digest>* target_hashes = nullptr,
                            std::vector<Digest>* target_fast_hashes = nullptr) {
  Encoded out;
  node::PayloadCacheOptions cache;
  cache.spill_dir = spill_dir;
  out.payloads = std::make_shared<node::PayloadCache>(target.version, cache);
  const codec::PayloadSink sink = [&](ChunkIndex index, std::span<const uint8_t> payload) {
    out.payload_bytes += payload.size();
    out.payloads->Put(index, std::vector<uint8_t>(payload.begin(), payload.end()));
    return Status::Ok();
  };
  if (target_hashes != nullptr) {
    WC_ASSIGN_OR_RETURN(out.delta,
                        codec::EncodeVersionHashing(base, base_bytes, target, target_bytes, sink,
                                                    target_hashes, options, target_fast_hashes));
  } else {
    WC_ASSIGN_OR_RETURN(
        out.delta, codec::EncodeVersion(base, base_bytes, target, target_bytes, sink, options));
  }
  return out;
}

// Puts an encoding's delta table and payloads into the prepared version.
void TakeEncoded(Encoded encoded, PreparedVersion& out) {
  out.manifest.delta = std::move(encoded.delta);
  out.payloads = std::move(encoded.payloads);
  out.payload_bytes = encoded.payload_bytes;
}

// EncodeBytes of two versions' files.
Result<Encoded> Encode(const Manifest& base, const fs::path& base_dir, const Manifest& target,
                       const fs::path& target_dir, const fs::path& spill_dir,
                       const codec::VersionCodecOptions& options,
                       std::vector<Digest>* target_hashes = nullptr,
                       std::vector<Digest>* target_fast_hashes = nullptr) {
  // Every chunk of both is read: the target's to hash it, the base's to compare and XOR.
  WC_ASSIGN_OR_RETURN(codec::SnapshotReader base_bytes,
                      codec::SnapshotReader::Open(base_dir, base, codec::ReadPattern::kWhole));
  WC_ASSIGN_OR_RETURN(codec::SnapshotReader target_bytes,
                      codec::SnapshotReader::Open(target_dir, target, codec::ReadPattern::kWhole));
  return EncodeBytes(base, base_bytes, target, target_bytes, spill_dir, options, target_hashes,
                     target_fast_hashes);
}

// The checkpoint as the store holds it must be the one the source directory showed: same files
// at the same sizes (a trainer still writing, or replacing files, while we link them in).
Status SameFiles(const Checkpoint& source, const Checkpoint& staged) {
  const auto changed = [&](const std::string& what) {
    return FailedPrecondition(source.root.string() + ": " + what +
                              " changed while it was being published");
  };
  if (staged.files.size() != source.files.size()) return changed("the set of files");
  for (size_t i = 0; i < source.files.size(); ++i) {
    const CheckpointFile& a = source.files[i];
    const CheckpointFile& b = staged.files[i];
    if (a.relative_path != b.relative_path) return changed("the set of files");
    if (a.size != b.size) return changed(a.relative_path);
  }
  return Status::Ok();
}

// The store's current manifest (the base of a delta; none for a new channel) and the layout of
// version `next` of `checkpoint`: cut in the channel's chunk size, with the options' metadata.
struct NextLayout {
  std::optional<Manifest> current;
  BuildOptions build;
  Manifest manifest;
};

Result<NextLayout> LayOutNext(const Store& store, const Checkpoint& checkpoint, Version next,
                              const PrepareOptions& options) {
  NextLayout out;
  Result<Version> current = store.Current(options.channel);
  if (!current.ok() && current.status().code() != Code::kNotFound) return current.status();
  if (current.ok()) {
    WC_ASSIGN_OR_RETURN(out.current, store.GetManifest(options.channel, *current));
  }
  out.build = options.build;
  out.build.chunk_size = ResolveChunkSize(out.build.chunk_size, checkpoint.total_bytes(),
                                          out.current ? &*out.current : nullptr);
  WC_ASSIGN_OR_RETURN(out.manifest,
                      BuildManifestLayout(checkpoint, options.channel, next, out.build));
  for (const auto& [key, value] : options.metadata) out.manifest.metadata[key] = value;
  return out;
}

// The end of a prepare: the manifest completed with its hashes, the version committed into the
// store (after `before_commit`) and the manifest signed. `label` names the source in errors.
// The manifest finished and signed, for a version committed after it is announced.
Status SignBeforeCommit(const PrepareOptions& options, const std::string& label,
                        std::vector<Digest> hashes, std::vector<Digest> fast_hashes,
                        std::vector<Digest> device_checks, PreparedVersion& out) {
  out.manifest.device_checks = std::move(device_checks);
  if (Status s = FinishManifest(out.manifest, std::move(hashes), std::move(fast_hashes)); !s.ok()) {
    return InvalidArgument(label + ": " + s.message());
  }
  WC_ASSIGN_OR_RETURN(out.signed_manifest,
                      SignManifest(out.manifest, {options.secret, options.signing_identity.get()}));
  return Status::Ok();
}

Status CommitAndSign(Store& store, const PrepareOptions& options, const std::string& label,
                     std::vector<Digest> hashes, std::vector<Digest> fast_hashes,
                     std::vector<Digest> device_checks, ImportedFiles staged,
                     PreparedVersion& out) {
  out.manifest.device_checks = std::move(device_checks);
  if (Status s = FinishManifest(out.manifest, std::move(hashes), std::move(fast_hashes)); !s.ok()) {
    return InvalidArgument(label + ": " + s.message());
  }
  Stopwatch start;
  if (options.before_commit)
    WC_RETURN_IF_ERROR(options.before_commit(out.manifest, out.payloads.get()));
  WC_RETURN_IF_ERROR(store.CommitImport(options.channel, out.manifest, std::move(staged)));
  out.import_seconds += start.Seconds();
  WC_ASSIGN_OR_RETURN(out.signed_manifest,
                      SignManifest(out.manifest, {options.secret, options.signing_identity.get()}));
  return Status::Ok();
}

}  // namespace

// One pass over the new bytes (docs/publish.md, "A version from a directory"): the files are
// linked or copied into the store first, and everything after reads the store's files, so the
// bytes hashed are the bytes the version serves; each chunk is hashed while it is encoded
// against the base, and the commit does not hash again.
Result<PreparedVersion> PrepareVersion(Store& store, const fs::path& dir,
                                       const PrepareOptions& options) {
  WC_RETURN_IF_ERROR(ValidateChannelName(options.channel));
  if (options.secret.empty() && options.signing_identity == nullptr) {
    return InvalidArgument("no cluster secret or publisher key to sign the manifest");
  }
  PreparedVersion out;
  out.import_mode = ChooseImportMode(options.import);

  Stopwatch start;
  WC_ASSIGN_OR_RETURN(Checkpoint source, OpenCheckpoint(dir));
  if (!options.allow_no_tensors && !source.has_tensors()) {
    return InvalidArgument(dir.string() +
                           " holds no tensors (no safetensors file with a tensor in it): a version "
                           "without weights would replace the model on every node; "
                           "--allow-no-tensors publishes it anyway");
  }
  for (const CheckpointFile& f : source.files) {
    if (!f.is_safetensors && !f.relative_path.ends_with(".safetensors.index.json")) {
      out.other_files.emplace_back(f.relative_path, f.size);
    }
  }
  WC_ASSIGN_OR_RETURN(Version next, store.NextVersion(options.channel));
  next = std::max(next, options.min_version);
  std::vector<std::string> paths;
  paths.reserve(source.files.size());
  for (const CheckpointFile& f : source.files) paths.push_back(f.relative_path);
  WC_ASSIGN_OR_RETURN(ImportedFiles staged, store.StageImport(options.channel, next, paths,
                                                              source.root, out.import_mode));
  out.import_seconds = start.Seconds();

  start.Restart();
  WC_ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(staged.dir()));
  WC_RETURN_IF_ERROR(SameFiles(source, checkpoint));
  // The base: the version the store has current, which is what the publisher last published
  // (or rolled back to). Nodes holding it fetch payloads; everyone else fetches whole chunks.
  WC_ASSIGN_OR_RETURN(NextLayout laid, LayOutNext(store, checkpoint, next, options));
  std::optional<Manifest>& current_manifest = laid.current;
  const BuildOptions& build = laid.build;
  out.manifest = std::move(laid.manifest);
  std::optional<Manifest> base;
  if (options.delta && current_manifest && DeltaPays(*current_manifest, out.manifest)) {
    base = std::move(current_manifest);
  }
  // The fast hashes come from the same pass as the chunk hashes (docs/verification.md).
  std::vector<Digest> hashes, fast_hashes;
  std::vector<Digest>* fast = WantsFastHashes(build) ? &fast_hashes : nullptr;
  if (base.has_value()) {
    WC_ASSIGN_OR_RETURN(
        Encoded encoded,
        Encode(*base, store.VersionPath(options.channel, base->version), out.manifest, staged.dir(),
               store.root(), options.codec, &hashes, fast));
    TakeEncoded(std::move(encoded), out);
    out.encode_seconds = start.Seconds();
  } else {
    WC_ASSIGN_OR_RETURN(hashes,
                        HashChunks(staged.dir(), out.manifest.files, out.manifest.chunk_size,
                                   out.manifest.hash_algorithm, options.build.threads, fast));
    out.build_seconds = start.Seconds();
  }
  std::vector<Digest> device_checks;
  if (build.device_checks) {
    WC_ASSIGN_OR_RETURN(device_checks,
                        HashChunks(staged.dir(), out.manifest.files, out.manifest.chunk_size,
                                   HashAlgorithm::kWeightedSum128, options.build.threads));
  }
  // No second hash: the manifest was built from the store's own files. A copy is private to the
  // store; a hard link shares the trainer's inode, and CommitImport refuses one written to since
  // it was linked (docs/publish.md says why hashing again would protect nothing more).
  WC_RETURN_IF_ERROR(CommitAndSign(store, options, dir.string(), std::move(hashes),
                                   std::move(fast_hashes), std::move(device_checks),
                                   std::move(staged), out));
  return out;
}

namespace {

// The write of an image into the store, on a thread of its own. Whoever lets go of it last
// waits for it (std::future's destructor), hurrying an idle write first: a version that fails
// after the write started must not wait for idle time to come.
struct StagingWrite {
  std::shared_ptr<IdleWrite> idle;  // null: the write runs at normal priority
  std::future<Result<ImportedFiles>> future;
  StagingWrite(std::shared_ptr<IdleWrite> i, std::future<Result<ImportedFiles>> f)
      : idle(std::move(i)), future(std::move(f)) {}
  StagingWrite(const StagingWrite&) = delete;
  StagingWrite& operator=(const StagingWrite&) = delete;
  ~StagingWrite() {
    if (idle != nullptr && future.valid()) idle->Hurry();
  }
};

}  // namespace

// One file's bytes in memory (docs/rl_step.md, "The publisher"): the image is hashed and encoded
// where it lies while a thread writes it into the store, and the base is read from the previous
// image when the caller still holds it. The bytes hashed are the bytes written: both read the
// same memory, which the caller keeps unchanged for the call.
Result<PreparedVersion> PrepareVersionFromMemory(Store& store, const VersionImage& image,
                                                 const HeldBase* held,
                                                 const PrepareOptions& options) {
  WC_RETURN_IF_ERROR(ValidateChannelName(options.channel));
  if (options.secret.empty() && options.signing_identity == nullptr) {
    return InvalidArgument("no cluster secret or publisher key to sign the manifest");
  }
  PreparedVersion out;
  out.import_mode = ImportMode::kCopy;
  Stopwatch start;
  Checkpoint checkpoint;
  checkpoint.root = store.root();
  CheckpointFile file;
  file.relative_path = image.file;
  file.size = image.bytes.size();
  file.is_safetensors = true;
  WC_ASSIGN_OR_RETURN(file.header,
                      ParseSafetensorsHeader(image.bytes, image.bytes.size(), image.file));
  checkpoint.files.push_back(std::move(file));
  if (!options.allow_no_tensors && !checkpoint.has_tensors()) {
    return InvalidArgument(
        "no tensors to publish: a version without weights would replace the "
        "model on every node");
  }
  WC_ASSIGN_OR_RETURN(Version next, store.NextVersion(options.channel));
  next = std::max(next, options.min_version);
  // The write into the store overlaps the hashing and encoding below; `staging` is waited for
  // on every path out (its destructor blocks), and the image outlives it.
  // The thread captures values: with commit_behind it outlives this call. With commit_behind
  // the fleet does not wait for the write, so it uses idle CPU only (publish/idle_write.h) and
  // whoever needs it finished hurries it (PreparedVersion::hurry_commit).
  std::shared_ptr<IdleWrite> idle;
  if (options.commit_behind) idle = std::make_shared<IdleWrite>(image.bytes);
  auto staging = std::make_shared<StagingWrite>(
      idle, std::async(std::launch::async, [&store, channel = options.channel, next,
                                            file = image.file, bytes = image.bytes, idle] {
        if (idle == nullptr) return store.StageImportBytes(channel, next, file, bytes);
        Result<ImportedFiles> staged = store.StageImportBytes(
            channel, next, file, bytes,
            [&idle](int fd, const std::string& what) { return idle->Write(fd, what); });
        idle->End();
        return staged;
      }));

  WC_ASSIGN_OR_RETURN(NextLayout laid, LayOutNext(store, checkpoint, next, options));
  const std::optional<Manifest>& current_manifest = laid.current;
  const BuildOptions& build = laid.build;
  out.manifest = std::move(laid.manifest);
  std::vector<Digest> hashes, fast_hashes;
  std::vector<Digest>* fast = WantsFastHashes(build) ? &fast_hashes : nullptr;
  if (options.delta && current_manifest && DeltaPays(*current_manifest, out.manifest)) {
    const Manifest& base = *current_manifest;
    const codec::SnapshotReader target_bytes = codec::SnapshotReader::FromMemory(image.bytes);
    // The held image is the base only if it is the very version the store has current.
    const bool base_held = held != nullptr && held->version == base.version &&
                           held->root == base.root && held->bytes.size() == base.total_size();
    WC_ASSIGN_OR_RETURN(
        codec::SnapshotReader base_bytes,
        base_held ? Result<codec::SnapshotReader>(codec::SnapshotReader::FromMemory(held->bytes))
                  : codec::SnapshotReader::Open(store.VersionPath(options.channel, base.version),
                                                base, codec::ReadPattern::kWhole));
    WC_ASSIGN_OR_RETURN(Encoded encoded, EncodeBytes(base, base_bytes, out.manifest, target_bytes,
                                                     store.root(), options.codec, &hashes, fast));
    TakeEncoded(std::move(encoded), out);
    out.encode_seconds = start.Seconds();
  } else {
    WC_ASSIGN_OR_RETURN(
        hashes, HashChunksInMemory(image.bytes, out.manifest.chunk_size,
                                   out.manifest.hash_algorithm, options.build.threads, fast));
    out.build_seconds = start.Seconds();
  }
  std::vector<Digest> device_checks;
  if (build.device_checks) {
    WC_ASSIGN_OR_RETURN(device_checks,
                        HashChunksInMemory(image.bytes, out.manifest.chunk_size,
                                           HashAlgorithm::kWeightedSum128, options.build.threads));
  }
  if (options.commit_behind) {
    WC_RETURN_IF_ERROR(SignBeforeCommit(options, image.file, std::move(hashes),
                                        std::move(fast_hashes), std::move(device_checks), out));
    if (idle) out.hurry_commit = [idle] { idle->Hurry(); };
    out.commit = [&store, options, manifest = out.manifest, payloads = out.payloads, staging] {
      WC_ASSIGN_OR_RETURN(ImportedFiles staged, staging->future.get());
      if (options.before_commit)
        WC_RETURN_IF_ERROR(options.before_commit(manifest, payloads.get()));
      return store.CommitImport(options.channel, manifest, std::move(staged));
    };
    return out;
  }
  start.Restart();
  WC_ASSIGN_OR_RETURN(ImportedFiles staged, staging->future.get());
  out.import_seconds = start.Seconds();  // what the write added past the encode
  WC_RETURN_IF_ERROR(CommitAndSign(store, options, image.file, std::move(hashes),
                                   std::move(fast_hashes), std::move(device_checks),
                                   std::move(staged), out));
  return out;
}

Result<PreparedVersion> ReloadVersion(const Store& store, Version version,
                                      const PrepareOptions& options, bool encode_payloads) {
  WC_RETURN_IF_ERROR(ValidateChannelName(options.channel));
  if (options.secret.empty() && options.signing_identity == nullptr) {
    return InvalidArgument("no cluster secret or publisher key to sign the manifest");
  }
  PreparedVersion out;
  WC_ASSIGN_OR_RETURN(out.manifest, store.GetManifest(options.channel, version));
  if (out.manifest.delta.has_value()) {
    const DeltaInfo& delta = *out.manifest.delta;
    for (const DeltaChunk& chunk : delta.chunks) out.payload_bytes += chunk.payload_size;
    Result<Manifest> base = encode_payloads ? store.GetManifest(options.channel, delta.base_version)
                                            : Result<Manifest>(NotFound("payloads not wanted"));
    if (base.ok() && base->root == delta.base_root) {
      Stopwatch start;
      WC_ASSIGN_OR_RETURN(
          Encoded encoded,
          Encode(*base, store.VersionPath(options.channel, delta.base_version), out.manifest,
                 store.VersionPath(options.channel, version), store.root(), options.codec));
      // The payload hashes say whether the encoder produced the same bytes as when the version
      // was first published; if not (another build of the codec), the stored table is what the
      // coordinator and the agents hold, so the fresh payloads cannot be served under it.
      // A table written before payload hashes were always SHA-256 is compared in its own
      // algorithm.
      bool same = encoded.delta.chunks.size() == delta.chunks.size();
      for (size_t i = 0; same && i < delta.chunks.size(); ++i) {
        same = encoded.delta.chunks[i].encoding == delta.chunks[i].encoding;
        if (!same || delta.payload_hash_algorithm == encoded.delta.payload_hash_algorithm) {
          same = same && encoded.delta.chunks[i].payload_hash == delta.chunks[i].payload_hash;
        } else if (delta.chunks[i].encoding != ChunkEncoding::kSame) {
          const std::optional<HeldBytes> p =
              encoded.payloads->Get(ChunkIndex(static_cast<uint32_t>(i)));
          same = p &&
                 HashBytes(delta.payload_hash_algorithm, p->bytes) == delta.chunks[i].payload_hash;
        }
      }
      if (same) out.payloads = std::move(encoded.payloads);
      out.encode_seconds = start.Seconds();
    }
  }
  WC_ASSIGN_OR_RETURN(out.signed_manifest,
                      SignManifest(out.manifest, {options.secret, options.signing_identity.get()}));
  return out;
}

}  // namespace weightcast::publish
