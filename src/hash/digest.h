// SHA-256 (OpenSSL EVP, which uses SHA-NI where the CPU has it), HMAC-SHA256 and XXH3-128.
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
  kSha256 = 1,   // default: collision resistant, required when peers are not trusted
  kXxh3_128 = 2  // fast, for trusted networks where hashing time dominates; not cryptographic
};

std::string_view HashAlgorithmName(HashAlgorithm algorithm);  // "sha256", "xxh3-128"
Result<HashAlgorithm> ParseHashAlgorithm(std::string_view name);

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
