// Fuzzes DecodeChunk with arbitrary payload bytes: it must return an error or the exact target,
// never crash, over-read, or write outside (or partly into) the output buffer. The one-pass
// decoders (DecodeChunkUnverifiedInto, DecodeChunkStreaming) get the same bytes and must give the
// same verdict, stay inside their output, and hand the sink blocks front to back.
//
// The base is a fixed pattern of the payload's declared chunk length (capped), vouched for with
// the hash the payload names, so the fuzzer gets past the base check into the coders and the
// inverse transforms. Seeds (fuzz/seeds/delta_payload/) are valid payloads against that base.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "codec/chunk_codec.h"

using namespace weightcast;
using namespace weightcast::codec;

namespace {
constexpr size_t kGuard = 64;
constexpr uint64_t kMaxFuzzChunk = 1 << 20;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> payload(data, size);
  uint64_t chunk = 4096;
  Digest base_hash{};
  HashAlgorithm alg = HashAlgorithm::kSha256;
  if (auto h = ParsePayloadHeader(payload); h.ok() && h->chunk_size <= kMaxFuzzChunk) {
    chunk = h->chunk_size;
    base_hash = h->base_hash;
    alg = h->hash_algorithm;
  }
  std::vector<uint8_t> base(chunk);
  for (size_t i = 0; i < chunk; ++i) base[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<uint8_t> buffer(chunk + 2 * kGuard, 0xA5);
  const std::span<uint8_t> out(buffer.data() + kGuard, chunk);
  static CodecScratch scratch;
  const Status s = DecodeChunk(payload, HashedChunk::FromVerifiedManifest(base, base_hash, alg),
                               nullptr, out, scratch);
  for (size_t i = 0; i < buffer.size(); ++i) {
    const bool inside = i >= kGuard && i < kGuard + chunk;
    // Outside: never written. Inside: untouched on error.
    if ((!inside || !s.ok()) && buffer[i] != 0xA5) std::abort();
  }
  if (s.ok()) {
    auto h = ParsePayloadHeader(payload);
    if (!h.ok() || HashBytes(alg, out) != h->target_hash) std::abort();
  }
  // The one-pass decoders: same verdict; on success the same bytes; never outside the chunk.
  std::vector<uint8_t> into_buffer(chunk + 2 * kGuard, 0xA5);
  const std::span<uint8_t> into(into_buffer.data() + kGuard, chunk);
  const Status si = DecodeChunkUnverifiedInto(
      payload, HashedChunk::FromVerifiedManifest(base, base_hash, alg), nullptr, into, scratch);
  if (si.ok() != s.ok()) std::abort();
  for (size_t i = 0; i < into_buffer.size(); ++i) {
    const bool inside = i >= kGuard && i < kGuard + chunk;
    if (!inside && into_buffer[i] != 0xA5) std::abort();
  }
  if (si.ok() && !std::equal(into.begin(), into.end(), out.begin())) std::abort();
  std::vector<uint8_t> streamed;
  const Status ss = DecodeChunkStreaming(
      payload, HashedChunk::FromVerifiedManifest(base, base_hash, alg), nullptr, chunk,
      [&](uint64_t offset, std::span<const uint8_t> block) {
        if (offset != streamed.size() || block.empty() || block.size() > kDecodeBlock ||
            offset + block.size() > chunk) {
          std::abort();
        }
        streamed.insert(streamed.end(), block.begin(), block.end());
        return Status::Ok();
      },
      scratch);
  if (ss.ok() != s.ok()) std::abort();
  if (ss.ok() && !std::equal(streamed.begin(), streamed.end(), out.begin(), out.end())) {
    std::abort();
  }
  // Also with a base hash we compute: a wrong base must be refused, not decoded.
  const Status s2 = DecodeChunk(payload, HashedChunk::Compute(base, alg), nullptr, out, scratch);
  (void)s2.ok();
  return 0;
}
