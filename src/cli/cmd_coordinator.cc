// weightcast coordinator   the fleet's control plane (docs/coordinator.md): membership and
// heartbeats, peer lists, the durable version log of every channel, rollbacks. Agents, publishers
// and tools connect to --listen; the state lives in --state-dir and survives restarts.
// The cluster secret comes from --secret-file or WEIGHTCAST_SECRET, never from the command line.
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "cli/command.h"
#include "cli/node_flags.h"
#include "cli/signal_stop.h"
#include "coord/coordinator.h"
#include "coord/coordinator_metrics.h"
#include "coord/etcd_coordinator.h"
#include "coord/fleet_page.h"
#include "coord/rollout_decider.h"
#include "metrics/http_server.h"
#include "metrics/log.h"
#include "metrics/registry.h"
#include "net/handshake.h"
#include "net/tcp_transport.h"
#include "swarm/tuning.h"
#include "util/file.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

struct CoordinatorFlags {
  std::string listen;
  std::string state_dir;
  std::string heartbeat_timeout = "3s";
  std::string part_timeout = "60s";
  uint32_t degree = swarm::Tuning{}.degree;  // what `weightcast sim` runs (swarm/tuning.h)
  uint32_t origin_fetchers = coord::CoordinatorOptions{}.origin_fetchers;
  std::string commit_policy = "all";
  std::string prepare_deadline = "10m";
  std::string metrics;
  std::string admin_secret_file;
  std::string address_file;
  // The highly available backend (docs/coordinator_etcd.md).
  std::string etcd;
  std::string etcd_prefix;
  std::string lease_ttl = "3s";
  std::string advertise;
  NodeFlags node;
};

Status RunEtcdCoordinator(const CoordinatorFlags& flags, const coord::CoordinatorOptions& base,
                          const coord::RolloutDeciderOptions& rollout, net::Options net_options,
                          metrics::Logger& log) {
  if (!flags.metrics.empty() || !flags.admin_secret_file.empty()) {
    return InvalidArgument(
        "--metrics and --admin-secret-file are not served with --etcd yet (each term would "
        "need its own page); run without them");
  }
  if (!flags.state_dir.empty()) {
    return InvalidArgument(
        "--state-dir and --etcd exclude each other: with --etcd the version "
        "log lives in etcd");
  }
  WC_ASSIGN_OR_RETURN(net::Duration ttl, ParseDuration(flags.lease_ttl));
  SignalStopper signals;
  WC_ASSIGN_OR_RETURN(auto transport, net::TcpTransport::Create(std::move(net_options), 2));
  coord::EtcdCoordinatorOptions options;
  options.endpoints = flags.etcd;
  options.prefix =
      flags.etcd_prefix.empty()
          ? "/weightcast/" +
                (flags.node.cluster.empty() ? std::string("default") : flags.node.cluster) + "/"
          : flags.etcd_prefix;
  options.listen = flags.listen;
  options.advertise = flags.advertise;
  options.lease_ttl = std::chrono::duration_cast<std::chrono::seconds>(ttl);
  // https:// etcd endpoints: the cluster CA and the coordinator's own certificate (its
  // certificate-mode files) are etcd's trust and its client certificate.
  options.etcd_ca_file = flags.node.ca_file;
  options.etcd_cert_file = flags.node.cert_file;
  options.etcd_key_file = flags.node.key_file;
  options.transport = transport.get();
  options.log = log.AsLineFn();
  options.coordinator_options = [base, rollout]() -> Result<coord::CoordinatorOptions> {
    coord::CoordinatorOptions options = base;
    WC_ASSIGN_OR_RETURN(options.decider, coord::RolloutDecider::Create(rollout));
    return options;
  };
  options.on_listening = [&](const std::string& address) {
    if (!flags.address_file.empty()) {
      Status written = WriteFileAtomic(flags.address_file, address);
      if (!written.ok()) log.Info("cannot write --address-file: " + written.ToString());
    }
    log.Info("listening", {{"address", address},
                           {"etcd", flags.etcd},
                           {"prefix", options.prefix},
                           {"lease_ttl_s", static_cast<uint64_t>(options.lease_ttl.count())},
                           {"commit_policy", flags.commit_policy}});
  };
  coord::EtcdCoordinator runner(std::move(options));
  signals.OnSignal([&runner] { runner.Stop(); });
  Status run = runner.Run();
  signals.OnSignal({});
  if (signals.signalled()) {
    log.Info("stopped", {{"signal", std::string(strsignal(signals.signal()))}});
  }
  return run;
}

