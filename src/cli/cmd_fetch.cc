// weightcast fetch   fetch one version of a channel from `weightcast serve` into a store: whole,
// or as deltas onto a committed base both sides hold; resumes a killed fetch (docs/p2p.md).
// Prints a progress bar on a terminal (plain lines otherwise), a summary, and JSON last.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>

#include "agent/version_fetcher.h"
#include "cli/command.h"
#include "cli/node_flags.h"
#include "manifest/builder.h"
#include "net/handshake.h"
#include "net/transport_select.h"
#include "store/store.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

struct FetchFlags {
  std::string from;
  std::string root;
  std::string channel;
  std::string secret_file;
  std::string cluster = "default";
  uint64_t node_id = 0;
  std::optional<uint64_t> version;
  size_t window = 8;
  size_t workers = 2;
  bool no_delta = false;
  std::string timeout = "60s";
  std::string download_limit;
  std::string transport = "tcp";
};

// Draws progress on stderr: a bar redrawn in place on a terminal, otherwise a line per 10%.
class ProgressPrinter {
 public:
  ProgressPrinter()
      : tty_(::isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()) {}

  void Update(const agent::FetchProgress& p) {
    std::lock_guard lock(mu_);
    if (p.total_bytes == 0) return;
    const double fraction = static_cast<double>(p.done_bytes) / p.total_bytes;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    char line[200];
    if (tty_) {
      const int width = 30, filled = static_cast<int>(fraction * width);
      std::string bar(filled, '#');
      bar.resize(width, '.');
      std::snprintf(line, sizeof line, "\r[%s] %5.1f%%  %s of %s, %s on the wire, %.1fs ",
                    bar.c_str(), 100 * fraction, FormatBytes(p.done_bytes).c_str(),
                    FormatBytes(p.total_bytes).c_str(), FormatBytes(p.wire_bytes).c_str(), seconds);
      std::cerr << line << std::flush;
      drew_ = true;
    } else {
      const int tenth = static_cast<int>(fraction * 10);
      if (tenth <= last_tenth_) return;
      last_tenth_ = tenth;
      std::snprintf(line, sizeof line, "fetch: %3d%%  %s of %s, %s on the wire, %.1fs\n",
                    tenth * 10, FormatBytes(p.done_bytes).c_str(),
                    FormatBytes(p.total_bytes).c_str(), FormatBytes(p.wire_bytes).c_str(), seconds);
      std::cerr << line << std::flush;
    }
  }
  void End() {
    std::lock_guard lock(mu_);
    if (drew_) std::cerr << "\n";
  }

 private:
  std::mutex mu_;
  bool tty_;
  bool drew_ = false;
  int last_tenth_ = -1;
  std::chrono::steady_clock::time_point start_;
};

