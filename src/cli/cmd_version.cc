#include <iostream>

#include "cli/command.h"

namespace weightcast::cli {
namespace {

void SetupVersion(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("version", "Print the weightcast version and build facts");
  cmd->callback([] { std::cout << "weightcast 0.1.0 (manifest format 1)\n"; });
}

const CommandRegistration kRegistered{"version", 1000, &SetupVersion};

}  // namespace
}  // namespace weightcast::cli
