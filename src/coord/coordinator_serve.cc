// Serving connections (coordinator.h): the accept loop, and the event loop that answers every
// connection, each pushing its frames to it (TCP, UCX, in-memory).
// What a request does is Dispatch's, in coordinator.cc.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "coord/coordinator.h"
#include "coord/envelope.h"

namespace weightcast::coord {
namespace {

// The event loop answers every connection in turn: one that does not read must not stall the
// others long (as the pusher's). A reply blocks only when the node left a whole send
// queue (32 MiB by default) of replies unread.
constexpr net::Duration kLoopSendTimeout = std::chrono::milliseconds(200);

// Encodes and queues a reply (an Error in its place when it cannot be encoded); false: not
// queued within `timeout`.
bool SendReply(net::Connection& connection, const wire::Envelope& reply, net::Duration timeout) {
  auto bytes = EncodeEnvelope(reply);
  if (!bytes.ok()) {
    wire::Envelope error;
    error.set_request_id(reply.request_id());
    *error.mutable_error() = ErrorFromStatus(bytes.status());
    bytes = EncodeEnvelope(error);
  }
  return bytes.ok() && connection.SendControl(*bytes, timeout).ok();
}

std::string NodeName(PeerId id) { return "node " + std::to_string(id.value()); }

}  // namespace

void Coordinator::Serve(net::Listener& listener) {
  {
    std::lock_guard lock(sessions_mu_);
    if (stopping_) return;
    listener_ = &listener;
  }
  std::thread sweeper([this] {
    // Real time, whatever clock_ is: the sweeper only has to run often; what it decides is
    // measured on clock_.
    const auto period = std::max<net::Duration>(sweep_period_, std::chrono::milliseconds(10));
    std::unique_lock lock(sessions_mu_);
    while (!stopping_) {
      stop_cv_.wait_for(lock, period);
      if (stopping_) break;
      lock.unlock();
      Sweep();
      lock.lock();
    }
  });

  std::thread pusher([this] { PushLoop(); });
  std::thread loop([this] { EventLoop(); });

  while (true) {
    auto accepted = listener.Accept(net::kForever);
    if (!accepted.ok()) break;
    std::shared_ptr<net::Connection> connection(std::move(accepted).value());
    uint64_t session = 0;
    {
      std::lock_guard lock(sessions_mu_);
      if (stopping_) {
        connection->Close();
        break;
      }
      session = next_session_++;
      sessions_[session] = connection;
    }
    if (ServeOnLoop(session, connection)) continue;
    // Every transport pushes its frames; only a UCX connection with a download limit does not,
    // and a coordinator sets none. Such a connection would need a thread of its own: refused.
    options_.log(NodeName(connection->peer().node_id) +
                 ": its connection cannot push frames to the event loop; closing");
    connection->Close();
    Disconnected(session);
    std::lock_guard lock(sessions_mu_);
    sessions_.erase(session);
  }
  {
    std::lock_guard lock(sessions_mu_);
    stopping_ = true;
    listener_ = nullptr;
    for (auto& [session, connection] : sessions_) connection->Close();
  }
  stop_cv_.notify_all();
  sweeper.join();
  {
    // Every connection is closed: each one on the loop has its end queued (or coming from the
    // transport thread that saw it fail); the loop ends once it has handled them all.
    std::lock_guard lock(loop_mu_);
    loop_stop_ = true;
  }
  loop_cv_.notify_all();
  loop.join();
  {
    std::lock_guard lock(mu_);
    push_stop_ = true;
  }
  push_cv_.notify_all();
  pusher.join();
}

bool Coordinator::ServeOnLoop(uint64_t session,
                              const std::shared_ptr<net::Connection>& connection) {
  if (!connection->CanDeliverFrames()) return false;
  // The start goes first, so that the loop knows the session before any of its frames.
  PushEvent({.session = session, .started = connection, .frame = std::nullopt});
  // The handler holds no connection (the loop does, until the end): the connection's end is its
  // last call, and Serve does not return before every end was handled, so `this` outlives it.
  const bool pushing = connection->DeliverFrames([this, session](Result<net::Frame> frame) {
    PushEvent({.session = session, .started = nullptr, .frame = std::move(frame)});
  });
  if (!pushing) {
    // CanDeliverFrames said yes: not expected. End the session the loop knows.
    connection->Close();
    PushEvent({.session = session,
               .started = nullptr,
               .frame = Result<net::Frame>(Unavailable("cannot push"))});
  }
  return true;
}

void Coordinator::PushEvent(LoopEvent event) {
  {
    std::lock_guard lock(loop_mu_);
    if (event.frame.has_value() && !event.frame->ok()) {
      auto q = loop_queued_.find(event.session);
      if (q != loop_queued_.end() && q->second.overflowed) {
        // The transport's end after the one queued in a frame's place: already ended.
        loop_queued_.erase(q);
        return;
      }
    } else if (event.frame.has_value()) {
      Queued& q = loop_queued_[event.session];
      if (q.overflowed) return;
      ++q.frames;
      q.bytes += (*event.frame)->body.size();
      if (q.frames > options_.loop_queue_frames || q.bytes > options_.loop_queue_bytes) {
        // Ends the session in the frame's place: the loop closes the connection, and the
        // transport's own end that follows finds no session.
        q.overflowed = true;
        ++counters_.connections_flooding;
        event.frame = Result<net::Frame>(ResourceExhausted(
            "node sent " + std::to_string(q.frames) + " frames (" + std::to_string(q.bytes) +
            " bytes) ahead of the coordinator's replies"));
      }
    }
    loop_events_.push_back(std::move(event));
    // Under the lock: once the loop can see a session's end, Serve may return and the
    // coordinator go, so nothing of it is touched after the unlock (a transport thread delivers
    // an end while Serve closes that connection).
    loop_cv_.notify_one();
  }
}

void Coordinator::EventLoop() {
  std::map<uint64_t, LoopSession> sessions;
  // The parked heartbeats' deadlines (on clock_), earliest first.
  std::set<std::pair<net::TimePoint, uint64_t>> timers;
  auto set_timer = [&](uint64_t session, LoopSession& s, std::optional<net::TimePoint> until) {
    if (s.held_until.has_value()) timers.erase({*s.held_until, session});
    s.held_until = until;
    if (until.has_value()) timers.insert({*until, session});
  };
  auto close = [&](uint64_t session, LoopSession& s) {
    s.closing = true;
    set_timer(session, s, std::nullopt);
    s.connection->Close();  // its end comes back as an event (maybe from inside this call)
  };
  std::deque<LoopEvent> batch;
  while (true) {
    {
      std::unique_lock lock(loop_mu_);
      while (loop_events_.empty()) {
        if (loop_stop_ && sessions.empty()) return;
        if (timers.empty()) {
          loop_cv_.wait(lock);
          continue;
        }
        const net::TimePoint now = clock_.Now();
        if (timers.begin()->first <= now) break;
        // The wait is in real time; a deadline on another clock (a test's fake one) is looked
        // at again every few milliseconds.
        net::Duration wait = timers.begin()->first - now;
        if (&clock_ != &net::Clock::Real()) {
          wait = std::min<net::Duration>(wait, std::chrono::milliseconds(5));
        }
        loop_cv_.wait_for(lock, wait);
      }
      batch.swap(loop_events_);
      for (const LoopEvent& event : batch) {
        if (!event.frame.has_value()) continue;
        auto q = loop_queued_.find(event.session);
        if (q == loop_queued_.end()) continue;
        if (!event.frame->ok()) {
          if (!q->second.overflowed) loop_queued_.erase(q);  // the end: nothing more comes
        } else if (q->second.frames > 0) {
          --q->second.frames;
          q->second.bytes -= std::min<uint64_t>(q->second.bytes, (*event.frame)->body.size());
        }
      }
    }
    for (LoopEvent& event : batch) {
      if (event.started != nullptr) {
        const net::PeerInfo peer = event.started->peer();
        sessions[event.session] = LoopSession{.connection = std::move(event.started),
                                              .peer = peer,
                                              .held_until = std::nullopt,
                                              .closing = false};
        continue;
      }
      auto it = sessions.find(event.session);
      if (it == sessions.end() || !event.frame.has_value()) continue;
      LoopSession& s = it->second;
      if (!event.frame->ok()) {
        // The end, delivered once: the same cleanup as a connection thread's.
        if (event.frame->status().code() == Code::kResourceExhausted) {
          options_.log("coordinator: closing the connection of node " +
                       std::to_string(s.peer.node_id.value()) + ": " +
                       event.frame->status().ToString());
        }
        set_timer(event.session, s, std::nullopt);
        std::shared_ptr<net::Connection> connection = std::move(s.connection);
        sessions.erase(it);
        connection->Close();
        Disconnected(event.session);
        std::lock_guard lock(sessions_mu_);
        sessions_.erase(event.session);
        continue;
      }
      if (s.closing) continue;
      std::optional<net::TimePoint> held = s.held_until;
      const bool keep =
          OnFrame(event.session, s.peer, *s.connection, **event.frame, &held, kLoopSendTimeout);
      // `s` is still there: only the end event erases, and it is queued behind this one.
      set_timer(event.session, s, held);
      if (!keep) close(event.session, s);
    }
    batch.clear();
    // Deadlines that passed.
    while (!timers.empty() && timers.begin()->first <= clock_.Now()) {
      const uint64_t session = timers.begin()->second;
      LoopSession& s = sessions.at(session);
      std::optional<net::TimePoint> held = s.held_until;
      const bool keep = OnHeldDeadline(session, s.peer, *s.connection, &held, kLoopSendTimeout);
      set_timer(session, s, held);
      if (!keep) close(session, s);
    }
  }
}

bool Coordinator::OnHeldDeadline(uint64_t session, const net::PeerInfo& peer,
                                 net::Connection& connection,
                                 std::optional<net::TimePoint>* held_until,
                                 net::Duration send_timeout) {
  // wait_ms passed: answer the parked heartbeat (as it stands now).
  std::optional<wire::Envelope> reply = TakeParked(session, peer.node_id, false, held_until);
  return !reply.has_value() || SendReply(connection, *reply, send_timeout);
}

bool Coordinator::OnFrame(uint64_t session, const net::PeerInfo& peer, net::Connection& connection,
                          const net::Frame& frame, std::optional<net::TimePoint>* held_until,
                          net::Duration send_timeout) {
  if (frame.type != net::FrameType::kControl) {
    options_.log("" + NodeName(peer.node_id) + " sent a " +
                 std::string(net::FrameTypeName(frame.type)) + " frame; closing");
    return false;
  }
  auto request = ParseEnvelope(frame.body);
  if (!request.ok()) {
    options_.log("" + NodeName(peer.node_id) + ": " + request.status().ToString() + "; closing");
    return false;
  }
  if (held_until->has_value()) {
    // The node sent something else while its heartbeat was parked: it is not waiting for that
    // heartbeat alone any more (a wake, or a call of another thread). Answer it first.
    std::optional<wire::Envelope> parked = TakeParked(session, peer.node_id, true, held_until);
    if (parked.has_value()) {
      if (!SendReply(connection, *parked, send_timeout)) return false;
      // The wake did what it was sent for.
      if (request->has_heartbeat() && request->heartbeat().wake()) return true;
    }
  }
  std::optional<wire::Envelope> reply =
      Dispatch(session, peer, *request, /*may_hold=*/true, held_until);
  return !reply.has_value() || SendReply(connection, *reply, send_timeout);
}

void Coordinator::Stop() {
  std::lock_guard lock(sessions_mu_);
  stopping_ = true;
  if (listener_ != nullptr) listener_->Close();
  for (auto& [session, connection] : sessions_) connection->Close();
  stop_cv_.notify_all();
}

}  // namespace weightcast::coord
