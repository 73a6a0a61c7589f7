#include "node/chunk_intake.h"

namespace weightcast::node {

bool BaseHasSameChunk(const Manifest& target, const Manifest& base, ChunkIndex index) {
  const uint32_t i = index.value();
  return i < base.chunk_count() && i < target.chunk_count() &&
         base.hash_algorithm == target.hash_algorithm &&
         base.chunk_hashes[i] == target.chunk_hashes[i] &&
         base.ChunkRange(index).size == target.ChunkRange(index).size;
}

bool StageFromBase(const Manifest& target, ChunkIndex index, const Manifest& base,
                   const codec::SnapshotReader& base_bytes, codec::VerifyResult mode,
                   StagedVersion& staged, std::vector<uint8_t>& scratch) {
  if (!BaseHasSameChunk(target, base, index)) return false;
  const std::span<const uint8_t> same = base_bytes.Read(base.ChunkRange(index), scratch);
  return codec::CheckLocalCopy(target, index, same, mode).ok() &&
         staged.WriteChunk(index, same).ok() && staged.MarkVerified(index).ok();
}

codec::HashedChunk BaseChunkFor(const Manifest* base, const codec::SnapshotReader* base_bytes,
                                ChunkIndex index, HashAlgorithm algorithm,
                                std::vector<uint8_t>& scratch) {
  if (base == nullptr || base_bytes == nullptr || index.value() >= base->chunk_count()) {
    return codec::HashedChunk::Compute({}, algorithm);
  }
  const std::span<const uint8_t> bytes = base_bytes->Read(base->ChunkRange(index), scratch);
  if (bytes.empty()) return codec::HashedChunk::Compute({}, algorithm);
  return codec::HashedChunk::FromVerifiedManifest(bytes, base->chunk_hashes[index.value()],
                                                  algorithm);
}

}  // namespace weightcast::node
