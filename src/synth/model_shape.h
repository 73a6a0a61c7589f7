// The architecture of a synthetic checkpoint: a Llama-style decoder sized to a byte budget.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <weightcast/status.h>

#include "format/safetensors.h"

namespace weightcast::synth {

struct ModelShape {
  uint64_t hidden = 0;        // hidden_size
  uint64_t intermediate = 0;  // intermediate_size of the gated MLP
  uint64_t layers = 0;        // num_hidden_layers
  uint64_t heads = 0;         // num_attention_heads
  uint64_t kv_heads = 0;      // num_key_value_heads (grouped-query attention when < heads)
  uint64_t vocab = 0;         // vocab_size; embeddings and lm_head are not tied

  uint64_t head_dim() const { return hidden / heads; }
  uint64_t ParamsPerLayer() const;
  uint64_t ParamCount() const;
};

// Picks a shape whose parameters, stored as `dtype`, come to about `target_bytes`, with Llama-like
// proportions: over hidden sizes (multiples of 64, then 128), the one whose depth is closest to
// hidden / 128 layers and whose vocabulary is closest to 32 * hidden (at most 128k, at least
// min(32000, 16 * hidden)); the vocabulary (a multiple of 64) absorbs the remainder, so the total
// lands within a fraction of a percent of the target. kInvalidArgument below about 500 KB.
Result<ModelShape> PickModelShape(uint64_t target_bytes, DType dtype);

// Checks a shape given explicitly (every field positive, heads divide hidden, kv_heads divide
// heads).
Status ValidateModelShape(const ModelShape& shape);

// The tensors of the model in the order Hugging Face lists them: embeddings, then per layer the
// attention projections, the MLP projections and the two norms, then the final norm and lm_head.
std::vector<TensorSpec> ModelTensors(const ModelShape& shape, DType dtype);

// A config.json in the shape of a Hugging Face LlamaForCausalLM config.
std::string ModelConfigJson(const ModelShape& shape, DType dtype, uint64_t seed);

}  // namespace weightcast::synth
