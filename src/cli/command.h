// How a subcommand plugs into the `weightcast` executable: a file src/cli/cmd_<name>.cc defines
// a setup function that adds its CLI11 subcommand, and registers it with one static line:
//   static const CommandRegistration kRegistered{"inspect", 20, &SetupInspect};
// The callback of the subcommand does the work and reports its outcome with Finish().
#pragma once

#include <weightcast/status.h>
#include <CLI/CLI.hpp>

#include <string_view>

namespace weightcast::cli {

using SetupFn = void (*)(CLI::App& app);

struct CommandRegistration {
  // `order` sorts the subcommands in --help (lower first).
  CommandRegistration(std::string_view name, int order, SetupFn setup);
};

// Sets the process exit status from `status`: 0 when OK; otherwise prints
// "weightcast <command>: error: <message>" to stderr and exits non-zero
// (2 for bad arguments, 1 for everything else).
void Finish(std::string_view command, const Status& status);

int ExitCode();

}  // namespace weightcast::cli