Status RunFetch(const FetchFlags& flags) {
  WC_RETURN_IF_ERROR(ValidateChannelName(flags.channel));
  if (flags.version && *flags.version == 0) return InvalidArgument("--version must be above 0");
  WC_RETURN_IF_ERROR(ValidateAddressFlag("--from", flags.from));
  WC_ASSIGN_OR_RETURN(net::TransportKind kind, ParseTransportFlag(flags.transport));
  net::Options options;
  WC_ASSIGN_OR_RETURN(options.secret, net::LoadClusterSecret(flags.secret_file));
  options.self.cluster_id = flags.cluster;
  options.self.node_id = PeerId(flags.node_id != 0 ? flags.node_id : std::random_device{}());
  options.self.role = net::Role::kAgent;
  if (!flags.download_limit.empty()) {
    WC_ASSIGN_OR_RETURN(uint64_t rate, ParseSize(flags.download_limit));
    if (rate == 0) return InvalidArgument("--download-limit must be above 0");
    options.download_limit =
        std::make_shared<net::TokenBucket>(rate, std::max<uint64_t>(rate / 10, 1 << 20));
  }
  const std::string secret = options.secret;
  WC_ASSIGN_OR_RETURN(Store store, Store::Open(flags.root));
  net::TransportSelection selection;
  selection.kind = kind;
  WC_ASSIGN_OR_RETURN(auto transport, net::CreateTransport(options, selection));
  WC_ASSIGN_OR_RETURN(const std::chrono::nanoseconds parsed, ParseDuration(flags.timeout));
  if (parsed.count() == 0) return InvalidArgument("--timeout must be above 0");
  const auto timeout = std::chrono::duration_cast<net::Duration>(parsed);
  WC_ASSIGN_OR_RETURN(auto connection, transport->Connect(flags.from, timeout));

  ProgressPrinter printer;
  agent::FetchOptions fetch{.channel = flags.channel, .manifest_secret = secret};
  if (flags.version) fetch.version = Version(*flags.version);
  fetch.window = std::max<size_t>(flags.window, 1);
  fetch.workers = std::max<size_t>(flags.workers, 1);
  fetch.use_delta = !flags.no_delta;
  fetch.receive_timeout = timeout;
  fetch.progress = [&printer](const agent::FetchProgress& p) { printer.Update(p); };
  auto stats = agent::FetchVersion(*connection, store, fetch);
  // A UCX connection that failed mid-transfer: once more over TCP (the transport now reaches
  // this address over TCP), resuming from the chunks already verified into the staging.
  if (!stats.ok() && kind == net::TransportKind::kAuto && connection->peer().transport == "ucx" &&
      !connection->status().ok()) {
    std::cerr << "fetch over UCX failed (" << stats.status().ToString() << "); resuming over TCP"
              << std::endl;
    connection.reset();
    WC_ASSIGN_OR_RETURN(connection, transport->Connect(flags.from, timeout));
    stats = agent::FetchVersion(*connection, store, fetch);
  }
  printer.End();
  if (!stats.ok()) return stats.status();

  if (stats->already_held) {
    std::cout << "v" << stats->version.value() << " of " << flags.channel
              << " is already held; nothing fetched\n";
  } else {
    const double ratio =
        stats->wire_bytes ? static_cast<double>(stats->model_bytes) / stats->wire_bytes : 0;
    char line[300];
    std::snprintf(
        line, sizeof line,
        "fetched v%llu: %s model, %s on the wire (%.1fx), %.2f s, %s/s; chunks: %u whole, %u "
        "delta%s, %u same, %u resumed, %u refetched\n",
        static_cast<unsigned long long>(stats->version.value()),
        FormatBytes(stats->model_bytes).c_str(), FormatBytes(stats->wire_bytes).c_str(), ratio,
        stats->seconds,
        FormatBytes(stats->seconds > 0 ? static_cast<uint64_t>(stats->model_bytes / stats->seconds)
                                       : 0)
            .c_str(),
        stats->chunks_raw, stats->chunks_delta,
        stats->base ? (" onto v" + std::to_string(stats->base->value())).c_str() : "",
        stats->chunks_same, stats->chunks_resumed, stats->chunks_refetched);
    std::cout << line;
  }
  std::cout << stats->ToJson() << std::endl;
  return Status::Ok();
}

void SetupFetch(CLI::App& app) {
  auto flags = std::make_shared<FetchFlags>();
  CLI::App* cmd =
      app.add_subcommand("fetch", "Fetch a version from `weightcast serve` into a store");
  cmd->add_option("--from", flags->from, "ip:port of the server")->required();
  cmd->add_option("--root", flags->root, "Store root directory")->required();
  cmd->add_option("--channel", flags->channel, "Channel to fetch")->required();
  cmd->add_option("--secret-file", flags->secret_file, kSecretFileHelp);
  cmd->add_option("--version", flags->version, "Version to fetch (default: the server's current)");
  cmd->add_option("--cluster", flags->cluster, "Cluster id both sides must share")
      ->capture_default_str();
  cmd->add_option("--node-id", flags->node_id, "This node's id (default: random)");
  cmd->add_option("--window", flags->window, "Chunk requests in flight")->capture_default_str();
  cmd->add_option("--workers", flags->workers, "Threads verifying and decoding chunks")
      ->capture_default_str();
  cmd->add_flag("--no-delta", flags->no_delta, "Fetch every chunk whole");
  cmd->add_option("--timeout", flags->timeout,
                  "Fail after this long without a reply (e.g. 60s, 2m; a bare number is seconds)")
      ->capture_default_str();
  cmd->add_option("--download-limit", flags->download_limit, "Download rate limit, bytes/s");
  AddTransportFlag(cmd, flags->transport);
  cmd->callback([flags] { Finish("fetch", RunFetch(*flags)); });
}

const CommandRegistration kRegistered{"fetch", 71, &SetupFetch};

}  // namespace
}  // namespace weightcast::cli
