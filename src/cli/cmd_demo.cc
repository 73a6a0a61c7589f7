// `weightcast demo`: the whole system on one machine, as real processes of this binary.
//
// A trainer writes a synthetic checkpoint and a few RL-like steps; a coordinator, a publisher and
// four agents run on loopback; the checkpoint goes out as version 1 and every step as a delta
// version, with live progress. At the end a table per version (bytes on the wire, compression
// ratio, times next to a plain copy of the same bytes) and a byte-for-byte comparison of every
// agent's files with the publisher's.
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <iostream>
#include <string>

#include "cli/command.h"
#include "cli/demo_steps.h"
#include "cli/signal_stop.h"
#include "manifest/builder.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

struct DemoFlags {
  std::string work_dir = "build/demo";
  std::string size = "1GiB";
  std::string chunk_size = "auto";
  uint64_t steps = 3;
  uint32_t agents = 4;
  double lr = 0;  // 0: the synth default
  uint64_t seed = 1;
  bool keep = false;
};

Status RunDemoCommand(const DemoFlags& flags) {
  WC_ASSIGN_OR_RETURN(uint64_t size, ParseSize(flags.size));
  WC_RETURN_IF_ERROR(ParseChunkSize(flags.chunk_size).status());  // checked before anything starts
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return IoError("cannot find this binary (/proc/self/exe): " + ec.message());

  DemoConfig config;
  config.work_dir = std::filesystem::absolute(flags.work_dir);
  config.exe = exe;
  config.model_bytes = size;
  config.chunk_size = flags.chunk_size;
  config.steps = flags.steps;
  config.agents = flags.agents;
  config.lr = flags.lr;
  config.seed = flags.seed;
  config.keep = flags.keep;
  config.live_view = ::isatty(STDOUT_FILENO) == 1;
  winsize size_of_terminal{};
  if (config.live_view && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size_of_terminal) == 0 &&
      size_of_terminal.ws_col >= 60) {
    config.width = size_of_terminal.ws_col;
  }

  // Ctrl-C stops the demo and everything it started (its processes get SIGTERM on the way out).
  std::atomic<bool> stop{false};
  SignalStopper signals;
  signals.OnSignal([&stop] { stop = true; });
  Status result = RunDemo(config, std::cout, &stop);
  signals.OnSignal({});
  return result;
}

void SetupDemo(CLI::App& app) {
  auto flags = std::make_shared<DemoFlags>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Run the local demo: a coordinator, a publisher and agents on loopback (processes of this "
      "binary); a synthetic model and RL-like steps published as a full version and deltas, with "
      "live progress, a table per version and a byte-for-byte check of every agent's files");
  cmd->add_option("--work-dir", flags->work_dir, "Directory for the demo's files (wiped first)")
      ->capture_default_str();
  cmd->add_option("--size", flags->size, "Model size, e.g. 256MiB, 1GiB")->capture_default_str();
  cmd->add_option("--chunk-size", flags->chunk_size,
                  "Chunk size of the versions: "
                  "auto (the default): about 8,192 chunks, 128KiB .. 64MiB, by the size "
                  "(docs/publish.md); or a size, 64KiB .. 256MiB")
      ->capture_default_str();
  cmd->add_option("--steps", flags->steps, "RL-like steps after the first version")
      ->check(CLI::Range(0, 20))
      ->capture_default_str();
  cmd->add_option("--agents", flags->agents, "Agents on loopback")
      ->check(CLI::Range(1, 32))
      ->capture_default_str();
  cmd->add_option("--lr", flags->lr, "Learning rate of the synthetic steps (0: synth default)");
  cmd->add_option("--seed", flags->seed, "Seed of the synthetic model")->capture_default_str();
  cmd->add_flag("--keep", flags->keep, "Keep the work directory afterwards");
  cmd->callback([flags] { Finish("demo", RunDemoCommand(*flags)); });
}

const CommandRegistration kRegistered{"demo", 5, &SetupDemo};

}  // namespace
}  // namespace weightcast::cli
