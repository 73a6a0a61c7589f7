#include "coord/standby.h"

#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "coord/envelope.h"

namespace weightcast::coord {

std::string StandbyRefusal(std::string_view leader) {
  if (leader.empty()) return "standby coordinator: no leader is elected yet";
  return "standby coordinator: the leader is at " + std::string(leader);
}

struct StandbyServer::State {
  std::unique_ptr<net::Listener> listener;
  std::function<std::string()> leader;
  std::thread acceptor;
  std::mutex mu;
  bool stopping = false;
  uint64_t next = 1;
  std::map<uint64_t, std::shared_ptr<net::Connection>> connections;
  std::map<uint64_t, std::thread> threads;
  std::vector<uint64_t> finished;  // threads that ended, to join

  // With mu held: joins the connection threads that ended (so that they do not pile up).
  void ReapLocked() {
    for (uint64_t id : finished) {
      auto it = threads.find(id);
      if (it == threads.end()) continue;
      it->second.join();
      threads.erase(it);
    }
    finished.clear();
  }

  void Serve(net::Connection& connection) {
    while (true) {
      // A client that says nothing for long is gone; nobody needs to hold a standby open.
      auto frame = connection.Receive(std::chrono::seconds(30));
      if (!frame.ok() || frame->type != net::FrameType::kControl) return;
      auto request = ParseEnvelope(frame->body);
      if (!request.ok()) return;
      if (request->has_heartbeat() && request->heartbeat().wake()) continue;  // never answered
      wire::Envelope reply;
      reply.set_request_id(request->request_id());
      const std::string at = leader();
      *reply.mutable_error() =
          ErrorFromStatus(Unavailable(StandbyRefusal(at)).WithReason(Reason::kStandby));
      reply.mutable_error()->set_leader(at);
      auto bytes = EncodeEnvelope(reply);
      if (!bytes.ok() || !connection.SendControl(*bytes, std::chrono::seconds(2)).ok()) return;
    }
  }
};

StandbyServer::StandbyServer(std::shared_ptr<State> state) : state_(std::move(state)) {}

std::unique_ptr<StandbyServer> StandbyServer::Start(std::unique_ptr<net::Listener> listener,
                                                    std::function<std::string()> leader) {
  auto state = std::make_shared<State>();
  state->listener = std::move(listener);
  state->leader = std::move(leader);
  State* s = state.get();
  state->acceptor = std::thread([s] {
    while (true) {
      auto accepted = s->listener->Accept(net::kForever);
      if (!accepted.ok()) return;
      std::shared_ptr<net::Connection> connection(std::move(accepted).value());
      std::lock_guard lock(s->mu);
      if (s->stopping) {
        connection->Close();
        return;
      }
      s->ReapLocked();
      const uint64_t id = s->next++;
      s->connections[id] = connection;
      s->threads.emplace(id, std::thread([s, id, connection] {
                           s->Serve(*connection);
                           connection->Close();
                           std::lock_guard inner(s->mu);
                           s->connections.erase(id);
                           s->finished.push_back(id);
                         }));
    }
  });
  return std::unique_ptr<StandbyServer>(new StandbyServer(std::move(state)));
}

StandbyServer::~StandbyServer() { Stop(); }

void StandbyServer::Stop() {
  if (state_ == nullptr) return;
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
    for (auto& [id, connection] : state_->connections) connection->Close();
  }
  state_->listener->Close();
  if (state_->acceptor.joinable()) state_->acceptor.join();
  std::map<uint64_t, std::thread> threads;
  {
    std::lock_guard lock(state_->mu);
    threads.swap(state_->threads);
  }
  for (auto& [id, thread] : threads) thread.join();
  state_.reset();
}

}  // namespace weightcast::coord
