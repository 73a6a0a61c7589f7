#include "live/live_set.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "format/safetensors.h"
#include "hash/digest.h"
#include "manifest/attestation.h"

namespace weightcast::live {

namespace {

class HostTensorMemory final : public TensorMemory {
 public:
  Status Patch(std::span<const uint8_t> payload, const Digest& base_hash,
               std::span<const codec::ChunkPiece> pieces) override {
    return codec::ApplyChunkInPlace(payload, base_hash, pieces, scratch_);
  }
  Result<Digest> PatchAndHash(std::span<const uint8_t> payload, const Digest& base_hash,
                              std::span<const codec::ChunkPiece> pieces,
                              HashAlgorithm algorithm) override {
    return codec::ApplyChunkInPlaceHashing(payload, base_hash, pieces, algorithm, scratch_);
  }
  Status Copy(std::span<uint8_t> live, std::span<const uint8_t> from) override {
    if (!live.empty()) std::memcpy(live.data(), from.data(), live.size());
    return Status::Ok();
  }
  Result<Digest> Hash(std::span<const codec::ChunkPiece> pieces, HashAlgorithm algorithm) override {
    return codec::HashPieces(pieces, algorithm);
  }
  Result<Digest> CopyAndHash(std::span<const LivePiece> pieces, HashAlgorithm algorithm) override {
    constexpr size_t kBlock = 64 << 10;  // well inside L2: the hash reads what the copy wrote
    Hasher hasher(algorithm);
    for (const LivePiece& p : pieces) {
      if (p.live.empty()) {
        hasher.Update(p.file);
        continue;
      }
      for (size_t at = 0; at < p.live.size(); at += kBlock) {
        const size_t n = std::min(kBlock, p.live.size() - at);
        std::memcpy(p.live.data() + at, p.file.data() + at, n);
        hasher.Update(p.live.subspan(at, n));
      }
    }
    return hasher.Finish();
  }

