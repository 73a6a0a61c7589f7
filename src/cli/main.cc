#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "cli/command.h"

namespace weightcast::cli {
namespace {

struct Entry {
  std::string name;
  int order;
  SetupFn setup;
};

std::vector<Entry>& Registry() {
  static std::vector<Entry> registry;
  return registry;
}

int g_exit_code = 0;

}  // namespace

CommandRegistration::CommandRegistration(std::string_view name, int order, SetupFn setup) {
  Registry().push_back({std::string(name), order, setup});
}

void Finish(std::string_view command, const Status& status) {
  if (status.ok()) return;
  std::cerr << "weightcast " << command << ": error: " << status.message() << "\n";
  g_exit_code = status.code() == Code::kInvalidArgument ? 2 : 1;
}

int ExitCode() { return g_exit_code; }

}  // namespace weightcast::cli

int main(int argc, char** argv) {
  using namespace weightcast::cli;
  CLI::App app{
      "weightcast moves model weights from trainers to the fleets that serve or sample from "
      "them: chunked, verified against SHA-256, sent as lossless deltas between versions, and "
      "committed as a transaction.",
      "weightcast"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "weightcast 0.1.0");
  auto& registry = Registry();
  std::stable_sort(registry.begin(), registry.end(),
                   [](const Entry& a, const Entry& b) { return a.order < b.order; });
  for (const Entry& entry : registry) entry.setup(app);
  // A first word that names no command: say which word, and list the commands (CLI11 alone says
  // only that a subcommand is required). `help` is what a user types for --help.
  if (argc >= 2 && argv[1][0] != '-') {
    const std::string word = argv[1];
    if (word == "help") {
      std::cout << app.help();
      return 0;
    }
    const bool known = std::any_of(registry.begin(), registry.end(),
                                   [&](const Entry& e) { return e.name == word; });
    if (!known) {
      std::cerr << "weightcast: unknown command '" << word << "'; the commands are:";
      for (const Entry& entry : registry) std::cerr << " " << entry.name;
      std::cerr << " (weightcast --help)\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every parse error is a usage error: 2, as Finish gives
    // kInvalidArgument, whatever CLI11's own numbering.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return ExitCode();
}
