// Fuzzes the delta file reader of live/ (CheckDeltaFileBytes, then the payload lookups a reader
// makes) against a fixed manifest with a delta table: arbitrary bytes must be refused or give
// payload ranges inside the file, never crash or read outside it. Half the inputs get a valid
// header in front, so the fuzzer reaches the size and payload checks.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "hash/digest.h"
#include "live/delta_file.h"

using namespace weightcast;

namespace {

Manifest FixedManifest(const uint8_t* sizes) {
  Manifest m;
  m.channel = "policy";
  m.version = Version(7);
  m.chunk_size = 1 << 16;
  m.chunk_hashes.resize(3);
  m.root[0] = 0x42;
  DeltaInfo d;
  d.base_version = Version(6);
  d.base_root[0] = 0x24;
  for (int i = 0; i < 3; ++i) {
    DeltaChunk c;
    c.encoding = sizes[i] == 0 ? ChunkEncoding::kSame : ChunkEncoding::kXor;
    c.payload_size = sizes[i];
    d.chunks.push_back(c);
  }
  m.delta = d;
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const Manifest m = FixedManifest(data);
  const bool with_header = (data[3] & 1) != 0;
  std::vector<uint8_t> file;
  if (with_header) {
    // The header a writer would make, then the fuzz bytes as the payloads.
    file.insert(file.end(), {'W', 'C', 'L', 'D', 1, 0, 0, 0});
    auto put = [&](uint64_t v, int n) {
      for (int i = 0; i < n; ++i) file.push_back(static_cast<uint8_t>(v >> (8 * i)));
    };
    put(m.version.value(), 8);
    put(m.delta->base_version.value(), 8);
    put(m.chunk_count(), 4);
    put(0, 4);
    uint64_t total = 0;
    for (const DeltaChunk& c : m.delta->chunks) total += c.payload_size;
    put(total, 8);
    file.insert(file.end(), m.root.begin(), m.root.end());
    file.insert(file.end(), m.delta->base_root.begin(), m.delta->base_root.end());
  }
  file.insert(file.end(), data + 4, data + size);
  Result<std::vector<uint64_t>> offsets = live::CheckDeltaFileBytes(file, m, "fuzz");
  if (!offsets.ok()) return 0;
  for (size_t i = 0; i < offsets->size(); ++i) {
    const uint64_t at = (*offsets)[i];
    const uint64_t n = m.delta->chunks[i].payload_size;
    if (at > file.size() || n > file.size() - at) std::abort();
    (void)HashBytes(HashAlgorithm::kSha256, std::span<const uint8_t>(file).subspan(at, n));
  }
  return 0;
}
