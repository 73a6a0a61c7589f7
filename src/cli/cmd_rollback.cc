// weightcast rollback --coordinator ADDR CHANNEL [VERSION]: the fleet switches back to a kept,
// committed version (docs/rollout.md). The coordinator records the rollback durably before it
// answers; every agent then switches `current` to that version without fetching anything (a
// node that no longer keeps it fetches it), runs its engine hook and reports. With --wait the
// command returns once every live agent following the channel has the version current.
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "cli/node_flags.h"
#include "coord/client.h"
#include "manifest/builder.h"
#include "metrics/log.h"
#include "net/handshake.h"
#include "net/tcp_transport.h"
#include "trust/rollback_order.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

namespace wire = coord::wire;
using Clock = std::chrono::steady_clock;

struct RollbackFlags {
  std::string coordinator;
  std::string channel;
  uint64_t version = 0;
  bool wait = false;
  std::string timeout = "60s";
  std::string connect_timeout = "5s";
  NodeFlags node;
};

// Live agents following `channel` and how many have `version` current (publishers, which
// report SEEDING, are not followers).
struct Switched {
  uint32_t followers = 0;
  uint32_t done = 0;
};
Switched CountSwitched(const wire::FleetStatus& status, const std::string& channel,
                       uint64_t version) {
  Switched s;
  for (const wire::NodeStatus& node : status.nodes()) {
    if (!node.alive() || node.source()) continue;
    for (const wire::ChannelProgress& p : node.channels()) {
      if (p.channel() != channel) continue;
      ++s.followers;
      if (p.current_version() == version && p.phase() == wire::PHASE_COMMITTED) ++s.done;
    }
  }
  return s;
}

// What an operator's order names (trust/rollback_order.h): the version `channel` has current in
// the coordinator's log, and the one a rollback to `asked` goes back to (0: the committed version
// below the current one, as the coordinator resolves it).
Result<std::pair<uint64_t, uint64_t>> FromAndTarget(coord::CoordinatorClient& client,
                                                    const std::string& channel, uint64_t asked) {
  WC_ASSIGN_OR_RETURN(const coord::wire::FleetStatus status, client.GetStatus(channel));
  for (const coord::wire::ChannelLog& log : status.channels()) {
    if (log.channel() != channel || log.current_version() == 0) continue;
    const uint64_t current = log.current_version();
    uint64_t target = asked;
    for (auto it = log.versions().rbegin(); target == 0 && it != log.versions().rend(); ++it) {
      if (it->version() < current && it->decision() == coord::wire::DECISION_COMMIT) {
        target = it->version();
      }
    }
    if (target == 0) {
      return FailedPrecondition("rollback: " + channel + " has no committed version below the " +
                                "current v" + std::to_string(current));
    }
    return std::make_pair(current, target);
  }
  return NotFound("rollback: channel " + channel + " has no committed version");
}

