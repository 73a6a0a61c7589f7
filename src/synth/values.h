// The values of a synthetic checkpoint: what each tensor's elements look like, generated slice by
// slice from counter-based random numbers (synth/prng.h).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "format/safetensors.h"

namespace weightcast::synth {

// How one tensor's initial values are distributed: mean + std * NormalIsh.
struct TensorInit {
  uint64_t name_hash = 0;
  float mean = 0.0f;
  float std = 0.02f;
};

// Norm weights ("...norm.weight") sit near 1.0 (mean 1, std 0.05); every other tensor is a
// projection or embedding with mean 0 and std 0.02 (the usual init) scaled by a per-tensor factor
// in [0.75, 1.25), so tensors differ a little in magnitude as trained ones do.
TensorInit InitFor(uint64_t seed, std::string_view tensor_name);

// Writes elements [first, first + out.size() / element size) of the tensor, encoded as `dtype`
// (one IsSynthFloatType accepts). Pure: the same arguments give the same bytes on any thread.
void GenerateValues(uint64_t seed, const TensorInit& init, DType dtype, uint64_t first,
                    std::span<uint8_t> out);

}  // namespace weightcast::synth