 private:
  codec::CodecScratch scratch_;
};

std::string Describe(DType dtype, const std::vector<uint64_t>& shape) {
  std::string s(DTypeName(dtype));
  s += " [";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A chunk of the target as the live tensors and the target's files hold it: for each piece, the
// live bytes (when a registered tensor covers it) and the file bytes at the same place.
using Piece = LivePiece;

class ChunkLayout {
 public:
  ChunkLayout(const Manifest& m, const std::vector<std::span<const uint8_t>>& files,
              const std::map<std::string, const LiveTensor*>& live)
      : m_(m), files_(files), live_(live) {}

  // The pieces of chunk `index`, front to back; false when no registered tensor is in it.
  bool Build(ChunkIndex index, std::vector<Piece>& out) const {
    out.clear();
    const ByteRange r = m_.ChunkRange(index);
    uint64_t at = r.offset;
    bool any_live = false;
    for (const ManifestTensor* t : m_.TensorsIn(r)) {
      auto it = live_.find(t->name);
      if (it == live_.end()) continue;
      const uint64_t begin = std::max(t->offset, r.offset);
      const uint64_t end = std::min(t->offset + t->size, r.end());
      AddFile(at, begin, out);
      Piece p;
      p.live = it->second->bytes.subspan(begin - t->offset, end - begin);
      p.file = FileBytes(begin, end - begin);
      out.push_back(p);
      any_live = true;
      at = end;
    }
    AddFile(at, r.end(), out);
    return any_live;
  }

 private:
  // Fixed pieces for [begin, end), split where files meet.
  void AddFile(uint64_t begin, uint64_t end, std::vector<Piece>& out) const {
    while (begin < end) {
      const ManifestFile& f = FileAt(begin);
      const uint64_t stop = std::min(end, f.offset + f.size);
      out.push_back(Piece{{}, FileBytes(begin, stop - begin)});
      begin = stop;
    }
  }
  const ManifestFile& FileAt(uint64_t offset) const {
    auto it = std::partition_point(m_.files.begin(), m_.files.end(), [&](const ManifestFile& f) {
      return f.offset + f.size <= offset;
    });
    return *it;
  }
  // A tensor's bytes lie in one file, so a live piece never crosses files.
  std::span<const uint8_t> FileBytes(uint64_t offset, uint64_t size) const {
    const ManifestFile& f = FileAt(offset);
    const size_t index = static_cast<size_t>(&f - m_.files.data());
    return files_[index].subspan(offset - f.offset, size);
  }

  const Manifest& m_;
  const std::vector<std::span<const uint8_t>>& files_;
  const std::map<std::string, const LiveTensor*>& live_;
};

std::vector<codec::ChunkPiece> AsChunkPieces(const std::vector<Piece>& pieces) {
  std::vector<codec::ChunkPiece> out;
  out.reserve(pieces.size());
  for (const Piece& p : pieces) {
    codec::ChunkPiece c;
    if (p.live.empty()) {
      c.fixed = p.file;
    } else {
      c.live = p.live;
    }
    out.push_back(c);
  }
  return out;
}

// The registered tensors sit where they sat in `held`, with the same chunk size: a chunk index
// then names the same live bytes in both versions, so payloads and unchanged-chunk skips apply.
bool SameLayout(const Manifest& held, const Manifest& target,
                const std::map<std::string, const LiveTensor*>& live) {
  if (held.chunk_size != target.chunk_size || held.chunk_count() != target.chunk_count()) {
    return false;
  }
  std::map<std::string_view, const ManifestTensor*> before;
  for (const ManifestTensor& t : held.tensors) before[t.name] = &t;
  for (const ManifestTensor& t : target.tensors) {
    if (!live.contains(t.name)) continue;
    auto it = before.find(t.name);
    if (it == before.end() || it->second->offset != t.offset || it->second->size != t.size) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::unique_ptr<TensorMemory> HostMemory() { return std::make_unique<HostTensorMemory>(); }

LiveSet::LiveSet(std::vector<LiveTensor> tensors, std::unique_ptr<TensorMemory> memory)
    : tensors_(std::move(tensors)), memory_(std::move(memory)) {}

Result<std::unique_ptr<LiveSet>> LiveSet::Create(std::vector<LiveTensor> tensors,
                                                 std::unique_ptr<TensorMemory> memory) {
  std::set<std::string_view> names;
  for (const LiveTensor& t : tensors) {
    if (t.name.empty()) return InvalidArgument("a live tensor has an empty name");
    if (!names.insert(t.name).second) return InvalidArgument("live tensor '" + t.name + "' twice");
    WC_ASSIGN_OR_RETURN(const uint64_t size, TensorByteSize(t.dtype, t.shape));
    if (size != t.bytes.size()) {
      return InvalidArgument("live tensor '" + t.name + "' (" + Describe(t.dtype, t.shape) +
                             ") needs " + std::to_string(size) + " bytes, it has " +
                             std::to_string(t.bytes.size()));
    }
  }
  if (memory == nullptr) memory = HostMemory();
  return std::unique_ptr<LiveSet>(new LiveSet(std::move(tensors), std::move(memory)));
}

Version LiveSet::version() const { return held_ ? held_->version : Version(0); }

Status LiveSet::CheckSameTensors(const LiveSet& other) const {
  if (other.tensors_.size() != tensors_.size()) {
    return FailedPrecondition("the two live sets hold different tensors");
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const LiveTensor& a = tensors_[i];
    const LiveTensor& b = other.tensors_[i];
    if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape) {
      return FailedPrecondition("live tensor '" + a.name + "' does not match '" + b.name +
                                "' of the other set");
    }
  }
  return Status::Ok();
}

bool LiveSet::HoldsBaseOf(const Manifest& target) const {
  return held_ != nullptr && target.delta.has_value() &&
         target.delta->base_version == held_->version && target.delta->base_root == held_->root;
}

Status LiveSet::CopyFrom(const LiveSet& other) {
  WC_RETURN_IF_ERROR(CheckSameTensors(other));
  for (size_t i = 0; i < tensors_.size(); ++i) {
    WC_RETURN_IF_ERROR(memory_->CopyLive(tensors_[i].bytes, other.tensors_[i].bytes));
  }
  held_ = other.held_;
  unverified_.clear();
  if (held_ != nullptr) {
    for (uint32_t c = 0; c < held_->chunk_count(); ++c) unverified_.insert(c);
  }
  return Status::Ok();
}

Result<std::optional<Digest>> LiveSet::AttestationOfApply(
    const Manifest& m, const VersionView& view, const std::vector<bool>& checked_now,
    const std::vector<uint32_t>& file_only) const {
  std::vector<Digest> checks = AttestationChecks(m);
  std::vector<bool> covered = checked_now;
  // Chunks that hold no registered tensor: their bytes are the files', hashed as Attest does.
  std::map<std::string, const LiveTensor*> none;
  const ChunkLayout files(m, view.files, none);
  std::vector<Piece> pieces;
  for (uint32_t i : file_only) {
    files.Build(ChunkIndex(i), pieces);
    WC_ASSIGN_OR_RETURN(checks[i],
                        memory_->Hash(AsChunkPieces(pieces), AttestationCheckAlgorithm(m)));
    covered[i] = true;
  }
  if (std::find(covered.begin(), covered.end(), false) != covered.end()) {
    return std::optional<Digest>();
  }
  return std::optional<Digest>(CombineChunkChecks(checks));
}

Result<Digest> LiveSet::Attest(const VersionView& view) const {
  WC_RETURN_IF_ERROR(CheckFiles(view));
  const Manifest& m = *view.manifest;
  if (held_ == nullptr || held_->version != m.version || held_->root != m.root) {
    return FailedPrecondition("the live tensors hold " +
                              (held_ == nullptr ? std::string("no known version")
                                                : "v" + std::to_string(held_->version.value())) +
                              ", not v" + std::to_string(m.version.value()));
  }
  std::map<std::string, const LiveTensor*> live;
  for (const LiveTensor& t : tensors_) live[t.name] = &t;
  const ChunkLayout layout(m, view.files, live);
  const HashAlgorithm algorithm = AttestationCheckAlgorithm(m);
  std::vector<Digest> checks(m.chunk_count());
  std::vector<Piece> pieces;
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    layout.Build(ChunkIndex(i), pieces);
    WC_ASSIGN_OR_RETURN(checks[i], memory_->Hash(AsChunkPieces(pieces), algorithm));
  }
  return CombineChunkChecks(checks);
}

bool LiveSet::RegistersEvery(const Manifest& manifest) const {
  std::set<std::string_view> registered;
  for (const LiveTensor& t : tensors_) registered.insert(t.name);
  return std::all_of(manifest.tensors.begin(), manifest.tensors.end(),
                     [&](const ManifestTensor& t) { return registered.contains(t.name); });
}

Status LiveSet::CheckFiles(const VersionView& view) {
  if (view.manifest == nullptr) return InvalidArgument("no target manifest");
  const Manifest& m = *view.manifest;
  if (view.files.size() != m.files.size()) {
    return InvalidArgument("target has " + std::to_string(m.files.size()) + " files, " +
                           std::to_string(view.files.size()) + " mapped");
  }
  for (size_t i = 0; i < m.files.size(); ++i) {
    if (view.files[i].size() != m.files[i].size) {
      return Corrupt(m.files[i].path + " is " + std::to_string(view.files[i].size()) +
                     " bytes, its manifest says " + std::to_string(m.files[i].size));
    }
  }
  return Status::Ok();
}

Result<ApplyReport> LiveSet::Apply(const VersionView& target, const ApplyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  WC_RETURN_IF_ERROR(CheckFiles(target));
  const Manifest& m = *target.manifest;
  // Every registered tensor must be in the target as it is registered; checked before any write.
  std::map<std::string_view, const ManifestTensor*> in_target;
  for (const ManifestTensor& t : m.tensors) in_target[t.name] = &t;
  std::map<std::string, const LiveTensor*> live;
  for (const LiveTensor& t : tensors_) {
    auto it = in_target.find(t.name);
    if (it == in_target.end()) {
      return FailedPrecondition("live tensor '" + t.name + "' is not in v" +
                                std::to_string(m.version.value()) +
                                "; the live weights are unchanged");
    }
    if (it->second->dtype != t.dtype || it->second->shape != t.shape) {
      return FailedPrecondition("live tensor '" + t.name + "' is " + Describe(t.dtype, t.shape) +
                                ", v" + std::to_string(m.version.value()) + " has " +
                                Describe(it->second->dtype, it->second->shape) +
                                "; the live weights are unchanged");
    }
    live[t.name] = &t;
  }

  ApplyReport report;
  report.from = version();
  report.to = m.version;
  // With a catch-up source that holds the delta's base, the chunks start from its bytes, so
  // its version and unchecked chunks are what these tensors are patched from.
  const LiveSet* source = options.catch_up_from;
  if (source == this) source = nullptr;
  if (source != nullptr) {
    WC_RETURN_IF_ERROR(CheckSameTensors(*source));
    // The same names as these tensors (checked above): the same layout question.
    if (!source->HoldsBaseOf(m) || target.delta == nullptr ||
        !SameLayout(*source->held_, m, live)) {
      source = nullptr;
    }
  }
  const std::shared_ptr<const Manifest>& base = source != nullptr ? source->held_ : held_;
  const bool same_layout = base != nullptr && SameLayout(*base, m, live);
  const bool base_held = source != nullptr || HoldsBaseOf(m);
  report.delta = same_layout && base_held && target.delta != nullptr;
  report.caught_up = source != nullptr;
  if (!report.delta) {
    report.note =
        held_ == nullptr       ? "the tensors hold no known version"
        : !m.delta.has_value() ? "v" + std::to_string(m.version.value()) + " is a full version"
        : !base_held           ? "the tensors hold v" + std::to_string(held_->version.value()) +
                           ", the delta's base is v" + std::to_string(m.delta->base_version.value())
        : !same_layout ? "the tensors moved between the versions"
                       : "no delta file for v" + std::to_string(m.version.value());
  }

  // From here on the tensors are being rewritten: until the end they hold no known version.
  std::shared_ptr<const Manifest> held = base;
  std::set<uint32_t> unverified = std::move(unverified_);
  held_.reset();
  unverified_.clear();
  if (!same_layout) unverified.clear();  // chunk indices of another layout mean nothing here
  std::map<std::string, const LiveTensor*> theirs;
  if (source != nullptr) {
    // Every chunk is a copy until it is checked, as after CopyFrom.
    unverified.clear();
    for (uint32_t c = 0; c < m.chunk_count(); ++c) unverified.insert(c);
    for (const LiveTensor& t : source->tensors_) theirs[t.name] = &t;
  }
  const ChunkLayout their_layout(m, target.files, theirs);
  std::vector<Piece> their_pieces;

  const ChunkLayout layout(m, target.files, live);
  // Every chunk written is checked against the manifest's fast checksums when it has them
  // (XXH3-128, signed with the rest of it): the bytes come from the store's verified files or
  // from payloads checked against their SHA-256, so what the check must catch is a bad base, a
  // decoder bug or a memory error, and a 128-bit checksum does that at memory speed
  // (docs/verification.md). Without them, the chunk hashes themselves. Tensors in device
  // memory are checked there, against the device checks when the version has them
  // (docs/gpu.md); otherwise their bytes are read back to hash them.
  const bool on_device = memory_->ChecksOnDevice() && m.has_device_checks();
  const bool fast = m.has_fast_hashes();
  const HashAlgorithm check_algorithm = on_device ? HashAlgorithm::kWeightedSum128
                                        : fast    ? HashAlgorithm::kXxh3_128
                                                  : m.hash_algorithm;
  const std::vector<Digest>& checks = on_device ? m.device_checks
                                      : fast    ? m.fast_hashes
                                                : m.chunk_hashes;
  report.check = check_algorithm;
  std::vector<Piece> pieces;
  std::set<uint32_t> left_unverified;
  const auto live_bytes = [&] {
    uint64_t n = 0;
    for (const Piece& p : pieces) n += p.live.size();
    return n;
  };
  auto copy_whole = [&](ChunkIndex index) -> Status {
    report.copied_bytes += live_bytes();
    WC_ASSIGN_OR_RETURN(const Digest got, memory_->CopyAndHash(pieces, check_algorithm));
    if (got != checks[index.value()]) {
      return Corrupt("chunk " + std::to_string(index.value()) + " of v" +
                     std::to_string(m.version.value()) +
                     " does not match its manifest even as copied from the store's files");
    }
    return Status::Ok();
  };
  // Chunks whose live bytes were hashed in this apply (and so match the manifest's check, or
  // the apply fails): when that is every chunk with live bytes, the apply has computed the
  // attestation's pass already (docs/live.md, "Attestation").
  std::vector<bool> checked_now(m.chunk_count(), false);
  std::vector<uint32_t> file_only;
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    const ChunkIndex index(i);
    if (!layout.Build(index, pieces)) {
      file_only.push_back(i);
      continue;
    }
    if (source != nullptr) {
      // The same chunk of the same layout: the same pieces, front to back.
      their_layout.Build(index, their_pieces);
      for (size_t k = 0; k < pieces.size() && k < their_pieces.size(); ++k) {
        if (pieces[k].live.empty()) continue;
        WC_RETURN_IF_ERROR(memory_->CopyLive(pieces[k].live, their_pieces[k].live));
      }
    }
    std::vector<codec::ChunkPiece> chunk = AsChunkPieces(pieces);
    const bool was_unverified = unverified.contains(i);
    const bool check = options.verify;
    const Digest& want = checks[i];
    if (report.delta) {
      const DeltaChunk& d = m.delta->chunks[i];
      if (d.encoding == ChunkEncoding::kSame) {
        ++report.chunks_unchanged;
        if (was_unverified) {
          if (!check) {
            left_unverified.insert(i);
          } else {
            WC_ASSIGN_OR_RETURN(const Digest got, memory_->Hash(chunk, check_algorithm));
            if (got != want) {
              WC_RETURN_IF_ERROR(copy_whole(index));
              ++report.chunks_repaired;
            }
            checked_now[i] = true;
          }
        }
        continue;
      }
      Status s;
      bool matches = false;
      Result<std::span<const uint8_t>> payload = target.delta->Payload(m, index);
      if (!payload.ok()) {
        s = payload.status();
      } else if (!check) {
        report.payload_bytes += payload->size();
        s = memory_->Patch(*payload, held->chunk_hashes[i], chunk);
        if (s.ok()) {
          left_unverified.insert(i);
          ++report.chunks_patched;
          continue;
        }
      } else {
        report.payload_bytes += payload->size();
        Result<Digest> got =
            memory_->PatchAndHash(*payload, held->chunk_hashes[i], chunk, check_algorithm);
        s = got.status();
        matches = got.ok() && *got == want;
      }
      if (matches) {
        ++report.chunks_patched;
        checked_now[i] = true;
        continue;
      }
      // A damaged payload, a damaged base (live bytes changed behind our back) or a decoder bug:
      // never keep the result; take the chunk whole from the store.
      if (report.note.empty()) {
        report.note =
            "chunk " + std::to_string(i) + ": " +
            (s.ok() ? std::string("patched result does not match the manifest") : s.message()) +
            "; copied whole";
      }
      WC_RETURN_IF_ERROR(copy_whole(index));
      ++report.chunks_repaired;
      checked_now[i] = true;
      continue;
    }
    // No usable delta: copy what differs from the version held (same layout, same hash and
    // checked), everything else.
    if (same_layout && !was_unverified && held->chunk_hashes[i] == m.chunk_hashes[i]) {
      ++report.chunks_unchanged;
      continue;
    }
    ++report.chunks_copied;
    report.copied_bytes += live_bytes();
    if (!check) {
      for (const Piece& p : pieces) WC_RETURN_IF_ERROR(memory_->Copy(p.live, p.file));
      left_unverified.insert(i);
      continue;
    }
    WC_ASSIGN_OR_RETURN(const Digest got, memory_->CopyAndHash(pieces, check_algorithm));
    if (got != want) {
      return Corrupt("chunk " + std::to_string(i) + " of v" + std::to_string(m.version.value()) +
                     " does not match its manifest as copied from the store's files");
    }
    checked_now[i] = true;
  }
  if (check_algorithm == AttestationCheckAlgorithm(m)) {
    WC_ASSIGN_OR_RETURN(const std::optional<Digest> digest,
                        AttestationOfApply(m, target, checked_now, file_only));
    if (digest.has_value()) {
      report.attestation =
          ApplyReport::Attestation{*digest, *digest == ExpectedAttestation(m), RegistersEvery(m)};
    }
  }
  held_ = target.manifest;
  unverified_ = std::move(left_unverified);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace weightcast::live
