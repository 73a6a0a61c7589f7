// Live tensors: the memory a sampler serves from, brought from one version to the next in place.
//
// A LiveSet is a set of registered tensors (the caller's memory) and the version they hold. Apply
// brings them to a target version: when they hold the version the target's delta names as its
// base, each changed chunk's payload is patched into them where they lie (a sparse payload
// rewrites only the changed elements) and the chunk is then checked against the target manifest;
// otherwise, or for a chunk whose payload or check fails, the chunk's bytes are copied from the
// target's files and checked. Nothing diverges silently: a chunk that cannot be made to match the
// manifest fails the apply, and the set then holds no version (the next Apply copies every chunk).
// The argument is in docs/live.md.
//
// Thread-safety: none; one caller at a time (the Python binding holds a lock). Apply blocks on
// memory work only (no I/O beyond reading the mapped files).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "codec/chunk_codec.h"
#include "live/delta_file.h"
#include "manifest/manifest.h"

namespace weightcast::live {

// One tensor a sampler serves from: memory the caller owns and keeps alive while it is
// registered, little-endian, C-contiguous, exactly dtype x shape bytes.
struct LiveTensor {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<uint64_t> shape;
  std::span<uint8_t> bytes;
};

// A piece of a chunk as a sampler holds it: `live` (empty for bytes it does not hold, such as a
// file header or an unregistered tensor) and the bytes at the same place in the version's files.
struct LivePiece {
  std::span<uint8_t> live;
  std::span<const uint8_t> file;
};

// Where live tensors live, and the things done to them: patch a chunk with a payload, copy
// bytes in, hash a chunk. Host memory (HostMemory), or device memory reached through a
// DeviceMemory (DeviceTensorMemory, live/device_memory.h): a ChunkPiece's `live` span is then
// an address range in that memory, never dereferenced on the host.
class TensorMemory {
 public:
  virtual ~TensorMemory() = default;
  // Chunks written here are checked against the manifest's device checks when it has them
  // (HashAlgorithm::kWeightedSum128, computed where the bytes lie) instead of its fast hashes.
  virtual bool ChecksOnDevice() const { return false; }
  // codec::ApplyChunkInPlace: the live pieces hold the base chunk `base_hash` names.
  virtual Status Patch(std::span<const uint8_t> payload, const Digest& base_hash,
                       std::span<const codec::ChunkPiece> pieces) = 0;
  // Patch, then the hash of the patched chunk, in one pass where the form allows.
  virtual Result<Digest> PatchAndHash(std::span<const uint8_t> payload, const Digest& base_hash,
                                      std::span<const codec::ChunkPiece> pieces,
                                      HashAlgorithm algorithm) = 0;
  // Copies host bytes (a version's file) into live bytes.
  virtual Status Copy(std::span<uint8_t> live, std::span<const uint8_t> from) = 0;
  // Copies the live bytes of another set in the same memory (a flip's other copy).
  virtual Status CopyLive(std::span<uint8_t> live, std::span<const uint8_t> from) {
    return Copy(live, from);
  }
  virtual Result<Digest> Hash(std::span<const codec::ChunkPiece> pieces,
                              HashAlgorithm algorithm) = 0;
  // Copies each piece's file bytes into its live bytes and returns the hash of the chunk as
  // written (live bytes where held, file bytes elsewhere), in one pass: each block is hashed
  // while it is still in cache.
  virtual Result<Digest> CopyAndHash(std::span<const LivePiece> pieces,
                                     HashAlgorithm algorithm) = 0;
};
std::unique_ptr<TensorMemory> HostMemory();

// A version as a reader on this machine sees it: its manifest (which the store verified), its
// files mapped read-only (one span per manifest file), and its delta payloads when kept.
struct VersionView {
  std::shared_ptr<const Manifest> manifest;
  std::vector<std::span<const uint8_t>> files;
  const DeltaFile* delta = nullptr;
};

class LiveSet;

struct ApplyOptions {
  // Hash every chunk written and compare it with the target manifest. Off only for a step of a
  // chain whose last step verifies: the set remembers the chunks it did not check, and the next
  // verifying Apply checks them too.
  bool verify = true;
  // A flip's other copy (same tensors, in the same memory), holding the version the target's
  // delta names as its base. Each chunk is first copied from it, then patched and checked while
  // it is still in cache: CopyFrom and Apply in one pass over the tensors instead of three. When
  // it does not hold the delta's base (or the target has no delta), it is not read and the
  // apply runs from what these tensors hold.
  const LiveSet* catch_up_from = nullptr;
};

struct ApplyReport {
  Version from;  // what the tensors held before (0: nothing known)
  Version to;
  bool delta = false;  // patched from payloads; otherwise chunks were copied from the files
  uint32_t chunks_patched = 0;
  uint32_t chunks_copied = 0;
  uint32_t chunks_unchanged = 0;
  uint32_t chunks_repaired = 0;  // patched, failed the check, then copied whole
  uint64_t payload_bytes = 0;    // payload bytes read
  uint64_t copied_bytes = 0;     // bytes copied from the files into live tensors
  bool caught_up = false;        // every chunk first taken from ApplyOptions::catch_up_from
  // The attestation of the tensors as this apply left them (what Attest would compute now),
  // when the apply hashed every chunk it covers with the attestation's algorithm: a caller
  // attesting right after the apply needs no second pass.
  struct Attestation {
    Digest digest{};
    bool matches = false;       // equal to ExpectedAttestation of the version
    bool every_tensor = false;  // RegistersEvery(the version)
  };
  std::optional<Attestation> attestation;
  // What each written chunk was checked with: xxh3-128 (the manifest's fast hashes), the chunk
  // hash algorithm, or wsum-128 (device checks, computed in device memory).
  HashAlgorithm check = HashAlgorithm::kSha256;
  double seconds = 0;
  std::string note;  // why no delta was used, or what was repaired
};

class LiveSet {
 public:
  // kInvalidArgument for an empty or duplicate name, or bytes whose size is not dtype x shape.
  static Result<std::unique_ptr<LiveSet>> Create(std::vector<LiveTensor> tensors,
                                                 std::unique_ptr<TensorMemory> memory = nullptr);

