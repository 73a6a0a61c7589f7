// weightcast publish   the trainer side: publish checkpoint directories as versions and seed them
// (docs/publish.md). `--dir PATH` publishes one directory and seeds it until --until holds;
// `--watch DIR` publishes every checkpoint directory a trainer saves under DIR until stopped;
// `--from URL` publishes a model at an HTTP(S) origin without copying it (docs/origin.md).
// The cluster secret comes from --secret-file or WEIGHTCAST_SECRET, never from the command line.
#include <atomic>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>

#include "cli/command.h"
#include "cli/node_flags.h"
#include "cli/signal_stop.h"
#include "manifest/builder.h"
#include "metrics/http_server.h"
#include "metrics/log.h"
#include "metrics/registry.h"
#include "net/handshake.h"
#include "origin/http_client.h"
#include "origin/model.h"
#include "publish/publisher.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

struct PublishFlags {
  std::string coordinator;
  std::string store;
  std::string channel;
  std::string dir;
  std::string watch;
  std::string from;
  OriginFlags origin;
  std::string listen = "127.0.0.1:0";
  std::string transport = "tcp";
  std::string metrics;
  std::string until;  // default depends on --dir / --watch
  std::string settle = "2s";
  std::string upload_limit;
  std::string chunk_size = "auto";
  std::string import = "auto";
  std::string writer_id;
  bool take_over = false;
  bool allow_no_tensors = false;
  bool device_checks = false;
  uint32_t rank = 0;
  uint32_t world = 1;
  NodeFlags node;
};

// How long `publish --dir` waits for an unreachable coordinator, at start and afterwards (the
// --help text and docs/publish.md give the same number).
constexpr auto kUnreachableTimeout = std::chrono::seconds(30);

Result<publish::ImportPolicy> ParseImport(std::string_view text) {
  if (text == "auto") return publish::ImportPolicy::kAuto;
  if (text == "copy") return publish::ImportPolicy::kCopy;
  if (text == "hardlink") return publish::ImportPolicy::kHardlink;
  return InvalidArgument("--import must be auto, copy or hardlink, not '" + std::string(text) +
                         "'");
}

