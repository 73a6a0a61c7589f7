#include "synth/numeric.h"

#include <algorithm>
#include <limits>

namespace weightcast::synth {

uint16_t FloatToF16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return sign | (x > 0x7f800000u ? 0x7e00 : 0x7c00);
  // 65520 is halfway between 65504 (the largest half) and 65536; ties go to even, i.e. to inf.
  if (x >= 0x477ff000u) return sign | 0x7c00;
  if (x < 0x38800000u) {
    // Below 2^-14: a subnormal half, an integer multiple of 2^-24. Scaling by 2^24 is exact, and
    // nearbyint rounds half to even in the default rounding mode.
    float scaled = std::bit_cast<float>(x) * 0x1p24f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // Round the 23-bit mantissa to 10 bits; a carry correctly bumps the exponent.
  x += 0xfffu + ((x >> 13) & 1u);
  x -= (127u - 15u) << 23;
  return sign | static_cast<uint16_t>(x >> 13);
}

float F16ToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint8_t FloatToE4M3(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7f;
  float a = std::bit_cast<float>(x);
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0x1p-6f) {
    // Subnormal: multiples of 2^-9; 8 * 2^-9 is the smallest normal, whose encoding is 0x08.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 0x1p9f));
  }
  x += 0x7ffffu + ((x >> 20) & 1u);
  uint32_t exp = (x >> 23) - 127u + 7u;
  uint32_t code = (exp << 3) | ((x >> 20) & 7u);
  return sign | static_cast<uint8_t>(std::min<uint32_t>(code, 0x7e));
}

float E4M3ToFloat(uint8_t b) {
  bool negative = (b & 0x80) != 0;
  uint32_t exp = (b >> 3) & 0xfu;
  uint32_t mant = b & 7u;
  float v;
  if (exp == 0xf && mant == 7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    v = static_cast<float>(mant) * 0x1p-9f;
  } else {
    v = std::ldexp(1.0f + static_cast<float>(mant) * 0.125f, static_cast<int>(exp) - 7);
  }
  return negative ? -v : v;
}

bool IsSynthFloatType(DType dtype) {
  return dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32 ||
         dtype == DType::kF8_E4M3;
}

size_t SynthElementBytes(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kF8_E4M3:
      return 1;
    default:
      return 4;
  }
}

namespace {

// Decodes the element whose magnitude code is `mag` (sign bit clear).
float DecodeMagnitude(DType dtype, uint32_t mag) {
  switch (dtype) {
    case DType::kBF16:
      return Bf16ToFloat(static_cast<uint16_t>(mag));
    case DType::kF16:
      return F16ToFloat(static_cast<uint16_t>(mag));
    default:
      return E4M3ToFloat(static_cast<uint8_t>(mag));
  }
}

}  // namespace

float SmallestPositive(DType dtype) {
  if (dtype == DType::kF32) return std::numeric_limits<float>::denorm_min();
  return DecodeMagnitude(dtype, 1);
}

RoundingCell CellAround(DType dtype, float v) {
  if (dtype == DType::kF32 || !std::isfinite(v) || v == 0.0f) return {};
  float a = std::fabs(v);
  uint32_t mag;
  switch (dtype) {
    case DType::kBF16:
      mag = FloatToBf16(a);
      break;
    case DType::kF16:
      mag = FloatToF16(a);
      break;
    default:
      mag = FloatToE4M3(a);
      break;
  }
  float down = a - DecodeMagnitude(dtype, mag - 1);  // mag > 0 since v != 0
  float up_value = DecodeMagnitude(dtype, mag + 1);
  // The largest finite element has no neighbour above; treat its cell as symmetric.
  float up = std::isfinite(up_value) ? up_value - a : down;
  RoundingCell cell{down * 0.5f, up * 0.5f};
  if (v < 0) std::swap(cell.below, cell.above);
  return cell;
}

}  // namespace weightcast::synth
