// ParseManifest on arbitrary bytes: it must never crash, over-read or allocate without bound, and
// whatever it accepts must serialize and parse back to the same bytes.
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
  // Exercise the queries on whatever was accepted.
  (void)m->ChunksForTensors("*.weight");
  if (m->chunk_count() > 0) (void)m->TensorsIn(m->ChunkRange(ChunkIndex(0)));
  return 0;
}
