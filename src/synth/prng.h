// Counter-based random numbers for synthetic checkpoints.
//
// Every value is a pure function of (seed, tensor name, stream, step, element index), so any
// slice of any tensor can be generated on its own, on any thread, in any order, and the same seed
// always gives the same bytes. splitmix64 is used in counter mode: output i of the generator keyed
// by k is Mix64(k + (i + 1) * golden), which is exactly splitmix64's i-th output from state k.
#pragma once

#include <cstdint>
#include <string_view>

namespace weightcast::synth {

inline constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// The splitmix64 finalizer: a bijection with full avalanche.
constexpr uint64_t Mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a over the name, then mixed, so that names differing in one digit get unrelated keys.
constexpr uint64_t HashName(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return Mix64(h);
}

// What a random stream is used for; part of the key so streams never share numbers.
enum class Stream : uint64_t {
  kBaseValue = 1,    // the checkpoint's initial value of each element
  kTensorScale = 2,  // per-tensor jitter of the init scale
  kResidual = 3,     // the sub-ulp part of the fp32 master weight behind a low-precision value
  kGradSignal = 4,   // the persistent part of an element's gradient
  kGradNoise = 5,    // the per-step part of an element's gradient
  kMomentInit = 6,   // the optimizer's first moment before step 1
};

// The key of one stream of one tensor at one step (step 0 for streams that do not vary by step).
constexpr uint64_t StreamKey(uint64_t seed, uint64_t name_hash, Stream stream, uint64_t step = 0) {
  uint64_t k = Mix64(seed ^ kGolden);
  k = Mix64(k ^ name_hash);
  k = Mix64(k + static_cast<uint64_t>(stream) * 0xD6E8FEB86659FD93ull);
  return Mix64(k + step * 0xA0761D6478BD642Full);
}

constexpr uint64_t RandomAt(uint64_t key, uint64_t index) {
  return Mix64(key + (index + 1) * kGolden);
}

// Uniform in [0, 1) from the top 24 bits (exact in float).
constexpr float Uniform01(uint64_t r) { return static_cast<float>(r >> 40) * 0x1p-24f; }

// A normal-ish deviate (mean 0, variance 1) from one 64-bit word: the Irwin-Hall sum of four
// 16-bit uniforms, rescaled. Its tails stop at about 3.46 sigma, which is harmless for weights and
// about ten times cheaper than Box-Muller, which matters when generating 100 GB.
constexpr float NormalIsh(uint64_t r) {
  uint32_t sum = static_cast<uint32_t>(r & 0xffff) + static_cast<uint32_t>((r >> 16) & 0xffff) +
                 static_cast<uint32_t>((r >> 32) & 0xffff) + static_cast<uint32_t>(r >> 48);
  // Mean of the sum is 4 * 32767.5; its standard deviation sqrt(4 * (65536^2 - 1) / 12).
  constexpr float kMean = 131070.0f;
  constexpr float kInvStd = 1.0f / 37837.23f;
  return (static_cast<float>(sum) - kMean) * kInvStd;
}

}  // namespace weightcast::synth