Status RunCoordinator(const CoordinatorFlags& flags) {
  WC_ASSIGN_OR_RETURN(metrics::LogFormat format, metrics::ParseLogFormat(flags.node.log_format));
  WC_ASSIGN_OR_RETURN(net::Duration heartbeat_timeout, ParseDuration(flags.heartbeat_timeout));
  if (heartbeat_timeout < std::chrono::milliseconds(30)) {
    return InvalidArgument("--heartbeat-timeout must be at least 30ms");
  }
  if (flags.degree < 2) return InvalidArgument("--degree must be at least 2");
  if (flags.origin_fetchers == 0) return InvalidArgument("--origin-fetchers must be at least 1");
  WC_ASSIGN_OR_RETURN(net::Duration part_timeout, ParseDuration(flags.part_timeout));
  if (part_timeout < std::chrono::milliseconds(100)) {
    return InvalidArgument("--part-timeout must be at least 100ms");
  }
  metrics::Logger log("coordinator", format);

  if (flags.etcd.empty() && flags.state_dir.empty()) {
    return InvalidArgument("--state-dir is needed (or --etcd URL,... for the HA backend)");
  }
  coord::CoordinatorOptions options;
  options.state_dir = flags.state_dir;
  options.heartbeat_timeout = heartbeat_timeout;
  options.part_timeout = part_timeout;
  options.degree = flags.degree;
  options.origin_fetchers = flags.origin_fetchers;
  options.log = log.AsLineFn();
  WC_ASSIGN_OR_RETURN(options.secret, net::LoadClusterSecret(flags.node.secret_file));
  WC_ASSIGN_OR_RETURN(
      options.trust_anchor,
      LoadTrustAnchor(flags.node, [&log](std::string_view line) { log.Warn(line); }));
  if (options.trust_anchor != nullptr) {
    WC_ASSIGN_OR_RETURN(options.identity, LoadSigningIdentity(flags.node, false));
  }
  coord::FleetPageOptions page;
  if (!flags.admin_secret_file.empty()) {
    if (flags.metrics.empty()) {
      return InvalidArgument("--admin-secret-file needs --metrics (the page is served there)");
    }
    WC_ASSIGN_OR_RETURN(page.admin_secret, net::LoadClusterSecret(flags.admin_secret_file));
    if (page.admin_secret == options.secret) {
      return InvalidArgument(
          "--admin-secret-file holds the cluster secret: give the page a secret of its own "
          "(weightcast keygen --out FILE)");
    }
  }
  // The two-phase rollout decides commits and aborts (docs/rollout.md).
  coord::RolloutDeciderOptions rollout;
  WC_ASSIGN_OR_RETURN(rollout.policy, rollout::ParseCommitPolicy(flags.commit_policy));
  WC_ASSIGN_OR_RETURN(rollout.prepare_deadline, ParseDuration(flags.prepare_deadline));
  if (rollout.prepare_deadline <= net::Duration::zero()) {
    return InvalidArgument("--prepare-deadline must be above 0");
  }
  rollout.recovery_grace = heartbeat_timeout;
  rollout.clock = &net::Clock::Real();
  WC_ASSIGN_OR_RETURN(options.decider, coord::RolloutDecider::Create(rollout));

  net::Options net_options;
  net_options.self.cluster_id = flags.node.cluster;
  net_options.self.node_id =
      PeerId(flags.node.node_id != 0 ? flags.node.node_id : std::random_device{}());
  net_options.self.role = net::Role::kCoordinator;
  net_options.secret = options.secret;
  if (options.trust_anchor != nullptr) {
    WC_ASSIGN_OR_RETURN(net_options.tls, CertificateModeTls(flags.node, options.trust_anchor));
  }
  // A node refused for its secret or cluster is misconfigured and keeps retrying: WARN, so that
  // it stands out among the INFO lines (docs/coordinator.md, "Membership and liveness").
  net_options.log = [log](std::string_view line) {
    const bool misconfigured = line.starts_with("tcp: refused peer ") &&
                               (line.find("UNAUTHENTICATED") != std::string_view::npos ||
                                line.find("FAILED_PRECONDITION") != std::string_view::npos);
    if (misconfigured) {
      log.Warn(std::string(line) + " (a node with another cluster secret or --cluster?)");
    } else {
      log.Info(line);
    }
  };

  if (!flags.etcd.empty()) {
    return RunEtcdCoordinator(flags, options, rollout, std::move(net_options), log);
  }
  // Before any thread starts, so that every thread has the signals blocked.
  SignalStopper signals;
  // Before the coordinator, which updates its per-channel metrics in it until it is destroyed.
  metrics::Registry registry;
  options.metrics = &registry;
  WC_ASSIGN_OR_RETURN(std::unique_ptr<coord::Coordinator> coordinator,
                      coord::Coordinator::Open(std::move(options)));
  coord::ExportCoordinatorMetrics(*coordinator, registry);
  std::unique_ptr<metrics::MetricsServer> metrics_server;
  if (!flags.metrics.empty()) {
    WC_ASSIGN_OR_RETURN(metrics_server,
                        metrics::MetricsServer::Start(registry, flags.metrics,
                                                      coord::FleetPageRoutes(*coordinator, page)));
    log.Info("serving metrics", {{"address", "http://" + metrics_server->address() + "/metrics"}});
    log.Info("serving the fleet page",
             {{"address", "http://" + metrics_server->address() + "/"},
              {"rollback_from_page", page.admin_secret.empty() ? "off" : "on"}});
  }
  WC_ASSIGN_OR_RETURN(auto transport, net::TcpTransport::Create(std::move(net_options), 2));
  WC_ASSIGN_OR_RETURN(auto listener, transport->Listen(flags.listen));
  if (!flags.address_file.empty()) {
    WC_RETURN_IF_ERROR(WriteFileAtomic(flags.address_file, listener->address()));
  }
  log.Info("listening",
           {{"address", listener->address()},
            {"state_dir", flags.state_dir},
            {"heartbeat_timeout_ms",
             static_cast<uint64_t>(
                 std::chrono::duration_cast<std::chrono::milliseconds>(heartbeat_timeout).count())},
            {"degree", flags.degree},
            {"commit_policy", flags.commit_policy},
            {"prepare_deadline", flags.prepare_deadline}});

  signals.OnSignal([&coordinator] { coordinator->Stop(); });
  coordinator->Serve(*listener);  // until a signal stops it
  signals.OnSignal({});
  if (signals.signalled()) {
    log.Info("stopped", {{"signal", std::string(strsignal(signals.signal()))}});
  }
  if (metrics_server != nullptr) metrics_server->Stop();
  coord::RemoveCoordinatorMetrics(registry);
  return Status::Ok();
}

