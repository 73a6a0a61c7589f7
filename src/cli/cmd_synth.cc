// `weightcast synth model|steps`: synthetic checkpoints for tests, demos and benchmarks. A thin
// layer over synth/model.h; every figure it prints comes from the library's summary.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "synth/model.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

Result<DType> ParseSynthDType(const std::string& name) {
  if (name == "bf16" || name == "BF16") return DType::kBF16;
  if (name == "fp16" || name == "f16" || name == "F16") return DType::kF16;
  if (name == "fp32" || name == "f32" || name == "F32") return DType::kF32;
  if (name == "fp8" || name == "f8_e4m3" || name == "F8_E4M3") return DType::kF8_E4M3;
  return InvalidArgument("--dtype " + name + ": expected bf16, fp16, fp32 or fp8");
}

struct ModelFlags {
  std::string out;
  std::string size = "1GiB";
  std::string dtype = "bf16";
  uint64_t seed = 0;
  std::string shard_size = "5GB";
  size_t threads = 0;
};

Status RunModel(const ModelFlags& flags) {
  synth::SynthModelOptions options;
  options.out_dir = flags.out;
  WC_ASSIGN_OR_RETURN(options.target_bytes, ParseSize(flags.size));
  WC_ASSIGN_OR_RETURN(options.dtype, ParseSynthDType(flags.dtype));
  WC_ASSIGN_OR_RETURN(options.shard_bytes, ParseSize(flags.shard_size));
  options.seed = flags.seed;
  options.threads = flags.threads;
  WC_ASSIGN_OR_RETURN(synth::SynthModelSummary summary, synth::WriteSynthModel(options));
  const synth::ModelShape& s = summary.shape;
  std::cout << "wrote " << flags.out << ": " << summary.tensors << " tensors, " << s.ParamCount()
            << " parameters (hidden " << s.hidden << ", layers " << s.layers << ", heads "
            << s.heads << "/" << s.kv_heads << ", intermediate " << s.intermediate << ", vocab "
            << s.vocab << "), " << FormatBytes(summary.tensor_bytes) << " of tensors in "
            << summary.files.size() << " files\n";
  nlohmann::ordered_json j;
  j["dir"] = flags.out;
  j["dtype"] = flags.dtype;
  j["seed"] = flags.seed;
  j["target_bytes"] = options.target_bytes;
  j["tensor_bytes"] = summary.tensor_bytes;
  j["file_bytes"] = summary.file_bytes;
  j["parameters"] = s.ParamCount();
  j["tensors"] = summary.tensors;
  j["files"] = summary.files;
  j["hidden"] = s.hidden;
  j["layers"] = s.layers;
  j["vocab"] = s.vocab;
  std::cout << j.dump() << "\n";
  return Status::Ok();
}

struct StepsFlags {
  std::string from;
  std::string out;
  uint64_t steps = 1;
  uint64_t first = 1;
  double lr = synth::AdamOptions{}.lr;
  double signal = synth::AdamOptions{}.signal;
  uint64_t seed = 0;
  size_t threads = 0;
};

std::string Percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f%%", fraction * 100);
  return buf;
}

Status RunSteps(const StepsFlags& flags) {
  synth::SynthStepsOptions options;
  options.from = flags.from;
  options.out_dir = flags.out;
  options.first_step = flags.first;
  options.steps = flags.steps;
  options.adam.lr = flags.lr;
  options.adam.signal = flags.signal;
  options.seed = flags.seed;
  options.threads = flags.threads;
  WC_ASSIGN_OR_RETURN(std::vector<synth::StepStats> stats, synth::WriteSynthSteps(options));
  for (const synth::StepStats& s : stats) {
    std::cout << s.dir.string() << ": " << Percent(s.changed_fraction()) << " of " << s.elements
              << " elements changed (per tensor min " << Percent(s.min_tensor_fraction) << " "
              << s.min_tensor << ", max " << Percent(s.max_tensor_fraction) << " " << s.max_tensor
              << "; matrices min " << Percent(s.min_matrix_fraction) << " " << s.min_matrix
              << ")\n";
  }
  std::cout << synth::StepStatsJson(stats, options.adam, options.seed) << "\n";
  return Status::Ok();
}

void SetupSynth(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write synthetic checkpoints: a Llama-shaped model, or RL-like training steps");
  cmd->require_subcommand(1);

  auto model = std::make_shared<ModelFlags>();
  CLI::App* m = cmd->add_subcommand(
      "model", "Write a deterministic Llama-shaped safetensors checkpoint of about --size bytes");
  m->add_option("-o,--out", model->out, "Output directory (created; must be empty)")->required();
  m->add_option("--size", model->size, "Tensor bytes to aim for, e.g. 10MB, 1GiB, 100GB")
      ->capture_default_str();
  m->add_option("--dtype", model->dtype, "bf16, fp16, fp32 or fp8 (E4M3)")->capture_default_str();
  m->add_option("--seed", model->seed, "Seed; the same seed gives the same bytes")
      ->capture_default_str();
  m->add_option("--shard-size", model->shard_size,
                "Largest shard, as Hugging Face's max_shard_size")
      ->capture_default_str();
  m->add_option("--threads", model->threads, "Worker threads (0: one per core)")
      ->capture_default_str();
  m->callback([model] { Finish("synth model", RunModel(*model)); });

  auto steps = std::make_shared<StepsFlags>();
  CLI::App* s = cmd->add_subcommand(
      "steps", "Write RL-like training steps of a checkpoint: OUT/step-0001, step-0002, ...");
  s->add_option("--from", steps->from, "The step-0 checkpoint directory")->required();
  s->add_option("-o,--out", steps->out, "Directory to write the steps into")->required();
  s->add_option("--steps", steps->steps, "How many steps to write")->capture_default_str();
  s->add_option("--first", steps->first, "Number of the first step to write")
      ->capture_default_str();
  s->add_option("--lr", steps->lr,
                "Adam learning rate; sets the changed fraction (docs/synth.md has the table)")
      ->capture_default_str();
  s->add_option("--signal", steps->signal,
                "Persistent share of each gradient relative to its per-step noise")
      ->capture_default_str();
  s->add_option("--seed", steps->seed, "Seed of the residuals and gradients")
      ->capture_default_str();
  s->add_option("--threads", steps->threads, "Worker threads (0: one per core)")
      ->capture_default_str();
  s->callback([steps] { Finish("synth steps", RunSteps(*steps)); });
}

const CommandRegistration kRegistered{"synth", 10, &SetupSynth};

}  // namespace
}  // namespace weightcast::cli
