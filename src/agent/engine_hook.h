// The hand-off to the inference engine (docs/rollout.md): after a version becomes
// current on this node, the agent runs the configured hook so that the engine loads it (for
// example SGLang's update_weights_from_disk or a vLLM reload), and reports the result.
//
// Two kinds, either or both (the command first):
// - a command, run by /bin/sh -c with the channel, the version and the version's directory as
//   positional arguments ($1 $2 $3) and in the environment (WEIGHTCAST_CHANNEL,
//   WEIGHTCAST_VERSION, WEIGHTCAST_DIR); exit status 0 is success;
// - an HTTP POST to a URL (http:// only) with the JSON body
//   {"channel": "...", "version": N, "dir": "..."}; a 2xx status is success.
// A failure's Status carries the exit status or HTTP status and the tail of what the command
// printed or the server answered. Retries and what a failure triggers are the caller's policy
// (rollout::Participant).
//
// Thread-safety: Run is const and may be called from several threads at once. Run blocks until
// the hook finishes or `timeout` passes; a command still running then is killed (its whole
// process group) and the result is kDeadlineExceeded.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <weightcast/status.h>
#include <weightcast/types.h>

namespace weightcast::agent {

struct EngineHookOptions {
  std::string command;  // empty: none
  std::string url;      // empty: none
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
};

class EngineHook {
 public:
  // kInvalidArgument for a URL that is not http://host[:port][/path] or a non-positive timeout.
  static Result<EngineHook> Create(EngineHookOptions options);

  bool enabled() const { return !options_.command.empty() || !options_.url.empty(); }
  const EngineHookOptions& options() const { return options_; }

  // Runs the hook for `version` of `channel`, whose files are in `dir`. OK when no hook is
  // configured.
  Status Run(std::string_view channel, Version version, const std::filesystem::path& dir) const;

 private:
  explicit EngineHook(EngineHookOptions options) : options_(std::move(options)) {}
  Status RunCommand(std::string_view channel, Version version,
                    const std::filesystem::path& dir) const;
  Status Post(std::string_view channel, Version version, const std::filesystem::path& dir) const;

  EngineHookOptions options_;
  std::string host_;
  int port_ = 80;
  std::string path_ = "/";
};

}  // namespace weightcast::agent
