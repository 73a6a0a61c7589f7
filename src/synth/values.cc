#include "synth/values.h"

#include "synth/numeric.h"
#include "synth/prng.h"

namespace weightcast::synth {

TensorInit InitFor(uint64_t seed, std::string_view tensor_name) {
  TensorInit init;
  init.name_hash = HashName(tensor_name);
  constexpr std::string_view kNormSuffix = "norm.weight";
  bool is_norm = tensor_name.size() >= kNormSuffix.size() &&
                 tensor_name.substr(tensor_name.size() - kNormSuffix.size()) == kNormSuffix;
  if (is_norm) {
    init.mean = 1.0f;
    init.std = 0.05f;
    return init;
  }
  float jitter = Uniform01(RandomAt(StreamKey(seed, init.name_hash, Stream::kTensorScale), 0));
  init.mean = 0.0f;
  init.std = 0.02f * (0.75f + 0.5f * jitter);
  return init;
}

namespace {

template <DType kType>
void GenerateTyped(uint64_t key, const TensorInit& init, uint64_t first, size_t count,
                   uint8_t* out) {
  constexpr size_t kBytes = kType == DType::kF8_E4M3 ? 1 : kType == DType::kF32 ? 4 : 2;
  for (size_t i = 0; i < count; ++i) {
    float v = init.mean + init.std * NormalIsh(RandomAt(key, first + i));
    EncodeElement(kType, v, out + i * kBytes);
  }
}

}  // namespace

void GenerateValues(uint64_t seed, const TensorInit& init, DType dtype, uint64_t first,
                    std::span<uint8_t> out) {
  uint64_t key = StreamKey(seed, init.name_hash, Stream::kBaseValue);
  size_t count = out.size() / SynthElementBytes(dtype);
  switch (dtype) {
    case DType::kBF16:
      return GenerateTyped<DType::kBF16>(key, init, first, count, out.data());
    case DType::kF16:
      return GenerateTyped<DType::kF16>(key, init, first, count, out.data());
    case DType::kF8_E4M3:
      return GenerateTyped<DType::kF8_E4M3>(key, init, first, count, out.data());
    default:
      return GenerateTyped<DType::kF32>(key, init, first, count, out.data());
  }
}

}  // namespace weightcast::synth