Status RunPublish(const PublishFlags& flags) {
  if ((!flags.dir.empty()) + (!flags.watch.empty()) + (!flags.from.empty()) != 1) {
    return InvalidArgument("give exactly one of --dir PATH, --watch DIR and --from URL");
  }
  if (flags.from.empty() && (!flags.origin.ca_file.empty() || !flags.origin.token_file.empty())) {
    return InvalidArgument("--origin-ca and --origin-token-file go with --from");
  }
  std::shared_ptr<origin::HttpClient> origin_client;
  if (!flags.from.empty()) {
    if (flags.world > 1) return InvalidArgument("--from cannot be sharded (--world)");
    // A spec that cannot name a model fails before anything starts.
    WC_RETURN_IF_ERROR(origin::ResolveOriginSpec(flags.from).status());
    WC_ASSIGN_OR_RETURN(origin_client, OriginClient(flags.origin));
  }
  const bool one_shot = flags.watch.empty();
  WC_RETURN_IF_ERROR(ValidateChannelName(flags.channel));
  WC_ASSIGN_OR_RETURN(metrics::LogFormat format, metrics::ParseLogFormat(flags.node.log_format));
  // Flag errors before the store is opened or the coordinator is dialled.
  WC_RETURN_IF_ERROR(ValidateCoordinatorFlag("--coordinator", flags.coordinator));
  WC_RETURN_IF_ERROR(ValidateAddressFlag("--listen", flags.listen, /*allow_port_zero=*/true));
  if (!flags.metrics.empty()) {
    WC_RETURN_IF_ERROR(ValidateAddressFlag("--metrics", flags.metrics, /*allow_port_zero=*/true));
  }
  if (flags.world == 0 || flags.rank >= flags.world) {
    return InvalidArgument("--rank " + std::to_string(flags.rank) + " --world " +
                           std::to_string(flags.world) + ": need 0 <= rank < world");
  }
  if (flags.world > 1 && flags.writer_id.empty()) {
    return InvalidArgument("--world " + std::to_string(flags.world) +
                           " needs --writer-id: the ranks of a sharded publish share one writer "
                           "identity (each has its own --store)");
  }
  if (!flags.dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(flags.dir, ec)) {
      // A version is a directory of files (docs/publish.md): a lone file is refused rather than
      // published under a directory of our choosing.
      return InvalidArgument(
          "--dir " + flags.dir + ": " +
          (std::filesystem::is_regular_file(flags.dir, ec)
               ? "a file, not a directory; put it in a directory of its own and pass that"
           : std::filesystem::exists(flags.dir, ec) ? "not a directory"
                                                    : "no such directory"));
    }
  }
  WC_ASSIGN_OR_RETURN(publish::SeedUntil until,
                      publish::ParseSeedUntil(!flags.until.empty() ? flags.until
                                              : one_shot           ? "replicated"
                                                                   : "never"));
  WC_ASSIGN_OR_RETURN(auto settle, ParseDuration(flags.settle));
  WC_ASSIGN_OR_RETURN(const uint64_t chunk_size, ParseChunkSize(flags.chunk_size));

  publish::PublisherOptions options;
  options.coordinator = flags.coordinator;
  options.store = flags.store;
  options.channel = flags.channel;
  options.listen = flags.listen;
  WC_ASSIGN_OR_RETURN(options.transport, ParseTransportFlag(flags.transport));
  options.cluster = flags.node.cluster;
  WC_ASSIGN_OR_RETURN(options.node_id, NodeIdOf(flags.node));
  options.writer_id = flags.writer_id;
  options.take_over = flags.take_over;
  options.allow_no_tensors = flags.allow_no_tensors;
  options.rank = flags.rank;
  options.world = flags.world;
  options.build.chunk_size = chunk_size;
  options.build.device_checks = flags.device_checks;
  // --dir publishes a new version at once: re-encoding the previous one's payloads would delay it.
  options.reseed_payloads = !one_shot;
  // A one-shot --dir ends when the coordinator stays away (--watch waits it out, at ERROR).
  if (one_shot) options.unreachable_timeout = kUnreachableTimeout;
  WC_ASSIGN_OR_RETURN(options.import, ParseImport(flags.import));
  options.log = metrics::Logger("publish", format);
  WC_ASSIGN_OR_RETURN(options.secret, net::LoadClusterSecret(flags.node.secret_file));
  WC_ASSIGN_OR_RETURN(
      options.trust_anchor,
      LoadTrustAnchor(flags.node, [&options](std::string_view line) { options.log.Warn(line); }));
  WC_ASSIGN_OR_RETURN(options.signing_identity,
                      LoadSigningIdentity(flags.node, options.trust_anchor != nullptr));
  if (options.trust_anchor != nullptr) {
    WC_ASSIGN_OR_RETURN(
        options.tls,
        CertificateModeTls(flags.node, options.trust_anchor, options.transport,
                           [&options](std::string_view line) { options.log.Warn(line); }));
  }
  if (!flags.upload_limit.empty()) {
    WC_ASSIGN_OR_RETURN(uint64_t rate, ParseSize(flags.upload_limit));
    if (rate == 0) return InvalidArgument("--upload-limit must be above 0");
    options.upload_limit =
        std::make_shared<net::TokenBucket>(rate, std::max<uint64_t>(rate / 10, 1 << 20));
  }
  metrics::Logger log = options.log;

  // Before any thread starts, so that every thread has the signals blocked.
  SignalStopper signals;
  metrics::Registry registry;
  std::unique_ptr<metrics::MetricsServer> metrics_server;
  if (!flags.metrics.empty()) {
    WC_ASSIGN_OR_RETURN(metrics_server, metrics::MetricsServer::Start(registry, flags.metrics));
    log.Info("serving metrics", {{"address", "http://" + metrics_server->address() + "/metrics"}});
    options.metrics = &registry;
  }

  // A signal while the publisher starts (waiting for the coordinator) cancels the start.
  std::atomic<bool> cancel{false};
  options.cancel = &cancel;
  signals.OnSignal([&cancel] { cancel = true; });
  Result<std::unique_ptr<publish::Publisher>> created =
      publish::Publisher::Create(std::move(options));
  if (!created.ok()) {
    signals.OnSignal({});
    if (cancel) {
      log.Info("stopping", {{"signal", std::string(strsignal(signals.signal()))}});
      return Status::Ok();
    }
    return created.status();
  }
  std::unique_ptr<publish::Publisher> publisher = std::move(created).value();
  signals.OnSignal([&publisher] { publisher->Stop(); });

  Status result;
  // A one-shot publish stopped before its --until held did not do what was asked: it exits
  // non-zero and says what the fleet is left with.
  std::string interrupted;
  const std::string until_text = flags.until.empty() ? "replicated" : flags.until;
  if (!flags.watch.empty()) {
    result = publisher->Watch(flags.watch, settle);
  } else {
    Result<publish::PublishedVersion> published =
        flags.from.empty() ? publisher->PublishDirectory(flags.dir)
                           : publisher->PublishOrigin(flags.from, origin_client);
    if (!published.ok()) {
      result = published.status();
      interrupted = "before the version was published";
    } else {
      // The version number on stdout, for scripts; everything else is in the log.
      std::cout << published->version.value() << std::endl;
      result = publisher->WaitUntil(until);
      if (result.ok() && until != publish::SeedUntil::kNever) {
        log.Info("done seeding", {{"version", published->version.value()}, {"until", until_text}});
      }
      const std::string v = "v" + std::to_string(published->version.value());
      interrupted = "before " + v + " was " + until_text + "; agents still fetching " + v +
                    " have no source but each other until its prepare deadline";
    }
  }
  if (signals.signalled()) {
    log.Info("stopping", {{"signal", std::string(strsignal(signals.signal()))}});
    if (result.code() == Code::kAborted) {
      const bool ends = one_shot && until != publish::SeedUntil::kNever;
      result = ends ? Aborted(std::string("interrupted by ") + strsignal(signals.signal()) + " " +
                              interrupted)
                    : Status::Ok();  // a requested stop of a seed that runs until stopped
    }
  }
  signals.OnSignal({});  // the publisher goes away before the signal thread does
  publisher->Stop();
  return result;
}

