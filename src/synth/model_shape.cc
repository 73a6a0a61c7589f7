#include "synth/model_shape.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "synth/numeric.h"

namespace weightcast::synth {
namespace {

constexpr uint64_t RoundUp(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

// The shape every dimension follows from, once hidden size and depth are chosen.
ModelShape ShapeFor(uint64_t hidden, uint64_t layers) {
  ModelShape s;
  s.hidden = hidden;
  s.layers = layers;
  // Small models use 64-wide heads, large ones 128-wide, as the Llama and Qwen families do.
  uint64_t head_dim = (hidden >= 1024 && hidden % 128 == 0) ? 128 : 64;
  s.heads = hidden / head_dim;
  // Grouped-query attention with 8 KV heads once there are 32 or more heads (Llama 3 style).
  s.kv_heads = (s.heads >= 32 && s.heads % 8 == 0) ? 8 : s.heads;
  s.intermediate = RoundUp(hidden * 8 / 3, 64);
  return s;
}

}  // namespace

uint64_t ModelShape::ParamsPerLayer() const {
  uint64_t kv_dim = kv_heads * head_dim();
  uint64_t attention = 2 * hidden * hidden + 2 * kv_dim * hidden;
  uint64_t mlp = 3 * hidden * intermediate;
  return attention + mlp + 2 * hidden;
}

uint64_t ModelShape::ParamCount() const {
  return 2 * vocab * hidden + layers * ParamsPerLayer() + hidden;
}

Result<ModelShape> PickModelShape(uint64_t target_bytes, DType dtype) {
  if (!IsSynthFloatType(dtype)) {
    return InvalidArgument("synthetic models are BF16, F16, F32 or F8_E4M3, not " +
                           std::string(DTypeName(dtype)));
  }
  uint64_t params = target_bytes / SynthElementBytes(dtype);
  bool found = false;
  ModelShape best;
  double best_score = 0;
  // Hidden sizes: multiples of 64 while heads are 64 wide, then of 128 so that 128-wide heads
  // divide hidden, of 256 from 2048 (an even head count), and of 1024 from 4096 on so that big
  // models have a multiple of 8 heads (grouped-query attention). 2^15 is beyond anything worth
  // synthesizing.
  auto next_hidden = [](uint64_t h) -> uint64_t {
    if (h < 1024) return h + 64;
    if (h < 2048) return h + 128;
    if (h < 4096) return h + 256;
    return h + 1024;
  };
  for (uint64_t hidden = 64; hidden <= (1u << 15); hidden = next_hidden(hidden)) {
    ModelShape s = ShapeFor(hidden, 1);
    // Llama-like proportions: depth about hidden / 128 (Llama 2 7B: 4096 and 32), vocabulary
    // about 32 * hidden up to 128k (Llama 3: 4096 and 128k), never below min_vocab.
    uint64_t ideal_layers = std::max<uint64_t>(2, hidden / 128);
    uint64_t ideal_vocab = std::min<uint64_t>(128000, 32 * hidden);
    uint64_t min_vocab = std::min<uint64_t>(32000, 16 * hidden);
    for (uint64_t layers = std::max<uint64_t>(1, ideal_layers / 2); layers <= 2 * ideal_layers;
         ++layers) {
      s.layers = layers;
      uint64_t body = s.layers * s.ParamsPerLayer() + s.hidden;
      if (body >= params) break;
      // The vocabulary absorbs the remainder, which puts the total within 64 * 2 * hidden
      // parameters of the target.
      s.vocab = ((params - body) / (2 * hidden) + 32) / 64 * 64;
      if (s.vocab < min_vocab) break;
      double score = std::fabs(std::log(static_cast<double>(s.layers) / ideal_layers)) +
                     std::fabs(std::log(static_cast<double>(s.vocab) / ideal_vocab));
      if (!found || score < best_score) {
        best = s;
        best_score = score;
        found = true;
      }
    }
  }
  if (!found) {
    ModelShape smallest = ShapeFor(64, 2);
    smallest.vocab = 1024;
    return InvalidArgument("a synthetic model needs at least " +
                           std::to_string(smallest.ParamCount() * SynthElementBytes(dtype)) +
                           " bytes of " + std::string(DTypeName(dtype)) + "; asked for " +
                           std::to_string(target_bytes));
  }
  return best;
}

Status ValidateModelShape(const ModelShape& s) {
  if (s.hidden == 0 || s.intermediate == 0 || s.layers == 0 || s.heads == 0 || s.kv_heads == 0 ||
      s.vocab == 0) {
    return InvalidArgument("model shape: every dimension must be positive");
  }
  if (s.hidden % s.heads != 0) return InvalidArgument("model shape: heads must divide hidden");
  if (s.heads % s.kv_heads != 0) return InvalidArgument("model shape: kv_heads must divide heads");
  if (s.hidden > (1u << 20) || s.intermediate > (1u << 22) || s.layers > 4096 ||
      s.vocab > (1u << 24)) {
    return InvalidArgument("model shape: a dimension is beyond any real model");
  }
  return Status::Ok();
}

std::vector<TensorSpec> ModelTensors(const ModelShape& s, DType dtype) {
  std::vector<TensorSpec> out;
  out.reserve(s.layers * 9 + 3);
  auto add = [&](std::string name, std::vector<uint64_t> shape) {
    out.push_back(TensorSpec{std::move(name), dtype, std::move(shape)});
  };
  uint64_t kv_dim = s.kv_heads * s.head_dim();
  add("model.embed_tokens.weight", {s.vocab, s.hidden});
  for (uint64_t i = 0; i < s.layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "self_attn.q_proj.weight", {s.hidden, s.hidden});
    add(p + "self_attn.k_proj.weight", {kv_dim, s.hidden});
    add(p + "self_attn.v_proj.weight", {kv_dim, s.hidden});
    add(p + "self_attn.o_proj.weight", {s.hidden, s.hidden});
    add(p + "mlp.gate_proj.weight", {s.intermediate, s.hidden});
    add(p + "mlp.up_proj.weight", {s.intermediate, s.hidden});
    add(p + "mlp.down_proj.weight", {s.hidden, s.intermediate});
    add(p + "input_layernorm.weight", {s.hidden});
    add(p + "post_attention_layernorm.weight", {s.hidden});
  }
  add("model.norm.weight", {s.hidden});
  add("lm_head.weight", {s.vocab, s.hidden});
  return out;
}

std::string ModelConfigJson(const ModelShape& s, DType dtype, uint64_t seed) {
  const char* torch_dtype = "bfloat16";
  if (dtype == DType::kF16) torch_dtype = "float16";
  if (dtype == DType::kF32) torch_dtype = "float32";
  if (dtype == DType::kF8_E4M3) torch_dtype = "float8_e4m3fn";
  nlohmann::ordered_json c;
  c["architectures"] = {"LlamaForCausalLM"};
  c["model_type"] = "llama";
  c["hidden_act"] = "silu";
  c["hidden_size"] = s.hidden;
  c["intermediate_size"] = s.intermediate;
  c["num_hidden_layers"] = s.layers;
  c["num_attention_heads"] = s.heads;
  c["num_key_value_heads"] = s.kv_heads;
  c["head_dim"] = s.head_dim();
  c["vocab_size"] = s.vocab;
  c["max_position_embeddings"] = 4096;
  c["rms_norm_eps"] = 1e-5;
  c["rope_theta"] = 500000.0;
  c["tie_word_embeddings"] = false;
  c["torch_dtype"] = torch_dtype;
  c["weightcast_synth"] = {{"seed", seed}, {"parameters", s.ParamCount()}};
  return c.dump(2) + "\n";
}

}  // namespace weightcast::synth
