// Conversions between fp32 and the element types synthetic checkpoints are stored in (BF16, F16,
// F8_E4M3, F32), all rounding to nearest with ties to even as PyTorch's casts do.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "format/safetensors.h"

namespace weightcast::synth {

inline uint16_t FloatToBf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline float Bf16ToFloat(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

uint16_t FloatToF16(float f);
float F16ToFloat(uint16_t h);

// OCP FP8 E4M3 ("e4m3fn"): no infinities, 0x7f/0xff are NaN, largest finite 448. Values beyond
// 448 saturate to +-448 rather than becoming NaN.
uint8_t FloatToE4M3(float f);
float E4M3ToFloat(uint8_t b);

// True for the dtypes the generators can write and the step model can update.
bool IsSynthFloatType(DType dtype);

// Bytes per element of a type IsSynthFloatType accepts.
size_t SynthElementBytes(DType dtype);

// Encodes `value` as one element of `dtype` at `out` (little-endian).
inline void EncodeElement(DType dtype, float value, uint8_t* out) {
  switch (dtype) {
    case DType::kBF16: {
      uint16_t h = FloatToBf16(value);
      std::memcpy(out, &h, 2);
      return;
    }
    case DType::kF16: {
      uint16_t h = FloatToF16(value);
      std::memcpy(out, &h, 2);
      return;
    }
    case DType::kF8_E4M3:
      *out = FloatToE4M3(value);
      return;
    default:
      std::memcpy(out, &value, 4);
      return;
  }
}

inline float DecodeElement(DType dtype, const uint8_t* in) {
  switch (dtype) {
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, in, 2);
      return Bf16ToFloat(h);
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, in, 2);
      return F16ToFloat(h);
    }
    case DType::kF8_E4M3:
      return E4M3ToFloat(*in);
    default: {
      float f;
      std::memcpy(&f, in, 4);
      return f;
    }
  }
}

// The rounding cell of the element `v` of `dtype`: every value strictly within
// (v - below, v + above) rounds back to `v`; below and above are half the gaps to the neighbours,
// which differ at a power of two. {0, 0} for F32, whose elements are the master weights
// themselves, for zero (its neighbours differ in sign, and -0 has other bytes than +0) and for
// non-finite values.
struct RoundingCell {
  float below = 0.0f;
  float above = 0.0f;
};
RoundingCell CellAround(DType dtype, float v);

// The smallest positive value of `dtype` (its smallest subnormal).
float SmallestPositive(DType dtype);

}  // namespace weightcast::synth
