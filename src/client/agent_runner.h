// An agent::Agent running inside this process, on a thread of its own, for a Subscriber with a
// coordinator.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "agent/daemon.h"

namespace weightcast::client {

class AgentRunner {
 public:
  // Creates the agent (kInvalidArgument for bad options) and starts Agent::Run on a thread.
  // `on_exit` is called on that thread when Run returns, whatever its status.
  static Result<std::unique_ptr<AgentRunner>> Start(agent::AgentOptions options,
                                                    std::function<void()> on_exit);
  // Stop().
  ~AgentRunner();
  AgentRunner(const AgentRunner&) = delete;
  AgentRunner& operator=(const AgentRunner&) = delete;

  // Whether Run returned, and the status it returned (OK while it runs).
  bool exited() const;
  Status failure() const;

  node::SwarmProgress progress() const { return agent_->progress(); }
  std::string address() const { return agent_->address(); }
  PeerId id() const { return agent_->id(); }
  Status coordinator_error() const { return agent_->coordinator_error(); }
  bool registered() const { return agent_->registered(); }
  void PreferChunks(Version version, std::vector<ChunkIndex> order) {
    agent_->PreferChunks(version, std::move(order));
  }
  void SetLiveBase(Version version, const Digest& root) { agent_->SetLiveBase(version, root); }
  void ReportAttestation(Version version, std::span<const uint8_t> digest) {
    agent_->ReportAttestation(version, digest);
  }

  // Makes Run return and joins its thread. Blocks until the agent has stopped. Idempotent.
  void Stop();

 private:
  explicit AgentRunner(std::unique_ptr<agent::Agent> agent) : agent_(std::move(agent)) {}

  std::unique_ptr<agent::Agent> agent_;
  std::thread thread_;
  mutable std::mutex mu_;
  bool exited_ = false;
  Status status_;
};

}  // namespace weightcast::client
