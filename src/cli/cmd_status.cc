// weightcast status   live progress of a rollout, from the coordinator (docs/metrics.md).
// Polls GetStatus and draws cli/status_view: progress bars per channel and a fleet table,
// redrawn in place on a terminal; one summary line per change otherwise. --once prints one
// snapshot, --json prints FleetStatus as JSON, --until-complete waits for the newest version to
// be committed everywhere, --all also lists the nodes that left on purpose, --nodes lists every
// node of a fleet the view would summarize, --from draws a saved --json snapshot. The view fits the
// terminal's width ($COLUMNS, else 80, when stdout is not a terminal). The cluster secret comes
// from --secret-file or WEIGHTCAST_SECRET.
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include <google/protobuf/util/json_util.h>

#include "cli/command.h"
#include "cli/node_flags.h"
#include "cli/status_view.h"
#include "coord/client.h"
#include "coord/status_json.h"
#include "manifest/builder.h"
#include "metrics/log.h"
#include "net/handshake.h"
#include "net/tcp_transport.h"
#include "util/file.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

namespace wire = coord::wire;
using Clock = std::chrono::steady_clock;

struct StatusFlags {
  std::string coordinator;
  std::string channel;
  bool once = false;
  bool json = false;
  bool until_complete = false;
  bool all = false;    // also nodes that left
  bool nodes = false;  // every node's row, even in a fleet the view summarizes
  std::string from;    // a saved `status --once --json` to draw instead of asking a coordinator
  std::string interval = "500ms";
  std::string timeout = "0";
  std::string connect_timeout = "5s";
  NodeFlags node;
  bool verbose = false;
};

// Set by SIGINT/SIGTERM; the poll loop looks at it between sleeps of a few milliseconds.
std::atomic<bool> g_interrupted{false};
extern "C" void OnInterrupt(int) { g_interrupted.store(true); }

