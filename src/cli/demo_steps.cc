#include "cli/demo_steps.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/status_view.h"
#include "coord/client.h"
#include "format/safetensors.h"
#include "manifest/builder.h"
#include "net/tcp_transport.h"
#include "node/certificate_mode.h"
#include "store/store.h"
#include "synth/model.h"
#include "trust/authority.h"
#include "util/file.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

namespace fs = std::filesystem;
namespace wire = coord::wire;
using Clock = std::chrono::steady_clock;
constexpr std::string_view kChannel = "policy";
// The publisher keeps one node id across its runs (one per version), so the fleet sees one
// source that comes back rather than a new one each time.
constexpr uint64_t kPublisherNodeId = 1000;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string Fixed(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

fs::path StepDir(const fs::path& trainer, uint64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%04llu", static_cast<unsigned long long>(step));
  return trainer / name;
}

// The processes the demo starts, each with its output in a log file. Whatever happens, every one
// still running is stopped when the group goes away: SIGTERM, then SIGKILL after a grace period.
// Children also get SIGTERM if the demo itself dies (PR_SET_PDEATHSIG), so none is left behind.
class ProcessGroup {
 public:
  ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  ~ProcessGroup() { StopAll(); }

  // `daemon`: a process that should run until the group stops it (see FirstDaemonExited).
  Result<pid_t> Start(const std::string& name, const fs::path& exe,
                      const std::vector<std::string>& args, const fs::path& log, bool daemon) {
    std::vector<std::string> argv_strings = {exe.string()};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_strings) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) return ErrnoStatus("open(" + log.string() + ")", errno);
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      ::close(log_fd);
      if (null_fd >= 0) ::close(null_fd);
      return ErrnoStatus("fork", err);
    }
    if (pid == 0) {
      // Only async-signal-safe calls between fork and exec.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(126);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the demo blocks SIGINT/SIGTERM; not them
      if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(log_fd);
    if (null_fd >= 0) ::close(null_fd);
    children_.push_back({name, pid, log, daemon, std::nullopt});
    return pid;
  }

  // The exit status once the process ended (reaped here), else nothing.
  std::optional<int> Poll(pid_t pid) {
    Child* c = Find(pid);
    if (c == nullptr) return std::nullopt;
    if (!c->status.has_value()) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) c->status = status;
    }
    return c->status;
  }

  // Waits up to `timeout` for the process to end; its exit status, or kDeadlineExceeded.
  Result<int> Wait(pid_t pid, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      if (std::optional<int> status = Poll(pid)) return *status;
      if (Clock::now() >= deadline) {
        return DeadlineExceeded(Name(pid) + " did not exit in " + std::to_string(timeout.count()) +
                                " ms");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // The first daemon of the group that ended, if any.
  std::optional<std::string> FirstDaemonExited() {
    for (Child& c : children_) {
      if (!c.daemon) continue;
      if (Poll(c.pid).has_value()) return c.name + " exited (" + Describe(*c.status) + ")";
    }
    return std::nullopt;
  }

  void StopAll() {
    for (Child& c : children_) {
      if (!Poll(c.pid).has_value()) ::kill(c.pid, SIGTERM);
    }
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    for (Child& c : children_) {
      while (!Poll(c.pid).has_value() && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!Poll(c.pid).has_value()) {
        ::kill(c.pid, SIGKILL);
        int status = 0;
        if (::waitpid(c.pid, &status, 0) == c.pid) c.status = status;
      }
    }
  }

  std::string Name(pid_t pid) {
    Child* c = Find(pid);
    return c ? c->name : "pid " + std::to_string(pid);
  }

  // The last lines of every log, for an error report.
  std::string LogTails(size_t lines) const {
    std::string out;
    for (const Child& c : children_) {
      Result<std::string> text = ReadFileToString(c.log);
      if (!text.ok()) continue;
      std::vector<std::string_view> all;
      std::string_view rest = *text;
      while (!rest.empty()) {
        size_t nl = rest.find('\n');
        all.push_back(rest.substr(0, nl));
        if (nl == std::string_view::npos) break;
        rest.remove_prefix(nl + 1);
      }
      out += "--- " + c.name + " (" + c.log.string() + ", last lines)\n";
      for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) {
        out += std::string(all[i]) + "\n";
      }
    }
    return out;
  }

  static std::string Describe(int status) {
    if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return std::string("killed by ") + strsignal(WTERMSIG(status));
    return "status " + std::to_string(status);
  }

 private:
  struct Child {
    std::string name;
    pid_t pid;
    fs::path log;
    bool daemon;
    std::optional<int> status;
  };
  Child* Find(pid_t pid) {
    for (Child& c : children_) {
      if (c.pid == pid) return &c;
    }
    return nullptr;
  }
  std::vector<Child> children_;
};

