// weightcast agent   follow a channel: fetch each new version from peers, serve what this node
// holds, commit what the coordinator decides (docs/agent.md). Stops on SIGINT/SIGTERM, or with
// --exit-after V once a version >= V is committed.
// The cluster secret comes from --secret-file or WEIGHTCAST_SECRET, never from the command line.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "agent/daemon.h"
#include "agent/engine_hook.h"
#include "cli/command.h"
#include "cli/node_flags.h"
#include "cli/signal_stop.h"
#include "manifest/builder.h"
#include "metrics/log.h"
#include "net/handshake.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

struct AgentFlags {
  std::string coordinator;
  std::string store;
  std::string channel;
  std::string listen = "127.0.0.1:0";
  std::string rack;
  std::vector<std::string> tensors;
  std::string metrics;
  std::string upload_limit;
  std::string download_limit;
  uint64_t exit_after = 0;
  NodeFlags node;
  bool corrupt_uploads_for_testing = false;
  std::string verify_result = "fast";
  std::string hook_command;
  std::string hook_url;
  uint32_t hook_retries = 2;
  std::string hook_failure = "report";
  std::string hook_timeout = "10m";
  std::string transport = "tcp";
  OriginFlags origin;
};

Status RunAgent(const AgentFlags& flags) {
  WC_ASSIGN_OR_RETURN(metrics::LogFormat format, metrics::ParseLogFormat(flags.node.log_format));
  WC_RETURN_IF_ERROR(ValidateChannelName(flags.channel));
  // Flag errors before anything starts: a bad address would otherwise be retried forever.
  WC_RETURN_IF_ERROR(ValidateCoordinatorFlag("--coordinator", flags.coordinator));
  WC_RETURN_IF_ERROR(ValidateAddressFlag("--listen", flags.listen, /*allow_port_zero=*/true));
  if (!flags.metrics.empty()) {
    WC_RETURN_IF_ERROR(ValidateAddressFlag("--metrics", flags.metrics, /*allow_port_zero=*/true));
  }
  metrics::Logger log("agent", format);
  agent::AgentOptions options;
  options.coordinator = flags.coordinator;
  options.store_dir = flags.store;
  options.channel = flags.channel;
  options.listen = flags.listen;
  WC_ASSIGN_OR_RETURN(options.transport, ParseTransportFlag(flags.transport));
  options.rack = flags.rack;
  options.tensor_patterns = flags.tensors;
  options.metrics = flags.metrics;
  if (!flags.upload_limit.empty()) {
    WC_ASSIGN_OR_RETURN(options.upload_limit, ParseSize(flags.upload_limit));
    if (options.upload_limit == 0) return InvalidArgument("--upload-limit must be above 0");
  }
  if (!flags.download_limit.empty()) {
    WC_ASSIGN_OR_RETURN(options.download_limit, ParseSize(flags.download_limit));
    if (options.download_limit == 0) return InvalidArgument("--download-limit must be above 0");
  }
  options.exit_after = Version(flags.exit_after);
  WC_ASSIGN_OR_RETURN(options.secret, net::LoadClusterSecret(flags.node.secret_file));
  WC_ASSIGN_OR_RETURN(
      options.trust_anchor,
      LoadTrustAnchor(flags.node, [&log](std::string_view line) { log.Warn(line); }));
  if (options.trust_anchor != nullptr) {
    WC_ASSIGN_OR_RETURN(options.tls,
                        CertificateModeTls(flags.node, options.trust_anchor, options.transport,
                                           [&log](std::string_view line) { log.Warn(line); }));
  }
  options.cluster = flags.node.cluster;
  WC_ASSIGN_OR_RETURN(options.node_id, NodeIdOf(flags.node));
  options.corrupt_uploads_for_testing = flags.corrupt_uploads_for_testing;
  WC_ASSIGN_OR_RETURN(options.verify_result, ParseVerifyResultFlag(flags.verify_result));
  options.hook.command = flags.hook_command;
  options.hook.url = flags.hook_url;
  WC_ASSIGN_OR_RETURN(auto hook_timeout, ParseDuration(flags.hook_timeout));
  options.hook.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(hook_timeout);
  // Checked here so that a bad URL or timeout is a flag error (exit 2), not a run failure.
  WC_RETURN_IF_ERROR(agent::EngineHook::Create(options.hook).status());
  options.hook_retries = flags.hook_retries;
  WC_ASSIGN_OR_RETURN(options.hook_failure, rollout::ParseHookFailure(flags.hook_failure));
  WC_ASSIGN_OR_RETURN(options.origin_http, OriginClient(flags.origin));
  options.log = log.AsLineFn();
  options.log_error = [log](std::string_view line) { log.Error(line); };

  // Before any thread starts, so that every thread has the signals blocked.
  SignalStopper signals;
  WC_ASSIGN_OR_RETURN(std::unique_ptr<agent::Agent> agent,
                      agent::Agent::Create(std::move(options)));
  signals.OnSignal([&agent] { agent->Stop(); });
  Status run = agent->Run();
  signals.OnSignal({});
  if (signals.signalled()) {
    log.Info("stopped", {{"signal", std::string(strsignal(signals.signal()))}});
  }
  return run;
}

