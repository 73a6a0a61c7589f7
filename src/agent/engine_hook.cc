#include "agent/engine_hook.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "util/host_port.h"
#include "util/text.h"

extern char** environ;

namespace weightcast::agent {
namespace {

constexpr size_t kTailBytes = 2048;

// Keeps the last kTailBytes of what a hook printed or answered, for the failure message.
void AppendTail(std::string& tail, std::string_view more) {
  tail.append(more);
  if (tail.size() > kTailBytes) tail.erase(0, tail.size() - kTailBytes);
}

std::string Describe(std::string_view tail) {
  std::string t(tail);
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  if (t.empty()) return "";
  return ": " + EscapeControlBytes(t);
}

}  // namespace

Result<EngineHook> EngineHook::Create(EngineHookOptions options) {
  if (options.timeout <= std::chrono::milliseconds::zero()) {
    return InvalidArgument("hook timeout must be positive");
  }
  EngineHook hook(std::move(options));
  const std::string& url = hook.options_.url;
  if (url.empty()) return hook;
  auto bad = [&](std::string_view why) {
    return InvalidArgument("hook URL '" + EscapeControlBytes(url) + "': " + std::string(why) +
                           " (want http://host[:port][/path])");
  };
  constexpr std::string_view kScheme = "http://";
  if (!std::string_view(url).starts_with(kScheme)) return bad("only http:// is supported");
  std::string_view rest = std::string_view(url).substr(kScheme.size());
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) hook.path_ = std::string(rest.substr(slash));
  Result<HostPort> parsed = ParseHostPort(authority, PortRule::kOptional);
  if (!parsed.ok()) return bad(parsed.status().message());
  if (parsed->port == 0) return bad("port 0");
  hook.port_ = parsed->port.value_or(hook.port_);
  hook.host_ = parsed->host;
  return hook;
}

Status EngineHook::Run(std::string_view channel, Version version,
                       const std::filesystem::path& dir) const {
  if (!options_.command.empty()) WC_RETURN_IF_ERROR(RunCommand(channel, version, dir));
  if (!options_.url.empty()) WC_RETURN_IF_ERROR(Post(channel, version, dir));
  return Status::Ok();
}

Status EngineHook::RunCommand(std::string_view channel, Version version,
                              const std::filesystem::path& dir) const {
  const std::string version_text = std::to_string(version.value());
  // Everything the child needs is built before fork: after it only async-signal-safe calls.
  // "$@" appends the three arguments; a command that does not want them can end with '#'.
  const std::string script = options_.command + " \"$@\"";
  const std::string channel_str(channel);
  const std::string dir_str = dir.string();
  std::vector<const char*> argv = {"/bin/sh",           "-c",
                                   script.c_str(),      "weightcast-hook",
                                   channel_str.c_str(), version_text.c_str(),
                                   dir_str.c_str(),     nullptr};
  std::vector<std::string> env_storage = {"WEIGHTCAST_CHANNEL=" + channel_str,
                                          "WEIGHTCAST_VERSION=" + version_text,
                                          "WEIGHTCAST_DIR=" + dir_str};
  std::vector<const char*> envp;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "WEIGHTCAST_CHANNEL=", 19) == 0 ||
        std::strncmp(*e, "WEIGHTCAST_VERSION=", 19) == 0 ||
        std::strncmp(*e, "WEIGHTCAST_DIR=", 15) == 0) {
      continue;
    }
    envp.push_back(*e);
  }
  for (const std::string& e : env_storage) envp.push_back(e.c_str());
  envp.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("hook: pipe", errno);
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(fds[0]);
    close(fds[1]);
    return ErrnoStatus("hook: fork", err);
  }
  if (pid == 0) {
    setpgid(0, 0);  // its own group, so a timeout kills what it started as well
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execve("/bin/sh", const_cast<char* const*>(argv.data()), const_cast<char* const*>(envp.data()));
    _exit(127);
  }
  setpgid(pid, pid);  // also here: whichever runs first
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);

  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  std::string tail;
  int wstatus = 0;
  bool exited = false;
  bool timed_out = false;
  char buf[4096];
  auto drain = [&] {
    for (;;) {
      ssize_t n = read(fds[0], buf, sizeof(buf));
      if (n <= 0) return;
      AppendTail(tail, std::string_view(buf, static_cast<size_t>(n)));
    }
  };
  while (!exited) {
    pollfd p{fds[0], POLLIN, 0};
    poll(&p, 1, 20);
    drain();
    pid_t r = waitpid(pid, &wstatus, WNOHANG);
    if (r == pid) {
      exited = true;
    } else if (std::chrono::steady_clock::now() >= deadline) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      exited = true;
      timed_out = true;
    }
  }
  drain();  // what it printed just before exiting (a background child may keep the pipe open)
  close(fds[0]);

  const std::string what = "hook command '" + EscapeControlBytes(options_.command) + "'";
  if (timed_out) {
    return DeadlineExceeded(what + " did not finish within " +
                            std::to_string(options_.timeout.count()) + " ms" + Describe(tail));
  }
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return Status::Ok();
  if (WIFEXITED(wstatus)) {
    return Aborted(what + " exited with status " + std::to_string(WEXITSTATUS(wstatus)) +
                   Describe(tail));
  }
  return Aborted(what + " was killed by signal " + std::to_string(WTERMSIG(wstatus)) +
                 Describe(tail));
}

Status EngineHook::Post(std::string_view channel, Version version,
                        const std::filesystem::path& dir) const {
  nlohmann::json body = {
      {"channel", std::string(channel)}, {"version", version.value()}, {"dir", dir.string()}};
  httplib::Client client(host_, port_);
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(options_.timeout);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(options_.timeout - seconds);
  client.set_connection_timeout(seconds.count(), micros.count());
  client.set_read_timeout(seconds.count(), micros.count());
  client.set_write_timeout(seconds.count(), micros.count());
  const std::string what = "hook POST " + EscapeControlBytes(options_.url);
  httplib::Result res = client.Post(path_, body.dump(), "application/json");
  if (!res) {
    return Unavailable(what + ": " + httplib::to_string(res.error()));
  }
  if (res->status < 200 || res->status >= 300) {
    std::string tail;
    AppendTail(tail, res->body);
    return Aborted(what + " answered HTTP " + std::to_string(res->status) + Describe(tail));
  }
  return Status::Ok();
}

}  // namespace weightcast::agent
