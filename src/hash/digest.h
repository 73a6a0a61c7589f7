// SHA-256 (OpenSSL EVP, which uses SHA-NI where the CPU has it), HMAC-SHA256, XXH3-128, and the
// weighted sums a device checks its memory with.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <weightcast/status.h>

namespace weightcast {

// 32 bytes. XXH3-128 digests fill the first 16 and leave the rest zero, so every chunk hash has
// one type whatever the algorithm.
using Digest = std::array<uint8_t, 32>;

enum class HashAlgorithm : uint8_t {
  kSha256 = 1,    // default: collision resistant, required when peers are not trusted
  kXxh3_128 = 2,  // fast, for trusted networks where hashing time dominates; not cryptographic
  // Not a hash: a checksum that tensor libraries compute on any device with a few integer ops.
  // Over the bytes b_0..b_{n-1} of a chunk, A = sum of b_i and B = sum of (i + 1) * b_i, both
  // mod 2^64, as two little-endian 64-bit words (16 bytes, then 16 zero bytes). Catches every
  // change of one byte and every exchange of two unequal bytes; for chunks up to 128 MiB the
  // sums never wrap, so a signed 64-bit reduction on a GPU gives them exactly. The check of
  // chunks written into device memory (Manifest::device_checks, docs/gpu.md); never a chunk
  // hash of a manifest, so ParseHashAlgorithm does not accept it.
  kWeightedSum128 = 3,
};

// "sha256", "xxh3-128", "wsum-128"
std::string_view HashAlgorithmName(HashAlgorithm algorithm);
// The chunk hash algorithms a manifest may use: sha256 and xxh3-128 (or xxh3).
Result<HashAlgorithm> ParseHashAlgorithm(std::string_view name);

// The weighted sums (A, B) of HashAlgorithm::kWeightedSum128 for `data` lying at `offset` in its
// chunk: A = sum of b_j, B = sum of (offset + j + 1) * b_j, mod 2^64. Sums of the pieces of a
// chunk add up to the chunk's; WeightedSumDigest turns them into its digest.
struct WeightedSums {
  uint64_t a = 0;
  uint64_t b = 0;
};
WeightedSums WeightedSumsOf(std::span<const uint8_t> data, uint64_t offset);
Digest WeightedSumDigest(WeightedSums sums);

Digest Sha256(std::span<const uint8_t> data);
Digest HashBytes(HashAlgorithm algorithm, std::span<const uint8_t> data);

// Incremental hashing of a stream, for data that arrives in pieces (a chunk spanning two files).
// Not thread-safe; one per stream.
class Hasher {
 public:
  explicit Hasher(HashAlgorithm algorithm);
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  void Update(std::span<const uint8_t> data);
  Digest Finish();  // The hasher is reset and can be reused.

 private:
  struct State;
  std::unique_ptr<State> state_;
};

Digest HmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> data);

// Compares in time independent of where the inputs differ (for MACs).
bool ConstantTimeEqual(std::span<const uint8_t> a, std::span<const uint8_t> b);

inline std::span<const uint8_t> AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace weightcast