  // Brings the tensors to `target` (see the file comment). Before anything is written, every
  // registered tensor must be in the target with the same dtype and shape: kFailedPrecondition
  // naming the first that is not, the tensors untouched and still holding their version. Tensors
  // of the target that are not registered are not read. kCorrupt when a chunk cannot be made to
  // match the manifest even from the files: the tensors then hold no known version.
  Result<ApplyReport> Apply(const VersionView& target, const ApplyOptions& options = {});

  // Copies `other`'s tensors (the same names, dtypes and shapes; kFailedPrecondition otherwise)
  // and takes over the version they hold, every chunk marked unchecked so that the next Apply
  // checks all of them: a flip's second copy brought to the version in use with one memcpy,
  // after which one delta (not a chain of two) brings it to the next version.
  Status CopyFrom(const LiveSet& other);

  // The version the tensors hold (0 when none is known).
  Version version() const;

  // The attestation digest (manifest/attestation.h) of the tensors as they are now: each chunk
  // check of `view` computed from the live bytes (from the view's files where no registered
  // tensor lies), combined. Reads only; one hash pass over the model. kFailedPrecondition when
  // the set does not hold view's version. Equal to ExpectedAttestation(*view.manifest) exactly
  // when every chunk matches.
  Result<Digest> Attest(const VersionView& view) const;
  // Whether every tensor of `manifest` is registered here (none read from the files).
  bool RegistersEvery(const Manifest& manifest) const;
  // Whether the tensors hold the version `target`'s delta names as its base.
  bool HoldsBaseOf(const Manifest& target) const;

 private:
  // The view has a manifest and one mapped file of the manifest's size per manifest file.
  static Status CheckFiles(const VersionView& view);
  // kFailedPrecondition unless `other` registers the same names, dtypes and shapes in order.
  Status CheckSameTensors(const LiveSet& other) const;
  // ApplyReport::attestation from the checks an apply of `m` made (`checked_now`) and the
  // chunks that hold no registered tensor (`file_only`, hashed here from the view's files);
  // nullopt when some chunk was not hashed in the apply.
  Result<std::optional<Digest>> AttestationOfApply(const Manifest& m, const VersionView& view,
                                                   const std::vector<bool>& checked_now,
                                                   const std::vector<uint32_t>& file_only) const;

  LiveSet(std::vector<LiveTensor> tensors, std::unique_ptr<TensorMemory> memory);

  std::vector<LiveTensor> tensors_;
  std::unique_ptr<TensorMemory> memory_;
  std::shared_ptr<const Manifest> held_;  // null: no known version
  std::set<uint32_t> unverified_;         // chunks of held_ written without a check
};

}  // namespace weightcast::live
