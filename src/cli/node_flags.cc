#include "cli/node_flags.h"

#include <random>

#include "net/handshake.h"

namespace weightcast::cli {

void AddNodeFlags(CLI::App* cmd, NodeFlags& flags) {
  cmd->add_option("--secret-file", flags.secret_file, kSecretFileHelp);
  cmd->add_option("--cluster", flags.cluster, "Cluster id every node must share")
      ->capture_default_str();
  cmd->add_option("--node-id", flags.node_id, "This node's id (default: random)");
  cmd->add_option("--log-format", flags.log_format, "Log lines on stderr: text or json")
      ->capture_default_str();
}

Result<net::Options> ToolTransportOptions(const NodeFlags& flags) {
  net::Options options;
  ASSIGN_OR_RETURN(options.secret, net::LoadClusterSecret(flags.secret_file));
  options.self.cluster_id = flags.cluster;
  options.self.node_id = PeerId(flags.node_id != 0 ? flags.node_id : std::random_device{}());
  options.self.role = net::Role::kTool;
  return options;
}

}  // namespace weightcast::cli
