// weightcast serve   serve the committed versions of a channel to fetching agents (docs/p2p.md)
// The cluster secret comes from --secret-file or WEIGHTCAST_SECRET, never from the command line.
#include <algorithm>
#include <iostream>
#include <memory>
#include <random>
#include <string>

#include "agent/version_server.h"
#include "cli/command.h"
#include "cli/node_flags.h"
#include "manifest/builder.h"
#include "net/handshake.h"
#include "net/transport_select.h"
#include "store/store.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

struct ServeFlags {
  std::string root;
  std::string channel;
  std::string listen;
  std::string secret_file;
  std::string cluster = "default";
  uint64_t node_id = 0;
  size_t workers = 2;
  std::string upload_limit;
  std::string transport = "tcp";
};

Status RunServe(const ServeFlags& flags) {
  WC_RETURN_IF_ERROR(ValidateChannelName(flags.channel));
  WC_ASSIGN_OR_RETURN(net::TransportKind kind, ParseTransportFlag(flags.transport));
  net::Options options;
  WC_ASSIGN_OR_RETURN(options.secret, net::LoadClusterSecret(flags.secret_file));
  options.self.cluster_id = flags.cluster;
  options.self.node_id = PeerId(flags.node_id != 0 ? flags.node_id : std::random_device{}());
  options.self.role = net::Role::kPublisher;
  if (!flags.upload_limit.empty()) {
    WC_ASSIGN_OR_RETURN(uint64_t rate, ParseSize(flags.upload_limit));
    if (rate == 0) return InvalidArgument("--upload-limit must be above 0");
    options.upload_limit =
        std::make_shared<net::TokenBucket>(rate, std::max<uint64_t>(rate / 10, 1 << 20));
  }
  // Read-only: the trainer may keep importing versions into the store while we serve it.
  WC_ASSIGN_OR_RETURN(Store store, Store::Open(flags.root, {.read_only = true}));
  // A channel the store has never had is a mistyped name, not one to wait for.
  WC_ASSIGN_OR_RETURN(const std::vector<std::string> channels, store.Channels());
  if (std::find(channels.begin(), channels.end(), flags.channel) == channels.end()) {
    std::string known;
    for (const std::string& c : channels) known += (known.empty() ? "" : ", ") + c;
    return InvalidArgument("store " + flags.root + " has no channel " + flags.channel + " (" +
                           (known.empty() ? "it has none" : "it has: " + known) + ")");
  }
  agent::VersionServer server(store, {.channel = flags.channel,
                                      .manifest_secret = options.secret,
                                      .workers_per_connection = flags.workers});
  net::TransportSelection selection;
  selection.kind = kind;
  WC_ASSIGN_OR_RETURN(auto transport, net::CreateTransport(options, selection));
  WC_ASSIGN_OR_RETURN(auto listener, transport->Listen(flags.listen));
  std::cerr << "serving channel " << flags.channel << " of " << flags.root << " on "
            << listener->address() << std::endl;
  server.Serve(*listener);
  return Status::Ok();
}

void SetupServe(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd =
      app.add_subcommand("serve", "Serve the committed versions of a channel to fetching agents");
  cmd->add_option("--root", flags->root, "Store root directory")->required();
  cmd->add_option("--channel", flags->channel, "Channel to serve")->required();
  cmd->add_option("--listen", flags->listen, "ip:port to listen on (port 0: any free port)")
      ->required();
  cmd->add_option("--secret-file", flags->secret_file, kSecretFileHelp);
  cmd->add_option("--cluster", flags->cluster, "Cluster id both sides must share")
      ->capture_default_str();
  cmd->add_option("--node-id", flags->node_id, "This node's id (default: random)");
  cmd->add_option("--workers", flags->workers, "Threads answering each connection")
      ->capture_default_str();
  AddTransportFlag(cmd, flags->transport);
  cmd->add_option("--upload-limit", flags->upload_limit,
                  "Upload rate limit, bytes/s (e.g. 100MiB)");
  cmd->callback([flags] { Finish("serve", RunServe(*flags)); });
}

const CommandRegistration kRegistered{"serve", 70, &SetupServe};

}  // namespace
}  // namespace weightcast::cli
