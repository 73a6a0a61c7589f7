// weightcast keygen   make a cluster secret: 32 random bytes as 64 hex digits (docs/wire_format.md)
// With --out the secret goes to a new file of mode 0600 (never over an existing file without
// --force); without it, to stdout, for a secret store that takes it from a pipe.
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "net/handshake.h"

namespace weightcast::cli {
namespace {

struct KeygenFlags {
  std::string out;
  bool force = false;
};

Status RunKeygen(const KeygenFlags& flags) {
  WC_ASSIGN_OR_RETURN(std::string secret, net::GenerateClusterSecret());
  if (flags.out.empty()) {
    std::cout << secret << "\n";
    return Status::Ok();
  }
  WC_RETURN_IF_ERROR(net::WriteSecretFile(flags.out, secret, flags.force));
  std::cerr << "wrote a new cluster secret to " << flags.out
            << " (mode 0600); give it to every node as --secret-file\n";
  return Status::Ok();
}

void SetupKeygen(CLI::App& app) {
  auto flags = std::make_shared<KeygenFlags>();
  CLI::App* cmd = app.add_subcommand(
      "keygen", "Make a random cluster secret (32 bytes as hex) for --secret-file");
  cmd->add_option("--out", flags->out,
                  "Write it to this new file, mode 0600 (default: print it on stdout)");
  cmd->add_flag("--force", flags->force, "Replace --out if it exists");
  cmd->callback([flags] { Finish("keygen", RunKeygen(*flags)); });
}

const CommandRegistration kRegistered{"keygen", 16, &SetupKeygen};

}  // namespace
}  // namespace weightcast::cli