void SetupPublish(CLI::App& app) {
  auto flags = std::make_shared<PublishFlags>();
  CLI::App* cmd = app.add_subcommand(
      "publish",
      "Publish checkpoint directories as versions of a channel and seed them to the fleet: "
      "--dir publishes one directory (then seeds until --until, default replicated); --watch "
      "publishes every checkpoint directory a trainer saves under DIR, in natural order, once "
      "complete and unchanged for --settle (until stopped)");
  cmd->footer(
      "With --dir the command ends by itself: exit 0 once --until holds; exit 1 when the version "
      "is aborted (\"vN was aborted: <reason>\"), when the coordinator refuses the handshake "
      "(wrong secret or cluster; at once) or when it is unreachable for 30 s (at start or "
      "later); exit 2 for bad flags (an address that is not ip:port, a missing --dir), before "
      "anything starts. --watch keeps retrying an unreachable coordinator after it started, "
      "logging at ERROR. One writer per channel: while another live publisher holds the channel "
      "this one exits 1 at once (\"channel C already has a writer: ...\") unless --take-over; a "
      "publisher taken over exits 1 (\"fenced by writer ...\").");
  cmd->add_option("--coordinator", flags->coordinator,
                  "Coordinator address (ip:port; several, A,B,C: the leader is followed)")
      ->required();
  cmd->add_option("--store", flags->store, "The publisher's store directory")->required();
  cmd->add_option("--channel", flags->channel, "Channel to publish")->required();
  cmd->add_option("--dir", flags->dir, "Publish this checkpoint directory as the next version");
  cmd->add_option("--watch", flags->watch,
                  "Publish each new checkpoint directory that appears under DIR");
  cmd->add_option("--from", flags->from,
                  "Publish the model at an HTTP(S) origin, streamed (no local copy) and seeded "
                  "from the origin: a URL of a .safetensors file, of a .safetensors.index.json "
                  "(its shards too), of a directory ending in / (its "
                  "model.safetensors.index.json), or a local file listing \"NAME URL\" per line "
                  "(pre-signed URLs; docs/origin.md)");
  AddOriginFlags(cmd, flags->origin, /*agent=*/false);
  cmd->add_option("--listen", flags->listen, "ip:port peers fetch from (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--metrics", flags->metrics, "ip:port to serve Prometheus /metrics on");
  cmd->add_option("--until", flags->until,
                  "Seed until: replicated (every chunk has another copy; default for --dir), "
                  "complete (every live agent committed it), never (default for --watch)");
  cmd->add_option("--settle", flags->settle,
                  "--watch: a directory must be unchanged this long before it is published")
      ->capture_default_str();
  cmd->add_option("--upload-limit", flags->upload_limit,
                  "Upload rate limit, bytes/s (e.g. 100MiB)");
  cmd->add_option("--chunk-size", flags->chunk_size,
                  "Chunk size of new versions; auto: the channel's current chunk size, or for "
                  "a channel's first version one chosen from its size (docs/publish.md)")
      ->capture_default_str();
  cmd->add_option("--import", flags->import,
                  "How files enter the store: auto or copy (a reflink where the filesystem can, so "
                  "the store never shares bytes the trainer rewrites), hardlink (no copy; the "
                  "files must then never be modified in place)")
      ->capture_default_str();
  cmd->add_option("--writer-id", flags->writer_id,
                  "This writer's identity across restarts (default: the id kept in the store, "
                  "STORE/.writer-id)");
  cmd->add_flag("--allow-no-tensors", flags->allow_no_tensors,
                "Publish a directory that holds no tensor (refused by default: every agent would "
                "make it current in place of the model)");
  cmd->add_flag("--device-checks", flags->device_checks,
                "Sign a device check per chunk into each version, for samplers whose live tensors "
                "sit in GPU memory: they check what they write there on the device (docs/gpu.md)");
  cmd->add_flag("--take-over", flags->take_over,
                "Take the channel from the publisher that holds it; that one is fenced");
  cmd->add_option("--rank", flags->rank,
                  "Sharded publish: this process is rank R of --world W; it publishes its own "
                  "files as its part of each version (docs/sharded_publish.md)")
      ->capture_default_str();
  cmd->add_option("--world", flags->world,
                  "Sharded publish: how many ranks give the parts of each version (they share "
                  "--writer-id; each has its own --store)")
      ->capture_default_str();
  AddNodeFlags(cmd, flags->node);
  AddTransportFlag(cmd, flags->transport);
  cmd->callback([flags] { Finish("publish", RunPublish(*flags)); });
}

const CommandRegistration kRegistered{"publish", 12, &SetupPublish};

}  // namespace
}  // namespace weightcast::cli
