// `weightcast demo`: the whole local pipeline in one command, printing what it does.
//
// A trainer writes a synthetic checkpoint and a few RL-like steps; each version's manifest is
// built, the first version is committed to a receiver's store, and every later step travels as a
// lossless delta that is applied onto the receiver's committed base, verified and committed.
// At the end the receiver's files are compared byte for byte with the trainer's.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/demo_steps.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

struct DemoFlags {
  std::string work_dir = "build/demo";
  std::string size = "256MiB";
  uint64_t steps = 3;
  double lr = 0;  // 0: the synth default
  uint64_t seed = 1;
  bool keep = false;
};

void SetupDemo(CLI::App& app) {
  auto flags = std::make_shared<DemoFlags>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Run the local demo: synthesize a checkpoint and RL steps, build manifests, commit the first "
      "version to a store, ship each step as a verified delta, and check the result byte for "
      "byte");
  cmd->add_option("--work-dir", flags->work_dir, "Directory for the demo's files (wiped first)")
      ->capture_default_str();
  cmd->add_option("--size", flags->size, "Model size, e.g. 256MiB, 1GiB")->capture_default_str();
  cmd->add_option("--steps", flags->steps, "RL-like steps after the first version")
      ->check(CLI::Range(0, 20))
      ->capture_default_str();
  cmd->add_option("--lr", flags->lr, "Learning rate of the synthetic steps (0: synth default)");
  cmd->add_option("--seed", flags->seed, "Seed of the synthetic model")->capture_default_str();
  cmd->add_flag("--keep", flags->keep, "Keep the work directory afterwards");
  cmd->callback([flags] {
    auto size = ParseSize(flags->size);
    if (!size.ok()) return Finish("demo", size.status());
    DemoConfig config;
    config.work_dir = flags->work_dir;
    config.model_bytes = *size;
    config.steps = flags->steps;
    config.lr = flags->lr;
    config.seed = flags->seed;
    config.keep = flags->keep;
    Finish("demo", RunDemo(config, std::cout));
  });
}

const CommandRegistration kRegistered{"demo", 5, &SetupDemo};

}  // namespace
}  // namespace weightcast::cli
