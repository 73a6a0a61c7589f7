#include "client/agent_runner.h"

#include <utility>

namespace weightcast::client {

Result<std::unique_ptr<AgentRunner>> AgentRunner::Start(agent::AgentOptions options,
                                                        std::function<void()> on_exit) {
  WC_ASSIGN_OR_RETURN(std::unique_ptr<agent::Agent> agent,
                      agent::Agent::Create(std::move(options)));
  std::unique_ptr<AgentRunner> runner(new AgentRunner(std::move(agent)));
  AgentRunner* self = runner.get();
  runner->thread_ = std::thread([self, on_exit = std::move(on_exit)] {
    Status status = self->agent_->Run();
    {
      std::lock_guard lock(self->mu_);
      self->exited_ = true;
      self->status_ = std::move(status);
    }
    if (on_exit) on_exit();
  });
  return runner;
}

AgentRunner::~AgentRunner() { Stop(); }

bool AgentRunner::exited() const {
  std::lock_guard lock(mu_);
  return exited_;
}

Status AgentRunner::failure() const {
  std::lock_guard lock(mu_);
  return status_;
}

void AgentRunner::Stop() {
  agent_->Stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace weightcast::client
