// Fuzzes the in-place apply of live/ (codec::ApplyChunkInPlace and ApplyChunkInPlaceHashing)
// with arbitrary payload bytes over a chunk held in three pieces (live, fixed, live): it must
// return an error or a result, never crash, over-read the stream or write outside the live
// pieces. The same bytes go to codec::DecodeChanges (what a device applies): every change it
// returns must lie inside the chunk, in increasing order, with its value's bytes. Seeds: the
// delta_payload seeds (valid payloads) are a good start.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "codec/chunk_codec.h"

using namespace weightcast;
using namespace weightcast::codec;

namespace {
constexpr size_t kGuard = 64;
constexpr uint64_t kMaxFuzzChunk = 1 << 20;

void CheckGuard(const std::vector<uint8_t>& buffer, size_t inner) {
  for (size_t i = 0; i < kGuard; ++i) {
    if (buffer[i] != 0xA5 || buffer[kGuard + inner + i] != 0xA5) std::abort();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> payload(data, size);
  uint64_t chunk = 4096;
  Digest base_hash{};
  if (auto h = ParsePayloadHeader(payload); h.ok() && h->chunk_size <= kMaxFuzzChunk) {
    chunk = h->chunk_size;
    base_hash = h->base_hash;
  }
  // Pieces: the first third live, 8 fixed bytes (or fewer), the rest live.
  const uint64_t first = chunk / 3;
  const uint64_t fixed = std::min<uint64_t>(8, chunk - first);
  const uint64_t last = chunk - first - fixed;
  std::vector<uint8_t> a(first + 2 * kGuard, 0xA5), b(last + 2 * kGuard, 0xA5);
  std::vector<uint8_t> fixed_bytes(fixed, 0x11);
  for (int hashing = 0; hashing < 2; ++hashing) {
    const std::vector<ChunkPiece> pieces = {{std::span<uint8_t>(a.data() + kGuard, first), {}},
                                            {{}, fixed_bytes},
                                            {std::span<uint8_t>(b.data() + kGuard, last), {}}};
    static CodecScratch scratch;
    if (hashing) {
      (void)ApplyChunkInPlaceHashing(payload, base_hash, pieces, HashAlgorithm::kXxh3_128, scratch);
    } else {
      (void)ApplyChunkInPlace(payload, base_hash, pieces, scratch);
    }
    CheckGuard(a, first);
    CheckGuard(b, last);
  }
  static CodecScratch scratch;
  if (Result<ChunkChanges> changes = DecodeChanges(payload, base_hash, chunk, scratch);
      changes.ok()) {
    if (changes->kind != ChunkChanges::Kind::kElements) {
      if (changes->bytes.size() != chunk) std::abort();
    }
    for (const ElementChanges& g : changes->groups) {
      if (g.values.size() != g.offsets.size() * g.width) std::abort();
      for (size_t e = 0; e < g.offsets.size(); ++e) {
        if (g.offsets[e] + g.width > chunk) std::abort();
        if (e > 0 && g.offsets[e] <= g.offsets[e - 1]) std::abort();
      }
    }
  }
  return 0;
}
