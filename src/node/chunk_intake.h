// Taking chunks into a staging from a local base: the one way every receiver (a swarm node's
// intake, a point-to-point fetch) copies the chunks its base already holds, and finds the chunk
// a payload decodes onto (docs/verification.md). A whole chunk from a peer goes in through
// StagedVersion::PutChunk, which checks its size and hash before writing it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <weightcast/status.h>

#include "codec/chunk_codec.h"
#include "codec/version_codec.h"
#include "manifest/manifest.h"
#include "store/store.h"

namespace weightcast::node {

// Whether the base holds chunk `index` of `target` byte for byte: the same chunk hash (and
// algorithm) and size.
bool BaseHasSameChunk(const Manifest& target, const Manifest& base, ChunkIndex index);

// Chunk `index` of `target` copied from a local base that has the same chunk (BaseHasSameChunk):
// read, checked again on the way in (codec::CheckLocalCopy: a base changed on disk, a memory
// error; by the fast hash when the manifest has them, since nothing here came from a peer),
// written and marked verified. True when staged; false when the base's chunk differs or the copy
// failed (the chunk must then come from elsewhere). `scratch`: a buffer for a chunk that spans
// files, reused call to call.
bool StageFromBase(const Manifest& target, ChunkIndex index, const Manifest& base,
                   const codec::SnapshotReader& base_bytes, codec::VerifyResult mode,
                   StagedVersion& staged, std::vector<uint8_t>& scratch);

// The chunk a payload of chunk `index` decodes onto: the base's chunk, vouched for by the base's
// manifest (its bytes were verified when staged), or an empty chunk when there is no base or it
// has no such chunk (a payload that is the whole chunk). Its bytes may lie in `scratch`.
codec::HashedChunk BaseChunkFor(const Manifest* base, const codec::SnapshotReader* base_bytes,
                                ChunkIndex index, HashAlgorithm algorithm,
                                std::vector<uint8_t>& scratch);

}  // namespace weightcast::node
