#include "live/device_memory.h"

#include <algorithm>
#include <vector>

#include "codec/chunk_codec.h"
#include "hash/digest.h"

namespace weightcast::live {
namespace {

uint64_t AddressOf(std::span<const uint8_t> live) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(live.data()));
}

class DeviceTensors final : public TensorMemory {
 public:
  explicit DeviceTensors(std::shared_ptr<DeviceMemory> device) : device_(std::move(device)) {}

  bool ChecksOnDevice() const override { return true; }

  Status Patch(std::span<const uint8_t> payload, const Digest& base_hash,
               std::span<const codec::ChunkPiece> pieces) override {
    uint64_t chunk_size = 0;
    for (const codec::ChunkPiece& p : pieces) chunk_size += p.size();
    WC_ASSIGN_OR_RETURN(const codec::ChunkChanges changes,
                        codec::DecodeChanges(payload, base_hash, chunk_size, scratch_));
    uint64_t at = 0;
    for (const codec::ChunkPiece& p : pieces) {
      const uint64_t begin = at;
      at += p.size();
      if (p.live.empty()) continue;  // bytes the sampler does not hold: already the target's
      const uint64_t address = AddressOf(p.live);
      switch (changes.kind) {
        case codec::ChunkChanges::Kind::kFull:
          WC_RETURN_IF_ERROR(
              device_->Write(address, std::span(changes.bytes).subspan(begin, p.size())));
          break;
        case codec::ChunkChanges::Kind::kXorBytes:
          WC_RETURN_IF_ERROR(
              device_->XorBytes(address, std::span(changes.bytes).subspan(begin, p.size())));
          break;
        case codec::ChunkChanges::Kind::kElements:
          for (const codec::ElementChanges& g : changes.groups) {
            WC_RETURN_IF_ERROR(ChangePiece(g, begin, at, address));
          }
          break;
      }
    }
    return Status::Ok();
  }

  Result<Digest> PatchAndHash(std::span<const uint8_t> payload, const Digest& base_hash,
                              std::span<const codec::ChunkPiece> pieces,
                              HashAlgorithm algorithm) override {
    WC_RETURN_IF_ERROR(Patch(payload, base_hash, pieces));
    return Hash(pieces, algorithm);
  }

  Status Copy(std::span<uint8_t> live, std::span<const uint8_t> from) override {
    if (live.empty()) return Status::Ok();
    return device_->Write(AddressOf(live), from.first(live.size()));
  }

  Status CopyLive(std::span<uint8_t> live, std::span<const uint8_t> from) override {
    if (live.empty()) return Status::Ok();
    return device_->Copy(AddressOf(live), AddressOf(from), live.size());
  }

  Result<Digest> Hash(std::span<const codec::ChunkPiece> pieces, HashAlgorithm algorithm) override {
    if (algorithm == HashAlgorithm::kWeightedSum128) {
      WeightedSums total;
      uint64_t at = 0;
      for (const codec::ChunkPiece& p : pieces) {
        WeightedSums s;
        if (p.live.empty()) {
          s = WeightedSumsOf(p.fixed, at);
        } else {
          WC_ASSIGN_OR_RETURN(const DeviceMemory::Sums local,
                              device_->WeightedSums(AddressOf(p.live), p.live.size()));
          // Weights start at 1 in the piece; at `at` in the chunk each weight is `at` more.
          s = {local.a, local.b + at * local.a};
        }
        total.a += s.a;
        total.b += s.b;
        at += p.size();
      }
      return WeightedSumDigest(total);
    }
    // No device checks: the live bytes come back to the host to be hashed.
    Hasher hasher(algorithm);
    for (const codec::ChunkPiece& p : pieces) {
      if (p.live.empty()) {
        hasher.Update(p.fixed);
        continue;
      }
      readback_.resize(p.live.size());
      WC_RETURN_IF_ERROR(device_->Read(AddressOf(p.live), readback_));
      hasher.Update(readback_);
    }
    return hasher.Finish();
  }

  Result<Digest> CopyAndHash(std::span<const LivePiece> pieces, HashAlgorithm algorithm) override {
    std::vector<codec::ChunkPiece> written;
    written.reserve(pieces.size());
    for (const LivePiece& p : pieces) {
      codec::ChunkPiece c;
      if (p.live.empty()) {
        c.fixed = p.file;
      } else {
        WC_RETURN_IF_ERROR(Copy(p.live, p.file));
        c.live = p.live;
      }
      written.push_back(c);
    }
    // Hashed as written, where it was written: the check covers the transfer too.
    return Hash(written, algorithm);
  }

 private:
  // The changes of group `g` that fall in the live piece [begin, end) of the chunk, at
  // `address` on the device. An element may not cross the piece's edge (elements lie in one
  // tensor, and a piece is one tensor's bytes in the chunk).
  Status ChangePiece(const codec::ElementChanges& g, uint64_t begin, uint64_t end,
                     uint64_t address) {
    const auto first = std::lower_bound(g.offsets.begin(), g.offsets.end(), begin);
    const auto last = std::lower_bound(first, g.offsets.end(), end);
    if (first == last) return Status::Ok();
    if (*(last - 1) + g.width > end) {
      return Corrupt("delta payload changes an element across two live pieces");
    }
    offsets_.assign(first, last);
    for (uint64_t& o : offsets_) o -= begin;
    const size_t from = static_cast<size_t>(first - g.offsets.begin()) * g.width;
    const size_t count = offsets_.size() * g.width;
    return device_->Change(address, g.width, g.add, offsets_,
                           std::span(g.values).subspan(from, count));
  }

  std::shared_ptr<DeviceMemory> device_;
  codec::CodecScratch scratch_;
  std::vector<uint64_t> offsets_;
  std::vector<uint8_t> readback_;
};

}  // namespace

std::unique_ptr<TensorMemory> DeviceTensorMemory(std::shared_ptr<DeviceMemory> device) {
  return std::make_unique<DeviceTensors>(std::move(device));
}

}  // namespace weightcast::live