bool Stopping(const std::atomic<bool>* stop) { return stop != nullptr && stop->load(); }

Status Interrupted() { return Aborted("interrupted; every process the demo started is stopped"); }

// Waits for a daemon's --address-file.
Result<std::string> WaitForAddress(ProcessGroup& group, pid_t pid, const fs::path& file,
                                   const std::atomic<bool>* stop) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (;;) {
    Result<std::string> text = ReadFileToString(file, 4096);
    if (text.ok()) {
      std::string address = *text;
      while (!address.empty() && (address.back() == '\n' || address.back() == ' ')) {
        address.pop_back();
      }
      if (!address.empty()) return address;
    }
    if (std::optional<int> status = group.Poll(pid)) {
      return Unavailable(group.Name(pid) + " exited before listening (" +
                         ProcessGroup::Describe(*status) + ")");
    }
    if (Stopping(stop)) return Interrupted();
    if (Clock::now() >= deadline) {
      return DeadlineExceeded(group.Name(pid) + " wrote no address to " + file.string());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Result<std::string> NewSecret() {
  std::random_device rd;
  std::vector<uint8_t> bytes(32);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rd());
  return ToHex(bytes);
}

Status WriteSecretFile(const fs::path& path) {
  WC_ASSIGN_OR_RETURN(std::string secret, NewSecret());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("open(" + path.string() + ")", errno);
  secret += '\n';
  Status st = WriteAll(fd, AsBytes(secret), path.string());
  ::close(fd);
  return st;
}

// Compares two files byte for byte through mmap.
Result<bool> SameBytes(const fs::path& a, const fs::path& b) {
  WC_ASSIGN_OR_RETURN(MappedFile fa, MappedFile::Open(a));
  WC_ASSIGN_OR_RETURN(MappedFile fb, MappedFile::Open(b));
  if (fa.size() != fb.size()) return false;
  auto x = fa.bytes(), y = fb.bytes();
  return std::equal(x.begin(), x.end(), y.begin());
}

// Every file the manifest lists is byte-identical under both roots.
Result<bool> SameVersionFiles(const Manifest& manifest, const fs::path& a, const fs::path& b) {
  for (const ManifestFile& file : manifest.files) {
    WC_ASSIGN_OR_RETURN(bool same, SameBytes(a / file.path, b / file.path));
    if (!same) return false;
  }
  return true;
}

// Times a plain recursive copy of `dir`, the reference a transfer is compared with.
Result<double> TimePlainCopy(const fs::path& dir, const fs::path& scratch) {
  std::error_code ec;
  fs::remove_all(scratch, ec);
  auto start = Clock::now();
  fs::copy(dir, scratch, fs::copy_options::recursive, ec);
  if (ec) return IoError("copy " + dir.string() + ": " + ec.message());
  // Include the writeback, as a transfer that commits (fsyncs) its files does.
  for (const auto& entry : fs::recursive_directory_iterator(scratch, ec)) {
    if (entry.is_regular_file()) WC_RETURN_IF_ERROR(FsyncPath(entry.path()));
  }
  double seconds = SecondsSince(start);
  fs::remove_all(scratch, ec);
  return seconds;
}

// One row of the final table.
struct VersionRow {
  uint64_t version = 0;
  uint64_t base_version = 0;  // 0: full
  uint64_t model_bytes = 0;
  uint64_t payload_bytes = 0;  // what one agent holding the base needs (0: full)
  uint64_t wire_bytes = 0;     // received by all agents, from their heartbeats
  double changed_fraction = 0;
  double publish_seconds = 0;     // publisher start -> version logged (hash, encode, import)
  double distribute_seconds = 0;  // logged -> every agent committed
  double copy_seconds = 0;        // one plain copy of the same files, same run
  bool identical = false;
};

const wire::VersionEntry* FindEntry(const wire::FleetStatus& status, uint64_t version) {
  for (const wire::ChannelLog& log : status.channels()) {
    if (log.channel() != kChannel) continue;
    for (const wire::VersionEntry& e : log.versions()) {
      if (e.version() == version) return &e;
    }
  }
  return nullptr;
}

// Wire bytes the agents (not sources) report having received for `version`.
uint64_t AgentBytesReceived(const wire::FleetStatus& status, uint64_t version) {
  uint64_t total = 0;
  for (const wire::NodeStatus& node : status.nodes()) {
    if (node.source()) continue;
    for (const wire::ChannelProgress& ch : node.channels()) {
      if (ch.channel() == kChannel && ch.version() == version) total += ch.bytes_received();
    }
  }
  return total;
}

uint32_t LiveAgents(const wire::FleetStatus& status) {
  uint32_t n = 0;
  for (const wire::NodeStatus& node : status.nodes()) n += !node.source() && node.alive();
  return n;
}

class Demo {
 public:
  Demo(const DemoConfig& config, std::ostream& out, const std::atomic<bool>* stop)
      : config_(config), out_(out), stop_(stop) {}

  Status Run();
  std::string LogTails() const { return group_.LogTails(15); }

 private:
  Status Synthesize();
  Status StartFleet();
  Status PublishVersion(uint64_t step, VersionRow& row);
  // Certificate mode (docs/security.md): a CA for the demo, and each node's certificate.
  Status IssueCertificates();
  std::vector<std::string> CertificateFlags(const std::string& node) const;
  Status CheckIdentical(uint64_t step, VersionRow& row);
  void PrintTable() const;
  Result<wire::FleetStatus> Poll();

  const DemoConfig& config_;
  std::ostream& out_;
  const std::atomic<bool>* stop_;
  fs::path work_ = config_.work_dir;
  fs::path trainer_ = work_ / "trainer";
  fs::path logs_ = work_ / "logs";
  fs::path secret_ = work_ / "cluster.secret";
  fs::path certs_ = work_ / "certificates";
  std::vector<synth::StepStats> steps_;
  ProcessGroup group_;
  pid_t coordinator_pid_ = 0;
  std::string coordinator_;
  std::unique_ptr<net::Transport> transport_;
  std::unique_ptr<coord::CoordinatorClient> client_;
  std::vector<VersionRow> rows_;
};

Status Demo::Synthesize() {
  auto start = Clock::now();
  synth::SynthModelOptions model_options;
  model_options.out_dir = StepDir(trainer_, 0);
  model_options.target_bytes = config_.model_bytes;
  model_options.seed = config_.seed;
  WC_ASSIGN_OR_RETURN(synth::SynthModelSummary model, synth::WriteSynthModel(model_options));
  out_ << "[1] trainer: " << model.tensors << " bf16 tensors, " << FormatBytes(model.file_bytes)
       << " in " << model.files.size() << " files (" << Fixed(SecondsSince(start)) << " s)\n";
  if (config_.steps > 0) {
    start = Clock::now();
    synth::SynthStepsOptions step_options;
    step_options.from = StepDir(trainer_, 0);
    step_options.out_dir = trainer_;
    step_options.steps = config_.steps;
    step_options.seed = config_.seed;
    if (config_.lr > 0) step_options.adam.lr = config_.lr;
    WC_ASSIGN_OR_RETURN(steps_, synth::WriteSynthSteps(step_options));
    out_ << "    " << steps_.size() << " RL-like steps (Adam, lr " << step_options.adam.lr
         << "), changed elements per step:";
    for (const auto& s : steps_) out_ << " " << Fixed(100 * s.changed_fraction()) << "%";
    out_ << " (" << Fixed(SecondsSince(start)) << " s)\n";
  }
  out_.flush();
  return Status::Ok();
}

Status Demo::IssueCertificates() {
  WC_ASSIGN_OR_RETURN(trust::Authority ca, trust::Authority::Create("weightcast demo CA"));
  WC_RETURN_IF_ERROR(ca.WriteNew(certs_ / "ca"));
  std::vector<std::pair<std::string, trust::IssueRequest>> nodes;
  nodes.push_back({"coordinator", {.name = "coordinator", .roles = {.coordinator = true}}});
  nodes.push_back({"publisher",
                   {.name = "trainer",
                    .roles = {.publisher_channels = {std::string(kChannel)}},
                    .node_id = kPublisherNodeId}});
  nodes.push_back({"operator", {.name = "demo operator", .roles = {.operator_role = true}}});
  for (uint32_t i = 1; i <= config_.agents; ++i) {
    const std::string name = "agent-" + std::to_string(i);
    nodes.push_back({name, {.name = name, .roles = {.agent = true}}});
  }
  for (const auto& [file, request] : nodes) {
    WC_ASSIGN_OR_RETURN(trust::IssuedCertificate issued, ca.Issue(request));
    WC_RETURN_IF_ERROR(WriteFileAtomic(certs_ / (file + ".pem"), issued.certificate_pem));
    WC_RETURN_IF_ERROR(WritePrivateFile(certs_ / (file + ".key"), issued.key_pem, true));
  }
  return Status::Ok();
}

std::vector<std::string> Demo::CertificateFlags(const std::string& node) const {
  return {"--ca",   (certs_ / "ca" / trust::kCaCertificateFile).string(),
          "--cert", (certs_ / (node + ".pem")).string(),
          "--key",  (certs_ / (node + ".key")).string()};
}

// Appends `flags` to `args`.
std::vector<std::string> With(std::vector<std::string> args,
                              const std::vector<std::string>& flags) {
  args.insert(args.end(), flags.begin(), flags.end());
  return args;
}

Status Demo::StartFleet() {
  WC_RETURN_IF_ERROR(WriteSecretFile(secret_));
  WC_RETURN_IF_ERROR(IssueCertificates());
  const fs::path address_file = work_ / "coordinator.address";
  WC_ASSIGN_OR_RETURN(
      coordinator_pid_,
      group_.Start("coordinator", config_.exe,
                   With({"coordinator", "--listen", "127.0.0.1:0", "--state-dir",
                         (work_ / "coordinator").string(), "--address-file", address_file.string(),
                         "--heartbeat-timeout", "3s", "--secret-file", secret_.string()},
                        CertificateFlags("coordinator")),
                   logs_ / "coordinator.log", /*daemon=*/true));
  WC_ASSIGN_OR_RETURN(coordinator_, WaitForAddress(group_, coordinator_pid_, address_file, stop_));
  for (uint32_t i = 1; i <= config_.agents; ++i) {
    const std::string name = "agent-" + std::to_string(i);
    WC_RETURN_IF_ERROR(
        group_
            .Start(name, config_.exe,
                   With({"agent", "--coordinator", coordinator_, "--store", (work_ / name).string(),
                         "--channel", std::string(kChannel), "--listen", "127.0.0.1:0",
                         "--secret-file", secret_.string()},
                        CertificateFlags(name)),
                   logs_ / (name + ".log"), /*daemon=*/true)
            .status());
  }
  net::Options options;
  options.self.cluster_id = "default";
  options.self.node_id = PeerId(std::random_device{}() | 1ull << 40);
  options.self.role = net::Role::kTool;
  WC_ASSIGN_OR_RETURN(options.secret, ReadFileToString(secret_, 4096));
  while (!options.secret.empty() && options.secret.back() == '\n') options.secret.pop_back();
  options.log = [](std::string_view) {};  // the demo prints its own view
  const std::vector<std::string> op = CertificateFlags("operator");
  WC_ASSIGN_OR_RETURN(node::CertificateMode certified,
                      node::LoadCertificateMode(op[1], {}, op[3], op[5]));
  options.tls = certified.tls;
  WC_ASSIGN_OR_RETURN(transport_, net::TcpTransport::Create(std::move(options), 1));
  WC_ASSIGN_OR_RETURN(client_, coord::CoordinatorClient::Connect(*transport_, coordinator_));

  // Every agent registered before the first version goes out, so all start together.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (;;) {
    WC_ASSIGN_OR_RETURN(wire::FleetStatus status, Poll());
    if (LiveAgents(status) >= config_.agents) break;
    if (Clock::now() >= deadline) {
      return DeadlineExceeded(std::to_string(LiveAgents(status)) + " of " +
                              std::to_string(config_.agents) + " agents registered in 30 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  out_ << "[2] fleet on loopback: coordinator " << coordinator_ << ", " << config_.agents
       << " agents (logs in " << logs_.string() << ")\n"
       << "    certificate mode: a CA and one certificate per node in " << certs_.string()
       << "; mutual TLS, versions signed by the trainer's key\n";
  out_.flush();
  return Status::Ok();
}

Result<wire::FleetStatus> Demo::Poll() {
  if (Stopping(stop_)) return Interrupted();
  if (std::optional<std::string> exited = group_.FirstDaemonExited()) {
    return Internal(*exited);
  }
  return client_->GetStatus(kChannel);
}

Status Demo::PublishVersion(uint64_t step, VersionRow& row) {
  const fs::path source = StepDir(trainer_, step);
  const uint64_t version = step + 1;
  row.version = version;
  row.changed_fraction = step == 0 ? 1.0 : steps_[step - 1].changed_fraction();
  WC_ASSIGN_OR_RETURN(row.copy_seconds, TimePlainCopy(source, work_ / "plain-copy"));

  const auto start = Clock::now();
  WC_ASSIGN_OR_RETURN(
      pid_t pid,
      group_.Start(
          "publish-v" + std::to_string(version), config_.exe,
          With({"publish", "--coordinator", coordinator_, "--store", (work_ / "publisher").string(),
                "--channel", std::string(kChannel), "--dir", source.string(), "--until", "complete",
                "--node-id", std::to_string(kPublisherNodeId), "--chunk-size", config_.chunk_size,
                "--secret-file", secret_.string()},
               CertificateFlags("publisher")),
          logs_ / ("publish-v" + std::to_string(version) + ".log"), /*daemon=*/false));
  out_ << "[3] v" << version << ": publishing " << source.filename().string()
       << (step == 0 ? " (full)" : " (delta against v" + std::to_string(version - 1) + ")") << "\n";
  out_.flush();

  // The per-version timeout scales with the size: a loaded CI machine is slow, not stuck.
  const auto deadline =
      start + std::chrono::seconds(120 + static_cast<int64_t>(config_.model_bytes >> 24));
  std::optional<Clock::time_point> logged_at;
  // Rates are taken against a snapshot about two seconds old: agents report once a second, so
  // two polls 100 ms apart usually see the same numbers.
  std::optional<wire::FleetStatus> earlier;
  auto earlier_at = Clock::now();
  TerminalRedraw redraw(config_.width);
  // Without a terminal: a line when another tenth of the bytes is done or another agent is,
  // and at least every 5 s.
  auto last_line = Clock::now();
  int64_t last_tenth = -1;
  uint32_t last_nodes_done = 0;
  for (;;) {
    Result<wire::FleetStatus> status = Poll();
    if (!status.ok()) return status.status();
    if (std::optional<int> exit = group_.Poll(pid); exit.has_value() && *exit != 0) {
      return Internal("the publisher of v" + std::to_string(version) + " failed (" +
                      ProcessGroup::Describe(*exit) + ")");
    }
    const wire::VersionEntry* entry = FindEntry(*status, version);
    if (entry != nullptr && !logged_at.has_value()) {
      logged_at = Clock::now();
      row.model_bytes = entry->total_bytes();
      row.base_version = entry->base_version();
      row.payload_bytes = entry->payload_bytes();
    }
    row.wire_bytes = std::max(row.wire_bytes, AgentBytesReceived(*status, version));
    std::vector<ChannelSummary> summary =
        Summarize(*status, earlier ? &*earlier : nullptr, kChannel);
    const bool done = logged_at.has_value() && !summary.empty() && summary[0].version == version &&
                      summary[0].complete() && summary[0].committed >= config_.agents;
    if (logged_at.has_value()) {
      if (config_.live_view) {
        out_ << redraw.Next(RenderStatus(*status, earlier ? &*earlier : nullptr,
                                         {.channel = std::string(kChannel),
                                          .width = config_.width,
                                          .max_table_rows = config_.agents + 1}));
        out_.flush();
      } else if (!summary.empty()) {
        const ChannelSummary& s = summary[0];
        const int64_t tenth =
            s.bytes_total ? static_cast<int64_t>(10 * s.bytes_done / s.bytes_total) : 0;
        if (done || tenth != last_tenth || s.nodes_done() != last_nodes_done ||
            SecondsSince(last_line) >= 5.0) {
          out_ << "    " << RenderSummaryLine(s) << "\n";
          out_.flush();
          last_line = Clock::now();
          last_tenth = tenth;
          last_nodes_done = s.nodes_done();
        }
      }
    }
    if (done) {
      row.distribute_seconds = SecondsSince(*logged_at);
      row.publish_seconds = std::chrono::duration<double>(*logged_at - start).count();
      break;
    }
    if (Clock::now() >= deadline) {
      return DeadlineExceeded("v" + std::to_string(version) + " did not reach every agent in " +
                              Fixed(SecondsSince(start), 0) + " s");
    }
    if (!earlier.has_value() || SecondsSince(earlier_at) >= 2.0) {
      earlier = std::move(*status);
      earlier_at = Clock::now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(config_.live_view ? 250 : 100));
  }
  // --until complete: the publisher sees the same and exits by itself.
  WC_ASSIGN_OR_RETURN(int exit, group_.Wait(pid, std::chrono::seconds(30)));
  if (exit != 0) {
    return Internal("the publisher of v" + std::to_string(version) + " ended with " +
                    ProcessGroup::Describe(exit));
  }
  return CheckIdentical(step, row);
}

// Every agent has the version current, and its files equal the publisher's (which equal the
// trainer's) byte for byte.
Status Demo::CheckIdentical(uint64_t step, VersionRow& row) {
  const Version version(row.version);
  WC_ASSIGN_OR_RETURN(Store publisher, Store::Open(work_ / "publisher", {.read_only = true}));
  WC_ASSIGN_OR_RETURN(Manifest manifest, publisher.GetManifest(kChannel, version));
  const fs::path reference = publisher.VersionPath(kChannel, version);
  WC_ASSIGN_OR_RETURN(row.identical,
                      SameVersionFiles(manifest, StepDir(trainer_, step), reference));
  for (uint32_t i = 1; row.identical && i <= config_.agents; ++i) {
    const fs::path root = work_ / ("agent-" + std::to_string(i));
    WC_ASSIGN_OR_RETURN(Store agent, Store::Open(root, {.read_only = true}));
    WC_ASSIGN_OR_RETURN(Version current, agent.Current(kChannel));
    if (current != version) {
      return Internal("agent-" + std::to_string(i) + " has v" + std::to_string(current.value()) +
                      " current, not v" + std::to_string(version.value()));
    }
    WC_ASSIGN_OR_RETURN(Manifest held, agent.GetManifest(kChannel, version));
    if (held.root != manifest.root) {
      return Internal("agent-" + std::to_string(i) + " holds another v" +
                      std::to_string(version.value()) + " (its root differs)");
    }
    WC_ASSIGN_OR_RETURN(
        row.identical, SameVersionFiles(manifest, reference, agent.VersionPath(kChannel, version)));
  }
  out_ << "    v" << row.version << " committed on all " << config_.agents << " agents in "
       << Fixed(row.distribute_seconds) << " s"
       << (row.identical ? ", every agent's files byte-identical to the publisher's"
                         : ", FILES DIFFER")
       << "\n";
  out_.flush();
  return Status::Ok();
}

void Demo::PrintTable() const {
  out_ << "\n version        model   on the wire (" << config_.agents
       << " agents)   ratio   changed   publish  distribute  plain copy  identical\n";
  for (const VersionRow& r : rows_) {
    char line[256];
    const double ratio =
        r.wire_bytes ? static_cast<double>(r.model_bytes) * config_.agents / r.wire_bytes : 0;
    std::snprintf(line, sizeof line,
                  " v%-4llu %-6s %10s %20s %8.1fx %8.2f%% %8.2fs %10.2fs %10.2fs  %s\n",
                  static_cast<unsigned long long>(r.version),
                  r.base_version ? ("<-v" + std::to_string(r.base_version)).c_str() : "full",
                  FormatBytes(r.model_bytes).c_str(), FormatBytes(r.wire_bytes).c_str(), ratio,
                  100 * r.changed_fraction, r.publish_seconds, r.distribute_seconds, r.copy_seconds,
                  r.identical ? "yes" : "NO");
    out_ << line;
  }
  out_ << "\n on the wire: chunk and delta payload bytes the agents received (their heartbeats);"
          "\n ratio: model bytes x agents / bytes on the wire; publish: hash, delta-encode and"
          "\n import at the publisher; distribute: logged by the coordinator -> committed on"
          "\n every agent; plain copy: one file copy of the same version (fsynced), same run.\n";
}

Status Demo::Run() {
  std::error_code ec;
  fs::remove_all(work_, ec);
  fs::create_directories(trainer_, ec);
  if (!ec) fs::create_directories(logs_, ec);
  if (ec) return IoError("create " + work_.string() + ": " + ec.message());
  out_ << "weightcast demo: a coordinator, a publisher and " << config_.agents
       << " agents on loopback, in " << work_.string() << "\n\n";
  WC_RETURN_IF_ERROR(Synthesize());
  WC_RETURN_IF_ERROR(StartFleet());
  for (uint64_t step = 0; step <= steps_.size(); ++step) {
    VersionRow row;
    WC_RETURN_IF_ERROR(PublishVersion(step, row));
    rows_.push_back(row);
  }
  PrintTable();
  bool all_identical = true;
  for (const VersionRow& r : rows_) all_identical = all_identical && r.identical;
  if (!all_identical) return Internal("an agent's files differ from the publisher's");
  out_ << "\nevery agent's files are byte-identical to the publisher's, for every version\n";
  return Status::Ok();
}

}  // namespace

Status RunDemo(const DemoConfig& config, std::ostream& out, const std::atomic<bool>* stop) {
  Status result;
  std::string tails;
  {
    Demo demo(config, out, stop);
    result = demo.Run();
    if (!result.ok() && result.code() != Code::kAborted) tails = demo.LogTails();
  }  // every process is stopped here
  if (!tails.empty()) std::cerr << tails;
  std::error_code ec;
  if (!config.keep && result.ok()) fs::remove_all(config.work_dir, ec);
  if (!result.ok() && !config.keep) {
    out << "(the work directory " << config.work_dir.string() << " is kept for its logs)\n";
  }
  return result;
}

}  // namespace weightcast::cli