void InstallInterruptHandler() {
  struct sigaction action {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

// Sleeps `d` unless interrupted first; returns false when interrupted.
bool SleepUnlessInterrupted(Clock::duration d) {
  const auto until = Clock::now() + d;
  while (!g_interrupted.load()) {
    auto left = until - Clock::now();
    if (left <= Clock::duration::zero()) return true;
    std::this_thread::sleep_for(std::min<Clock::duration>(left, std::chrono::milliseconds(20)));
  }
  return false;
}

// Nodes that left are always fetched, so that the view can count what it hides; the JSON has
// them only with --all, like the coordinator's own default.
Result<std::string> ToJson(const wire::FleetStatus& status, bool all) {
  if (all) return coord::FleetStatusJson(status);
  wire::FleetStatus without = status;
  without.clear_nodes();
  for (const wire::NodeStatus& node : status.nodes()) {
    if (!node.left()) *without.add_nodes() = node;
  }
  return coord::FleetStatusJson(without);
}

// Every selected channel has a published version that every live follower committed.
bool AllComplete(const std::vector<ChannelSummary>& summaries) {
  if (summaries.empty()) return false;
  for (const ChannelSummary& s : summaries) {
    if (!s.complete()) return false;
  }
  return true;
}

struct TerminalSize {
  int columns = 80;
  int rows = 40;
};
// The terminal's size (TIOCGWINSZ), else $COLUMNS columns, else 80 (ResolveWidth).
TerminalSize QueryTerminal() {
  TerminalSize size;
  winsize ws{};
  int tty_columns = 0;
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    tty_columns = ws.ws_col;
    if (ws.ws_row > 0) size.rows = ws.ws_row;
  }
  size.columns = ResolveWidth(tty_columns, std::getenv("COLUMNS"));
  return size;
}

ViewOptions OnceOptions(const StatusFlags& flags) {
  return {.channel = flags.channel,
          .width = QueryTerminal().columns,
          .show_left = flags.all,
          .max_table_rows = 0,
          .list_nodes = flags.nodes};
}

// --from FILE: one snapshot of a status saved with `status --once --json` (--all for the nodes
// that left), drawn or printed as if the coordinator had just sent it.
Status DrawSaved(const StatusFlags& flags) {
  if (flags.until_complete)
    return InvalidArgument("--until-complete needs a coordinator, not --from");
  Result<std::string> text = ReadFileToString(flags.from);
  if (!text.ok()) return text.status().WithContext("--from");
  wire::FleetStatus status;
  auto parsed = google::protobuf::util::JsonStringToMessage(*text, &status);
  if (!parsed.ok()) {
    return InvalidArgument("--from " + flags.from + ": not a FleetStatus as `weightcast status " +
                           "--once --json` prints it: " + std::string(parsed.message()));
  }
  if (flags.json) {
    WC_ASSIGN_OR_RETURN(std::string json, ToJson(status, flags.all));
    std::printf("%s\n", json.c_str());
  } else {
    std::fputs(RenderStatus(status, nullptr, OnceOptions(flags)).c_str(), stdout);
  }
  return Status::Ok();
}

class StatusCommand {
 public:
  StatusCommand(const StatusFlags& flags, std::unique_ptr<net::Transport> transport,
                metrics::Logger log)
      : flags_(flags), transport_(std::move(transport)), log_(std::move(log)) {}

  Status Run(Clock::duration interval, Clock::duration timeout, Clock::duration connect_timeout) {
    connect_timeout_ = connect_timeout;
    // The first connection decides whether the coordinator is there at all: fail clearly.
    auto client = Connect();
    if (!client.ok()) return client.status();
    client_ = std::move(client).value();
    if (flags_.once) return Once();

    const bool tty = isatty(STDOUT_FILENO) == 1;
    const auto deadline =
        timeout > Clock::duration::zero() ? Clock::now() + timeout : Clock::time_point::max();
    TerminalRedraw redraw(tty ? QueryTerminal().columns : 0);
    std::vector<std::string> last_lines;
    std::string last_error;
    while (true) {
      auto status = Poll();
      if (status.ok()) {
        const wire::FleetStatus& now = *status;
        const wire::FleetStatus* earlier = EarlierSnapshot(now);
        std::vector<ChannelSummary> summaries = Summarize(now, earlier, flags_.channel);
        if (flags_.json) {
          WC_ASSIGN_OR_RETURN(std::string json, ToJson(now, flags_.all));
          std::printf("%s\n", json.c_str());
        } else if (tty) {
          TerminalSize size = QueryTerminal();
          ViewOptions options{.channel = flags_.channel,
                              .width = size.columns,
                              .show_left = flags_.all,
                              .max_table_rows = TableRows(size, summaries.size()),
                              .list_nodes = flags_.nodes};
          std::fputs(redraw.Next(RenderStatus(now, earlier, options)).c_str(), stdout);
        } else {
          PrintChangedLines(now, summaries, last_lines);
        }
        std::fflush(stdout);
        Remember(std::move(status).value());
        if (flags_.until_complete && AllComplete(summaries)) return Status::Ok();
        if (flags_.until_complete) WC_RETURN_IF_ERROR(AbortedNewest(summaries));
        if (!last_error.empty()) log_.Info("the coordinator answers again");
        last_error.clear();
      } else if (coord::IsPermanentConnectError(status.status())) {
        return status.status();  // a reconnect refused: waiting will not help
      } else if (status.status().message() != last_error) {
        // Once per distinct error, not on every poll.
        log_.Warn("coordinator unreachable; retrying",
                  {{"coordinator", flags_.coordinator}, {"error", status.status().ToString()}});
        last_error = status.status().message();
      }
      if (Clock::now() >= deadline) {
        return DeadlineExceeded(
            "the newest version was not committed by every live agent within "
            "--timeout " +
            flags_.timeout);
      }
      if (!SleepUnlessInterrupted(interval)) {
        if (flags_.until_complete) return Aborted("interrupted before the rollout completed");
        return Status::Ok();
      }
    }
  }

 private:
  Result<std::unique_ptr<coord::CoordinatorClient>> Connect() {
    auto client =
        coord::CoordinatorClient::Connect(*transport_, flags_.coordinator, connect_timeout_);
    if (!client.ok()) {
      // The client already names the coordinator ("coordinator ADDR: ..."); say what failed.
      const std::string& why = client.status().message();
      return Status(client.status().code(),
                    why.starts_with("coordinator ")
                        ? "cannot reach " + why
                        : "cannot reach the coordinator at " + flags_.coordinator + ": " + why);
    }
    client.value()->set_timeout(connect_timeout_);
    return client;
  }

  // One GetStatus; after a failure the next call connects again (a coordinator that restarts
  // mid-rollout is followed, not fatal).
  Result<wire::FleetStatus> Poll() {
    if (client_ == nullptr) {
      WC_ASSIGN_OR_RETURN(client_, Connect());
    }
    auto status = client_->GetStatus(flags_.channel, /*include_left=*/true);
    if (!status.ok() && (status.status().code() == Code::kUnavailable ||
                         status.status().code() == Code::kDeadlineExceeded)) {
      client_.reset();
    }
    return status;
  }

  Status Once() {
    WC_ASSIGN_OR_RETURN(wire::FleetStatus now,
                        client_->GetStatus(flags_.channel, /*include_left=*/true));
    if (flags_.json) {
      WC_ASSIGN_OR_RETURN(std::string json, ToJson(now, flags_.all));
      std::printf("%s\n", json.c_str());
    } else {
      std::fputs(RenderStatus(now, nullptr, OnceOptions(flags_)).c_str(), stdout);
    }
    std::fflush(stdout);
    if (!flags_.channel.empty()) {
      bool known = false;
      for (const wire::ChannelLog& log : now.channels()) known |= log.channel() == flags_.channel;
      if (!known)
        return NotFound("channel '" + flags_.channel + "' is not known to the coordinator");
    }
    const std::vector<ChannelSummary> summaries = Summarize(now, nullptr, flags_.channel);
    if (flags_.until_complete && !AllComplete(summaries)) {
      WC_RETURN_IF_ERROR(AbortedNewest(summaries));
      return FailedPrecondition("the newest version is not committed by every live agent yet");
    }
    return Status::Ok();
  }

  // Rates over a few seconds are steadier than over one poll: the oldest snapshot kept.
  // --until-complete cannot hold while a channel's newest version is aborted (deadline,
  // superseded, rolled back past): kAborted with the coordinator's reason.
  static Status AbortedNewest(const std::vector<ChannelSummary>& summaries) {
    for (const ChannelSummary& s : summaries) {
      if (s.version != 0 && !s.complete() && s.entry.decision() == wire::DECISION_ABORT) {
        return Aborted("channel " + s.channel + ": v" + std::to_string(s.version) +
                       " was aborted: " + s.entry.abort_reason());
      }
    }
    return Status::Ok();
  }

  const wire::FleetStatus* EarlierSnapshot(const wire::FleetStatus& now) const {
    for (const wire::FleetStatus& s : history_) {
      if (s.now_unix_ms() < now.now_unix_ms()) return &s;
    }
    return nullptr;
  }
  void Remember(wire::FleetStatus status) {
    history_.push_back(std::move(status));
    const uint64_t newest = history_.back().now_unix_ms();
    while (history_.size() > 1 && history_.front().now_unix_ms() + kRateWindowMs < newest) {
      history_.pop_front();
    }
  }

  // Rows left for the fleet table once the header and channel blocks are drawn.
  static size_t TableRows(TerminalSize size, size_t channels) {
    const int used = 4 + static_cast<int>(channels) * 6;
    return static_cast<size_t>(std::max(5, size.rows - used));
  }

  // Without a terminal: a timestamped summary line per channel, only when it changed, so a log
  // file gets the story without a line per poll.
  static void PrintChangedLines(const wire::FleetStatus& now,
                                const std::vector<ChannelSummary>& summaries,
                                std::vector<std::string>& last) {
    std::vector<std::string> lines;
    for (const ChannelSummary& s : summaries) lines.push_back(RenderSummaryLine(s));
    if (lines.empty()) lines.push_back("no channels yet");
    if (lines == last) return;
    const std::string ts = metrics::FormatTimestamp(
        std::chrono::system_clock::time_point(std::chrono::milliseconds(now.now_unix_ms())));
    for (const std::string& line : lines) std::printf("%s %s\n", ts.c_str(), line.c_str());
    last = std::move(lines);
  }

  static constexpr uint64_t kRateWindowMs = 3000;

  const StatusFlags& flags_;
  std::unique_ptr<net::Transport> transport_;
  metrics::Logger log_;
  Clock::duration connect_timeout_{};
  std::unique_ptr<coord::CoordinatorClient> client_;
  std::deque<wire::FleetStatus> history_;
};

Status RunStatus(const StatusFlags& flags) {
  if (!flags.channel.empty()) WC_RETURN_IF_ERROR(ValidateChannelName(flags.channel));
  if (flags.from.empty() == flags.coordinator.empty()) {
    return InvalidArgument("give either --coordinator or --from, not both or neither");
  }
  if (!flags.from.empty()) return DrawSaved(flags);
  WC_ASSIGN_OR_RETURN(metrics::LogFormat format, metrics::ParseLogFormat(flags.node.log_format));
  WC_RETURN_IF_ERROR(ValidateCoordinatorFlag("--coordinator", flags.coordinator));
  WC_ASSIGN_OR_RETURN(auto interval, ParseDuration(flags.interval));
  if (interval < std::chrono::milliseconds(50)) {
    return InvalidArgument("--interval must be at least 50ms");
  }
  WC_ASSIGN_OR_RETURN(auto timeout, ParseDuration(flags.timeout));
  WC_ASSIGN_OR_RETURN(auto connect_timeout, ParseDuration(flags.connect_timeout));
  if (connect_timeout <= std::chrono::nanoseconds::zero()) {
    return InvalidArgument("--connect-timeout must be above 0");
  }
  if (timeout > std::chrono::nanoseconds::zero() && !flags.until_complete) {
    return InvalidArgument("--timeout only applies with --until-complete");
  }
  metrics::Logger log("status", format);
  if (flags.verbose) log.set_min_level(metrics::LogLevel::kDebug);

  WC_ASSIGN_OR_RETURN(net::Options options, ToolTransportOptions(flags.node));
  // The transport's lines (a refused connect, a failed handshake) repeat what the error says;
  // shown with --verbose only.
  options.log = [log](std::string_view line) { log.Debug(line); };
  WC_ASSIGN_OR_RETURN(auto transport, net::TcpTransport::Create(std::move(options), 1));

  InstallInterruptHandler();
  StatusCommand command(flags, std::move(transport), log);
  return command.Run(std::chrono::duration_cast<Clock::duration>(interval),
                     std::chrono::duration_cast<Clock::duration>(timeout),
                     std::chrono::duration_cast<Clock::duration>(connect_timeout));
}

void SetupStatus(CLI::App& app) {
  auto flags = std::make_shared<StatusFlags>();
  CLI::App* cmd = app.add_subcommand(
      "status",
      "Live progress of a rollout: progress bars per channel (bytes, chunks, nodes done, "
      "throughput, ETA) and a fleet table, polled from the coordinator");
  cmd->footer(
      "Examples:\n"
      "  weightcast status --coordinator 127.0.0.1:7000                 # live view, Ctrl-C to "
      "quit\n"
      "  weightcast status --coordinator 127.0.0.1:7000 --once          # one snapshot\n"
      "  weightcast status --coordinator 127.0.0.1:7000 --once --json | jq .nodes\n"
      "  weightcast status --coordinator 127.0.0.1:7000 --once --nodes   # every node's row\n"
      "  weightcast status --from saved.json --nodes                    # a saved snapshot\n"
      "  weightcast status --coordinator 127.0.0.1:7000 --channel policy --until-complete "
      "--timeout 10m\n"
      "On a terminal the view is redrawn in place; otherwise one line per channel is printed each "
      "time it changes. Exit status: 0 ok (with --until-complete: every live agent following the "
      "channel committed its newest version), 1 unreachable coordinator, refused handshake "
      "(wrong secret or cluster), timeout or interrupt, or with --until-complete a newest version "
      "the rollout aborted (\"vN was aborted: <reason>\"), 2 bad flags.");
  cmd->add_option("--coordinator", flags->coordinator,
                  "Coordinator address, ip:port (several, A,B,C: the leader is followed)");
  cmd->add_option("--from", flags->from,
                  "Draw a status saved with `--once --json` (--all to keep the nodes that left) "
                  "from this file, once, instead of asking a coordinator");
  cmd->add_option("--channel", flags->channel, "Only this channel (default: every channel)");
  cmd->add_flag("--once", flags->once, "Print one snapshot and exit");
  cmd->add_flag("--all", flags->all,
                "Also list the nodes that left the fleet on purpose (a finished publish, a "
                "stopped agent); hidden by default");
  cmd->add_flag("--nodes", flags->nodes,
                "List every node in the fleet table; above 32 nodes the view otherwise shows a "
                "summary (counts by state, progress histogram, least advanced nodes, racks)");
  cmd->add_flag("--json", flags->json,
                "Print the coordinator's FleetStatus as JSON (one object per line per poll)");
  cmd->add_flag("--until-complete", flags->until_complete,
                "Exit 0 once every live agent following the channel(s) has the newest version "
                "committed, or, after a rollback, the version rolled back to");
  cmd->add_option("--interval", flags->interval, "Time between polls (e.g. 500ms, 2s)")
      ->capture_default_str();
  cmd->add_option("--timeout", flags->timeout,
                  "With --until-complete: give up (exit 1) after this long; 0 waits forever")
      ->capture_default_str();
  cmd->add_option("--connect-timeout", flags->connect_timeout,
                  "How long to wait for the coordinator to answer")
      ->capture_default_str();
  AddNodeFlags(cmd, flags->node);
  cmd->add_flag("-v,--verbose", flags->verbose, "Also log the transport's connection events");
  cmd->callback([flags] { Finish("status", RunStatus(*flags)); });
}

const CommandRegistration kRegistered{"status", 14, &SetupStatus};

}  // namespace
}  // namespace weightcast::cli
