// Sharded publish (docs/sharded_publish.md): one version of a channel made of W parts,
// one per trainer rank. Each rank publishes its part as an ordinary signed manifest of its own
// files whose metadata says `weightcast.part = "R/W"`; the coordinator collects the W parts of a
// version in a PartAssembly and, once all are in, publishes one assembled manifest: the parts'
// files under `rank-RRRRR-of-WWWWW/`, laid end to end in rank order, each part starting on a
// chunk boundary, so the assembled chunk hashes are the parts' chunk hashes concatenated and
// every chunk of the version comes from exactly one rank.
//
// Pure: no I/O, no clock (deadlines are time points the caller compares), no threads. The
// coordinator calls it under its lock; in certificate mode every node runs it again on the
// ranks' signed parts (trust/signed_manifest.h, format 3), so no one has to trust the assembly.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "manifest/manifest.h"

namespace weightcast {

// When an assembly gives up waiting for its parts (the steady clock's, as net::TimePoint).
using PartDeadline = std::chrono::time_point<std::chrono::steady_clock, std::chrono::nanoseconds>;

// Metadata keys (signed with the manifest; not part of the root).
// A part manifest: "R/W", this is rank R of a version published by W ranks.
inline constexpr std::string_view kPartKey = "weightcast.part";
// A part manifest: the tensors of this part that are slices of a larger tensor, one line each in
// the format of kSlicesKey.
inline constexpr std::string_view kPartSlicesKey = "weightcast.part.slices";
// An assembled manifest: its parts, one line per rank in order:
// "rank \t first chunk \t chunk count \t offset \t size \t part root (hex)".
inline constexpr std::string_view kPartsKey = "weightcast.parts";
// An assembled manifest: how whole tensors are made of slices, one line per slice, ordered by
// whole name then start: "whole name \t dim \t slice name \t start \t length \t extent" (extent:
// the whole's size along dim). Split over keys kSlicesKey, kSlicesKey + ".1", ".2", ... when
// longer than one metadata value may be.
inline constexpr std::string_view kSlicesKey = "weightcast.slices";

struct PartId {
  uint32_t rank = 0;
  uint32_t world = 1;
  friend bool operator==(const PartId&, const PartId&) = default;
};

// The part a manifest is (kPartKey), nullopt for an ordinary manifest. kInvalidArgument for a
// malformed value (not "R/W" with R < W, 2 <= W <= kMaxWorld).
inline constexpr uint32_t kMaxWorld = 1024;
Result<std::optional<PartId>> PartOf(const Manifest& manifest);
// "R/W".
std::string PartValue(PartId part);

// Where one part lies in an assembled version.
struct PartLayout {
  uint32_t rank = 0;
  uint32_t first_chunk = 0;
  uint32_t chunk_count = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  Digest root{};  // the part manifest's own root
  friend bool operator==(const PartLayout&, const PartLayout&) = default;
};
// The part table of an assembled manifest (kPartsKey); empty when it is not assembled.
// kCorrupt when the table is malformed or disagrees with the manifest.
Result<std::vector<PartLayout>> PartsOf(const Manifest& assembled);

// One slice of a whole tensor, as the assembled manifest records it (kSlicesKey).
struct TensorSlice {
  std::string whole;  // the tensor a sampler sees
  uint32_t dim = 0;   // the dimension the whole is cut along
  std::string slice;  // the manifest tensor holding these elements
  uint64_t start = 0;
  uint64_t length = 0;
  uint64_t extent = 0;  // the whole's size along dim
  friend bool operator==(const TensorSlice&, const TensorSlice&) = default;
};
// The slices an assembled manifest (kSlicesKey) or a part manifest (kPartSlicesKey) records;
// empty when none. kCorrupt for malformed lines.
Result<std::vector<TensorSlice>> SlicesOf(const Manifest& manifest, std::string_view key);
// Slices as lines (the value of kPartSlicesKey, or of the kSlicesKey entries before splitting).
std::string SlicesText(const std::vector<TensorSlice>& slices);

// The directory a part's files go under in the assembled version.
std::string PartDirectory(PartId part);

// Collects the W parts of one version. Every check is made as a part arrives, so a part that
// can never belong (another world, chunk size or step) is refused with the reason at once.
class PartAssembly {
 public:
  PartAssembly(std::string channel, Version version, uint32_t world, PartDeadline deadline);

  enum class Added {
    kNew,        // the part was taken
    kDuplicate,  // this rank already gave this very part (same root): a retry, nothing changes
  };
  // Takes rank `part.rank`'s manifest. Refusals (nothing changes): kInvalidArgument (the part
  // does not fit this assembly: another channel, version or world, a rank out of range, a chunk
  // size or hash algorithm other than the first part's, a part other than the last that is not
  // a whole number of chunks); kAlreadyExists (this rank already gave another part for this
  // version); kFailedPrecondition (it conflicts with the parts in: a metadata value such as the
  // step that differs, a tensor name another rank has). A kFailedPrecondition means the version
  // can never be assembled: the caller aborts it.
  // `signed_bytes`: the part as its rank signed it, kept for SignedParts (may be empty).
  Result<Added> Add(PartId part, const Manifest& manifest,
                    std::span<const uint8_t> signed_bytes = {});

  const std::string& channel() const { return channel_; }
  Version version() const { return version_; }
  uint32_t world() const { return world_; }
  uint32_t parts_in() const { return static_cast<uint32_t>(parts_.size()); }
  bool complete() const { return parts_in() == world_; }
  bool Has(uint32_t rank) const { return parts_.contains(rank); }
  const Manifest* Part(uint32_t rank) const;
  std::vector<uint32_t> Missing() const;
  // The parts as their ranks signed them, rank 0 first (what Add was given).
  std::vector<std::vector<uint8_t>> SignedParts() const;
  PartDeadline deadline() const { return deadline_; }
  bool Expired(PartDeadline now) const { return !complete() && now >= deadline_; }
  // Why the version is aborted when the deadline passed: which ranks never came.
  std::string ExpiredReason(std::string_view timeout_text) const;

  // The assembled manifest of a complete assembly, root computed, unsigned. `base` is the
  // assembled version the parts' deltas name (null: none known): the result is a delta on it
  // when every part is a delta on that base's part of the same rank, laid out alike (same first
  // chunk and chunk count); otherwise a full version, and `*why_full` says why.
  Result<Manifest> Assemble(const Manifest* base, std::string* why_full = nullptr) const;

 private:
  std::string channel_;
  Version version_;
  uint32_t world_;
  PartDeadline deadline_;
  std::map<uint32_t, Manifest> parts_;
  std::map<uint32_t, std::vector<uint8_t>> signed_parts_;
  std::map<std::string, uint32_t> tensor_owner_;  // tensor name -> rank
};

}  // namespace weightcast
