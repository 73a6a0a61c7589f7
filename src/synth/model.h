// Synthetic checkpoints: the library behind `weightcast synth`, the demo and the benchmarks.
//
// WriteSynthModel writes a Llama-shaped Hugging Face checkpoint directory of about a requested
// size; WriteSynthSteps derives from any checkpoint a sequence of RL-like training steps. Both
// stream in bounded memory (a few fixed buffers per worker thread, independent of the model size)
// and are deterministic: the same options give byte-identical files. docs/synth.md describes the
// value and update models.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <weightcast/status.h>

#include "format/safetensors.h"
#include "synth/model_shape.h"

namespace weightcast::synth {

// Hugging Face's default max_shard_size.
inline constexpr uint64_t kDefaultShardBytes = 5'000'000'000ull;

struct SynthModelOptions {
  std::filesystem::path out_dir;    // created if missing; must be empty if it exists
  uint64_t target_bytes = 0;        // about this many bytes of tensor data
  std::optional<ModelShape> shape;  // an explicit shape instead of one picked from target_bytes
  DType dtype = DType::kBF16;       // BF16, F16, F32 or F8_E4M3
  uint64_t seed = 0;
  // Tensors are packed into shards of at most this many data bytes (a tensor larger than this
  // gets a shard of its own). One shard is written as model.safetensors without an index.
  uint64_t shard_bytes = kDefaultShardBytes;
  size_t threads = 0;  // 0: one per core
};

struct SynthModelSummary {
  ModelShape shape;
  uint64_t tensor_bytes = 0;  // sum of tensor data sizes (the index's total_size)
  uint64_t file_bytes = 0;    // everything written, headers, config and index included
  uint64_t tensors = 0;
  std::vector<std::string> files;  // relative to out_dir, in the order written
};

// Writes config.json, the safetensors shard(s) and, when sharded, model.safetensors.index.json.
// Each file appears under its final name only once complete. Blocks; uses a private thread pool.
Result<SynthModelSummary> WriteSynthModel(const SynthModelOptions& options);

// Adam hyper-parameters of the step model. The optimizer starts in its steady state (as in the
// middle of a long RL run), so every step changes about the same fraction of elements.
struct AdamOptions {
  double lr = 1e-6;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // Gradient of an element at step t: signal * s + noise_t, s and noise_t standard normal-ish.
  double signal = 0.5;
};

// Each step being written holds an open file and up to 1 MiB of write buffer.
inline constexpr uint64_t kMaxStepsPerCall = 256;

struct SynthStepsOptions {
  std::filesystem::path from;     // the step-0 checkpoint: a directory or a .safetensors file
  std::filesystem::path out_dir;  // steps go to out_dir/step-0001, step-0002, ...
  uint64_t first_step = 1;        // the first step to write; earlier ones are computed, not kept
  uint64_t steps = 1;             // how many steps to write, at most kMaxStepsPerCall
  AdamOptions adam;
  uint64_t seed = 0;
  size_t threads = 0;  // 0: one per core
};

struct StepStats {
  uint64_t step = 0;
  std::filesystem::path dir;
  uint64_t elements = 0;  // elements of the tensors the step model updates
  uint64_t changed = 0;   // of those, how many differ bitwise from the previous step
  double changed_fraction() const {
    return elements == 0 ? 0.0 : static_cast<double>(changed) / static_cast<double>(elements);
  }
  // Over the updated tensors with at least one element.
  double min_tensor_fraction = 0.0;
  std::string min_tensor;
  double max_tensor_fraction = 0.0;
  std::string max_tensor;
  // The same minimum over matrices (rank >= 2) only: norm vectors sit near 1.0, where a BF16 ulp
  // is ~50x wider than at typical weights, and rarely change at all (as in real runs).
  double min_matrix_fraction = 0.0;
  std::string min_matrix;
};

// Writes steps first_step .. first_step + steps - 1 of the RL-like sequence starting at
// `options.from`. Each step directory has the same files, tensor names, dtypes and layout as the
// source (non-safetensors files are copied as they are) and is made visible by one rename once
// complete; an existing step directory is an error (kAlreadyExists). Tensors of types other than
// BF16, F16, F32 and F8_E4M3 are copied unchanged and left out of the statistics.
// The steps are computed together in one pass over the source, so writing K steps costs about K
// times one step; writing only step k costs the same as writing steps 1..k. Blocks.
Result<std::vector<StepStats>> WriteSynthSteps(const SynthStepsOptions& options);

// Formats the per-step figures as the single JSON line `weightcast synth steps` ends with.
std::string StepStatsJson(const std::vector<StepStats>& stats, const AdamOptions& adam,
                          uint64_t seed);

}  // namespace weightcast::synth
