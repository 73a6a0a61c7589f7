#include "hash/digest.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <xxhash.h>
#if defined(__x86_64__)
// libxxhash's runtime dispatch: XXH3 calls below go to the widest vector unit the CPU has (AVX2,
// AVX-512) instead of the SSE2 code the library is built with by default, 2.3x faster on a chunk
// in cache (docs/rl_step.md). The header renames the XXH3 entry points to their _dispatch forms.
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cstring>

namespace weightcast {

std::string_view HashAlgorithmName(HashAlgorithm algorithm) {
  switch (algorithm) {
    case HashAlgorithm::kSha256:
      return "sha256";
    case HashAlgorithm::kXxh3_128:
      return "xxh3-128";
    case HashAlgorithm::kWeightedSum128:
      return "wsum-128";
  }
  return "unknown";
}

Result<HashAlgorithm> ParseHashAlgorithm(std::string_view name) {
  if (name == "sha256") return HashAlgorithm::kSha256;
  if (name == "xxh3-128" || name == "xxh3") return HashAlgorithm::kXxh3_128;
  return InvalidArgument("unknown hash algorithm '" + std::string(name) +
                         "' (expected sha256 or xxh3-128)");
}

namespace {

Digest FromXxh128(XXH128_hash_t h) {
  Digest d{};
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, h);
  std::memcpy(d.data(), canon.digest, sizeof canon.digest);
  return d;
}

}  // namespace

namespace {

// The sums s = sum of p[j] and t = sum of j * p[j] over one whole 4 KiB block, read as 64 lines
// of 64 bytes: t = 64 * sum_k k * line_k + sum_l l * lane_l, where line_k sums line k and lane_l
// sums byte l of every line. The lane and line sums are plain vector adds (lanes fit 16 bits:
// 64 * 255), which the compiler vectorizes; a direct sum of j * p[j] does not.
void WholeBlockSums(const uint8_t* p, uint32_t& s, uint32_t& t) {
  uint16_t lanes[64] = {};
  uint32_t weighted_lines = 0;
  s = 0;
  for (uint32_t k = 0; k < 64; ++k) {
    const uint8_t* line = p + 64 * k;
    uint32_t sum = 0;
    for (uint32_t l = 0; l < 64; ++l) {
      lanes[l] = static_cast<uint16_t>(lanes[l] + line[l]);
      sum += line[l];
    }
    s += sum;
    weighted_lines += k * sum;
  }
  t = 64 * weighted_lines;
  for (uint32_t l = 0; l < 64; ++l) t += l * lanes[l];
}

}  // namespace

WeightedSums WeightedSumsOf(std::span<const uint8_t> data, uint64_t offset) {
  // Blocks of 4 KiB keep the inner sums in 32 bits (at most 4095 * 4096 / 2 * 255 < 2^32); each
  // block then adds (offset + start + 1) * s + t to B.
  constexpr size_t kBlock = 4096;
  WeightedSums out;
  for (size_t start = 0; start < data.size(); start += kBlock) {
    const size_t n = std::min(kBlock, data.size() - start);
    const uint8_t* p = data.data() + start;
    uint32_t s = 0;
    uint32_t t = 0;
    if (n == kBlock) {
      WholeBlockSums(p, s, t);
    } else {
      for (uint32_t j = 0; j < n; ++j) {
        s += p[j];
        t += j * p[j];
      }
    }
    out.a += s;
    out.b += (offset + start + 1) * static_cast<uint64_t>(s) + t;
  }
  return out;
}

Digest WeightedSumDigest(WeightedSums sums) {
  Digest d{};
  for (size_t i = 0; i < 8; ++i) {
    d[i] = static_cast<uint8_t>(sums.a >> (8 * i));
    d[8 + i] = static_cast<uint8_t>(sums.b >> (8 * i));
  }
  return d;
}

Digest Sha256(std::span<const uint8_t> data) {
  Digest d{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), d.data(), &len, EVP_sha256(), nullptr);
  return d;
}

Digest HashBytes(HashAlgorithm algorithm, std::span<const uint8_t> data) {
  if (algorithm == HashAlgorithm::kWeightedSum128)
    return WeightedSumDigest(WeightedSumsOf(data, 0));
  if (algorithm == HashAlgorithm::kXxh3_128)
    return FromXxh128(XXH3_128bits(data.data(), data.size()));
  return Sha256(data);
}

struct Hasher::State {
  HashAlgorithm algorithm;
  EVP_MD_CTX* sha = nullptr;
  XXH3_state_t* xxh = nullptr;
  WeightedSums sums;  // kWeightedSum128
  uint64_t length = 0;
};

Hasher::Hasher(HashAlgorithm algorithm) : state_(std::make_unique<State>()) {
  state_->algorithm = algorithm;
  if (algorithm == HashAlgorithm::kWeightedSum128) return;
  if (algorithm == HashAlgorithm::kXxh3_128) {
    state_->xxh = XXH3_createState();
    XXH3_128bits_reset(state_->xxh);
  } else {
    state_->sha = EVP_MD_CTX_new();
    EVP_DigestInit_ex(state_->sha, EVP_sha256(), nullptr);
  }
}

Hasher::~Hasher() {
  if (state_->sha != nullptr) EVP_MD_CTX_free(state_->sha);
  if (state_->xxh != nullptr) XXH3_freeState(state_->xxh);
}

void Hasher::Update(std::span<const uint8_t> data) {
  if (state_->algorithm == HashAlgorithm::kWeightedSum128) {
    const WeightedSums s = WeightedSumsOf(data, state_->length);
    state_->sums.a += s.a;
    state_->sums.b += s.b;
    state_->length += data.size();
    return;
  }
  if (state_->xxh != nullptr) {
    XXH3_128bits_update(state_->xxh, data.data(), data.size());
  } else {
    EVP_DigestUpdate(state_->sha, data.data(), data.size());
  }
}

Digest Hasher::Finish() {
  if (state_->algorithm == HashAlgorithm::kWeightedSum128) {
    const Digest d = WeightedSumDigest(state_->sums);
    state_->sums = {};
    state_->length = 0;
    return d;
  }
  if (state_->xxh != nullptr) {
    Digest d = FromXxh128(XXH3_128bits_digest(state_->xxh));
    XXH3_128bits_reset(state_->xxh);
    return d;
  }
  Digest d{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(state_->sha, d.data(), &len);
  EVP_DigestInit_ex(state_->sha, EVP_sha256(), nullptr);
  return d;
}

Digest HmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> data) {
  Digest d{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(), data.size(), d.data(),
       &len);
  return d;
}

bool ConstantTimeEqual(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace weightcast