Status RunRollback(const RollbackFlags& flags) {
  WC_RETURN_IF_ERROR(ValidateChannelName(flags.channel));
  WC_ASSIGN_OR_RETURN(metrics::LogFormat format, metrics::ParseLogFormat(flags.node.log_format));
  WC_RETURN_IF_ERROR(ValidateCoordinatorFlag("--coordinator", flags.coordinator));
  WC_ASSIGN_OR_RETURN(auto timeout, ParseDuration(flags.timeout));
  WC_ASSIGN_OR_RETURN(auto connect_timeout, ParseDuration(flags.connect_timeout));
  if (connect_timeout <= std::chrono::nanoseconds::zero()) {
    return InvalidArgument("--connect-timeout must be above 0");
  }
  metrics::Logger log("rollback", format);

  WC_ASSIGN_OR_RETURN(net::Options options, ToolTransportOptions(flags.node));
  options.log = log.AsLineFn();
  WC_ASSIGN_OR_RETURN(auto transport, net::TcpTransport::Create(std::move(options), 1));

  auto client = coord::CoordinatorClient::Connect(*transport, flags.coordinator, connect_timeout);
  if (!client.ok()) {
    return Status(client.status().code(), "cannot reach the coordinator at " + flags.coordinator +
                                              ": " + client.status().message());
  }
  (*client)->set_timeout(connect_timeout);
  std::vector<uint8_t> order;
  uint64_t version = flags.version;
  if (!flags.node.cert_file.empty() || !flags.node.key_file.empty()) {
    // Certificate mode: the operator signs what it orders; the coordinator checks it.
    if (flags.node.cert_file.empty() || flags.node.key_file.empty()) {
      return InvalidArgument("--cert and --key go together");
    }
    Result<std::shared_ptr<const trust::SigningIdentity>> identity =
        trust::SigningIdentity::Load(flags.node.cert_file, flags.node.key_file);
    if (!identity.ok()) return InvalidArgument("--cert/--key: " + identity.status().message());
    WC_ASSIGN_OR_RETURN(const auto from_and_target,
                        FromAndTarget(**client, flags.channel, flags.version));
    version = from_and_target.second;
    WC_ASSIGN_OR_RETURN(
        trust::RollbackOrder made,
        trust::NewRollbackOrder(flags.channel, from_and_target.first, from_and_target.second));
    WC_ASSIGN_OR_RETURN(order, trust::SignRollbackOrder(made, **identity));
  }
  auto rolled = (*client)->Rollback(flags.channel, Version(version), order);
  if (!rolled.ok()) return rolled.status().WithContext("rollback of " + flags.channel);
  const uint64_t to = rolled->value();
  std::printf("channel %s: the fleet switches to version %llu\n", flags.channel.c_str(),
              static_cast<unsigned long long>(to));
  std::fflush(stdout);
  log.Info("rollback recorded", {{"channel", flags.channel}, {"version", std::to_string(to)}});
  if (!flags.wait) return Status::Ok();

  const auto deadline = Clock::now() + timeout;
  Switched last;
  while (true) {
    auto status = (*client)->GetStatus(flags.channel);
    if (status.ok()) {
      // A later rollback or a newer committed version moved the fleet elsewhere: it will never
      // settle on `to`, so waiting out --timeout would only hide that.
      for (const wire::ChannelLog& channel_log : status->channels()) {
        if (channel_log.channel() == flags.channel && channel_log.current_version() != 0 &&
            channel_log.current_version() != to) {
          return Aborted("the fleet no longer switches to version " + std::to_string(to) +
                         ": the coordinator now has version " +
                         std::to_string(channel_log.current_version()) +
                         " current (a newer commit or another rollback)");
        }
      }
      last = CountSwitched(*status, flags.channel, to);
      if (last.done == last.followers) {
        std::printf("channel %s: %u of %u live agents have version %llu current\n",
                    flags.channel.c_str(), last.done, last.followers,
                    static_cast<unsigned long long>(to));
        return Status::Ok();
      }
    } else if (status.status().code() != Code::kDeadlineExceeded) {
      // Only a slow answer is worth another try within --timeout.
      return status.status().WithContext("waiting for the fleet to switch");
    }
    if (Clock::now() >= deadline) {
      return DeadlineExceeded(std::to_string(last.done) + " of " + std::to_string(last.followers) +
                              " live agents switched to version " + std::to_string(to) +
                              " within --timeout " + flags.timeout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

void SetupRollback(CLI::App& app) {
  auto flags = std::make_shared<RollbackFlags>();
  CLI::App* cmd = app.add_subcommand(
      "rollback",
      "Switch the fleet back to a kept, committed version of a channel, transactionally and "
      "without fetching");
  cmd->footer(
      "Examples:\n"
      "  weightcast rollback --coordinator 127.0.0.1:7000 policy        # to the committed "
      "version before the current one\n"
      "  weightcast rollback --coordinator 127.0.0.1:7000 policy 12 --wait\n"
      "The coordinator writes the rollback to its log before it answers; a pending version is "
      "aborted. Exit status: 0 ok, 1 refused (not a committed version, nothing to roll back "
      "to), unreachable or --wait timed out, 2 bad flags.");
  cmd->add_option("--coordinator", flags->coordinator,
                  "Coordinator address, ip:port (several, A,B,C: the leader is followed)")
      ->required();
  cmd->add_option("channel", flags->channel, "Channel to roll back")->required();
  cmd->add_option("version", flags->version,
                  "Version to switch to (default: the committed version below the current one)")
      ->check(CLI::Range(uint64_t{1}, UINT64_MAX));
  cmd->add_flag("--wait", flags->wait,
                "Return once every live agent following the channel has the version current");
  cmd->add_option("--timeout", flags->timeout, "With --wait: give up after this long")
      ->capture_default_str();
  cmd->add_option("--connect-timeout", flags->connect_timeout,
                  "How long to wait for the coordinator to answer")
      ->capture_default_str();
  AddNodeFlags(cmd, flags->node);
  cmd->callback([flags] { Finish("rollback", RunRollback(*flags)); });
}

const CommandRegistration kRegistered{"rollback", 15, &SetupRollback};

}  // namespace
}  // namespace weightcast::cli
