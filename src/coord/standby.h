// What a standby coordinator serves while another one leads: every request on its
// listener is answered with kUnavailable "standby coordinator: the leader is at ADDR", reason
// kStandby and the leader's address in the error's own field, the refusal CoordinatorClient
// follows to the leader (coord/client.h, standby_leader()). It keeps no state and never decides
// anything.
//
// Thread-safe; Stop() any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <weightcast/status.h>

#include "net/transport.h"

namespace weightcast::coord {

// The message a standby refuses with, and the leader it names ("" when none is known).
std::string StandbyRefusal(std::string_view leader);

class StandbyServer {
 public:
  // Starts serving `listener` on threads of its own; `leader()` names the leader of the moment.
  static std::unique_ptr<StandbyServer> Start(std::unique_ptr<net::Listener> listener,
                                              std::function<std::string()> leader);
  // Closes the listener and every connection, and joins the threads.
  ~StandbyServer();
  void Stop();

 private:
  struct State;
  explicit StandbyServer(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace weightcast::coord
