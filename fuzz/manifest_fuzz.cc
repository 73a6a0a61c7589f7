// ParseManifest on arbitrary bytes: it must never crash, over-read or allocate without bound, and
// whatever it accepts must serialize and parse back to the same bytes. Seeds (fuzz/seeds/manifest/)
// include manifests with fast hashes and a delta table, so those fields are reached.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "manifest/builder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  Result<Manifest> m = ParseManifest({data, size});
  if (!m.ok()) return 0;
  const std::string again = SerializeManifest(*m);
  Result<Manifest> reparsed = ParseManifest(AsBytes(again));
  if (!reparsed.ok()) std::abort();
  if (SerializeManifest(*reparsed) != again) std::abort();
  if (ComputeRoot(*reparsed) != m->root) std::abort();
  // Fast hashes are accepted only as one 16-byte XXH3-128 per chunk of a SHA-256
  // manifest, and the root never depends on them.
  if (m->has_fast_hashes()) {
    if (m->fast_hashes.size() != m->chunk_count() || m->hash_algorithm != HashAlgorithm::kSha256) {
      std::abort();
    }
    for (const Digest& d : m->fast_hashes) {
      for (size_t i = 16; i < d.size(); ++i) {
        if (d[i] != 0) std::abort();
      }
    }
    Manifest without = *m;
    without.fast_hashes.clear();
    if (ComputeRoot(without) != m->root) std::abort();
  }
  if (m->delta.has_value() && m->delta->payload_hash_algorithm != HashAlgorithm::kSha256 &&
      m->delta->payload_hash_algorithm != m->hash_algorithm) {
    std::abort();
  }
  // Exercise the queries on whatever was accepted.
  (void)m->ChunksForTensors("*.weight");
  if (m->chunk_count() > 0) (void)m->TensorsIn(m->ChunkRange(ChunkIndex(0)));
  return 0;
}