void SetupAgent(CLI::App& app) {
  auto flags = std::make_shared<AgentFlags>();
  CLI::App* cmd = app.add_subcommand(
      "agent",
      "Follow a channel: fetch each new version from peers (verified chunk by chunk), serve what "
      "this node holds, and commit versions as the coordinator decides. Stops on SIGINT/SIGTERM");
  cmd->add_option("--coordinator", flags->coordinator,
                  "ip:port of the coordinator (several, A,B,C: coordinators on etcd; the leader is "
                  "followed)")
      ->required();
  cmd->add_option("--store", flags->store, "Store root directory (created if missing)")->required();
  cmd->add_option("--channel", flags->channel, "Channel to follow")->required();
  cmd->add_option("--listen", flags->listen, "ip:port where peers reach this node (port 0: any)")
      ->capture_default_str();
  cmd->add_option("--rack", flags->rack, "Rack of this machine (peer lists prefer the same rack)");
  cmd->add_option("--tensors", flags->tensors,
                  "Fetch only the tensors matching this glob (repeatable); each version is "
                  "committed partial, holding only those tensors (store list shows it so; "
                  "docs/sharded_publish.md)");
  cmd->add_option("--metrics", flags->metrics,
                  "ip:port to serve Prometheus metrics at /metrics (port 0: any free port)");
  cmd->add_option("--upload-limit", flags->upload_limit, "Upload rate limit, bytes/s (e.g. 1GiB)");
  cmd->add_option("--download-limit", flags->download_limit, "Download rate limit, bytes/s");
  cmd->add_option("--exit-after", flags->exit_after,
                  "Exit 0 once this version (or a newer one) is committed and current");
  AddNodeFlags(cmd, flags->node);
  AddTransportFlag(cmd, flags->transport);
  AddVerifyResultFlag(cmd, flags->verify_result);
  cmd->add_option("--hook-command", flags->hook_command,
                  "Engine hand-off: run this (sh -c) after every change of current, with the "
                  "channel, version and directory as arguments and in WEIGHTCAST_CHANNEL, "
                  "WEIGHTCAST_VERSION, WEIGHTCAST_DIR (docs/rollout.md)");
  cmd->add_option("--hook-url", flags->hook_url,
                  "Engine hand-off: POST {\"channel\", \"version\", \"dir\"} as JSON to this "
                  "http:// URL after every change of current");
  cmd->add_option("--hook-retries", flags->hook_retries, "Further tries after a failed hook")
      ->capture_default_str();
  cmd->add_option("--hook-failure", flags->hook_failure,
                  "After the last failed try: report (the failure is reported) or rollback (also "
                  "ask the coordinator to roll the fleet back to the previous version)")
      ->capture_default_str();
  cmd->add_option("--hook-timeout", flags->hook_timeout,
                  "A hook still running after this long is killed and counts as failed")
      ->capture_default_str();
  AddOriginFlags(cmd, flags->origin, /*agent=*/true);
#if WC_TEST_HOOKS
  // Hidden (empty group): corrupts every chunk this node uploads, so integration tests can
  // check that peers detect and drop it. Only in the builds the tests run (WC_TEST_HOOKS).
  cmd->add_flag("--corrupt-uploads-for-testing", flags->corrupt_uploads_for_testing, "TESTING ONLY")
      ->group("");
#endif
  cmd->callback([flags] { Finish("agent", RunAgent(*flags)); });
}

const CommandRegistration kRegistered{"agent", 13, &SetupAgent};

}  // namespace
}  // namespace weightcast::cli