void SetupCoordinator(CLI::App& app) {
  auto flags = std::make_shared<CoordinatorFlags>();
  CLI::App* cmd = app.add_subcommand(
      "coordinator",
      "Run the control plane: agents and publishers register and heartbeat here, get their peer "
      "lists and the versions to fetch; publishers record new versions in a durable log under "
      "--state-dir (a restarted coordinator serves the same log). Stops on SIGINT/SIGTERM");
  cmd->add_option("--listen", flags->listen, "ip:port to listen on (port 0: any free port)")
      ->required();
  cmd->add_option("--state-dir", flags->state_dir,
                  "Directory of the version log and published manifests (created if missing); "
                  "not with --etcd");
  cmd->add_option("--heartbeat-timeout", flags->heartbeat_timeout,
                  "Silence after which a node is marked dead (nodes heartbeat 3x as often)")
      ->capture_default_str();
  cmd->add_option("--part-timeout", flags->part_timeout,
                  "Sharded publish: a version whose ranks' parts are not all in this long after "
                  "the first is aborted (docs/sharded_publish.md)")
      ->capture_default_str();
  cmd->add_option("--origin-fetchers", flags->origin_fetchers,
                  "How many agents fetch from an HTTP(S) origin at once, each a disjoint share "
                  "of an origin version's chunks (docs/origin.md); the rest comes from peers")
      ->capture_default_str();
  cmd->add_option("--degree", flags->degree,
                  "Peers per agent in the peer lists (publishers get at least " +
                      std::to_string(swarm::Tuning{}.source_degree) + ")")
      ->capture_default_str();
  cmd->add_option("--commit-policy", flags->commit_policy,
                  "When a version commits: all (every live agent prepared), quorum:F (a fraction "
                  "F of them), each (every agent switches as soon as it prepared)")
      ->capture_default_str();
  cmd->add_option("--prepare-deadline", flags->prepare_deadline,
                  "A version not committed this long after its publication is aborted")
      ->capture_default_str();
  cmd->add_option("--metrics", flags->metrics,
                  "ip:port to serve Prometheus metrics at /metrics and the live fleet page at / "
                  "(port 0: any free port)");
  cmd->add_option("--admin-secret-file", flags->admin_secret_file,
                  "File holding a secret (not the cluster secret; weightcast keygen) that allows "
                  "rollbacks from the fleet page; without it the page is read-only");
  cmd->add_option("--address-file", flags->address_file,
                  "Once listening, write the bound address here (atomically), for scripts");
  cmd->add_option("--etcd", flags->etcd,
                  "etcd endpoints, http://HOST:PORT,...: keep the version log in etcd and run as "
                  "one of several coordinators, one leading (docs/coordinator_etcd.md)");
  cmd->add_option("--etcd-prefix", flags->etcd_prefix,
                  "Key prefix in etcd (default /weightcast/<cluster>/)");
  cmd->add_option("--lease-ttl", flags->lease_ttl,
                  "With --etcd: the leader's lease; a standby takes over this long after the "
                  "leader died")
      ->capture_default_str();
  cmd->add_option("--advertise", flags->advertise,
                  "With --etcd: the address standbys send clients to (default: the bound "
                  "--listen address)");
  AddNodeFlags(cmd, flags->node);
  cmd->callback([flags] { Finish("coordinator", RunCoordinator(*flags)); });
}

const CommandRegistration kRegistered{"coordinator", 11, &SetupCoordinator};

}  // namespace
}  // namespace weightcast::cli
