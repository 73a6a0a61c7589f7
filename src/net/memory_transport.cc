#include "net/memory_transport.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace weightcast::net {

namespace {

struct Endpoint;

// Serialises an OutFrame to its wire bytes, which the receiver decodes with its own decoder.
std::vector<uint8_t> WireBytes(const OutFrame& frame) {
  std::vector<uint8_t> bytes(frame.head.begin(), frame.head.begin() + frame.head_size);
  bytes.insert(bytes.end(), frame.payload.begin(), frame.payload.end());
  return bytes;
}

struct Endpoint {
  std::string node;
  const Options* options = nullptr;  // owned by the node's transport (outlives via shared_ptr)
  std::shared_ptr<const Options> options_owner;
  PeerInfo peer;
  std::weak_ptr<Endpoint> other;
  std::deque<Frame> inbox;
  size_t inbox_bytes = 0;
  std::unique_ptr<FrameDecoder> decoder;
  TimePoint last_sent;
  TimePoint last_received;
  Status status;
  // Push delivery: once DeliverFrames took a handler, received frames wait in `inbox` for the
  // network's pusher thread. `ended`: the end status went (or is going) to the handler.
  bool pushing = false;
  bool ended = false;
  // Held across every handler call, never under the network's mutex.
  std::mutex handler_mu;
  Connection::FrameHandler handler;  // guarded by handler_mu; dropped after the end
};

}  // namespace

struct MemoryNetwork::State {
  explicit State(FakeClock& c) : clock(c) {}
  FakeClock& clock;
  FakeClock::ListenerId clock_listener = 0;
  std::mutex mu;
  std::condition_variable cv;
  struct ListenerQueue {
    std::string node;
    std::shared_ptr<const Options> options;
    std::deque<std::shared_ptr<Endpoint>> ready;
    bool closed = false;
  };
  std::map<std::string, std::shared_ptr<ListenerQueue>, std::less<>> listeners;
  std::set<std::string, std::less<>> frozen;
  std::vector<std::weak_ptr<Endpoint>> endpoints;
  // Endpoints that push (DeliverFrames), served by one thread for the whole network.
  std::vector<std::weak_ptr<Endpoint>> pushing;
  std::thread pusher;
  bool stopping = false;

  // The pusher: hands each pushing endpoint's frames to its handler in order, then its end
  // once, one call at a time per endpoint, outside mu.
  void PushLoop() {
    std::unique_lock lock(mu);
    while (!stopping) {
      std::vector<std::pair<std::shared_ptr<Endpoint>, Result<Frame>>> batch;
      std::erase_if(pushing, [](const auto& w) { return w.expired(); });
      for (auto& weak : pushing) {
        std::shared_ptr<Endpoint> e = weak.lock();
        if (!e || e->ended) continue;
        if (!e->inbox.empty()) {
          Frame frame = std::move(e->inbox.front());
          e->inbox.pop_front();
          e->inbox_bytes -= frame.body.size();
          batch.emplace_back(std::move(e), std::move(frame));
        } else if (!e->status.ok()) {
          e->ended = true;
          Status end = e->status;
          batch.emplace_back(std::move(e), std::move(end));
        }
      }
      if (batch.empty()) {
        cv.wait(lock);
        continue;
      }
      cv.notify_all();  // room in the inboxes for senders that wait
      lock.unlock();
      for (auto& [e, item] : batch) {
        std::lock_guard hold(e->handler_mu);
        if (!e->handler) continue;  // the end went out inside Close
        if (item.ok()) {
          e->handler(std::move(item));
        } else {
          Connection::FrameHandler last = std::move(e->handler);
          e->handler = nullptr;
          last(std::move(item));
        }
      }
      lock.lock();
    }
  }

  // All below: mu held.
  void Fail(Endpoint& e, Status status) {
    if (!e.status.ok()) return;
    e.status = std::move(status);
    e.options->log("memory " + e.node + ": connection to node " +
                   std::to_string(e.peer.node_id.value()) + " closed: " + e.status.ToString());
    cv.notify_all();
  }

  // Delivers `frame` from `from` to its peer through the peer's decoder.
  void Deliver(Endpoint& from, const OutFrame& frame) {
    from.last_sent = clock.Now();
    std::shared_ptr<Endpoint> to = from.other.lock();
    if (!to || !to->status.ok()) return;
    Status fed = to->decoder->Feed(WireBytes(frame));
    if (!fed.ok()) {
      Fail(*to, fed);
      Fail(from, Unavailable("peer dropped the connection"));
      return;
    }
    to->last_received = clock.Now();
    for (Frame& f : to->decoder->TakeFrames()) {
      if (f.type == FrameType::kPing) continue;
      to->inbox_bytes += f.body.size();
      to->inbox.push_back(std::move(f));
    }
    cv.notify_all();
  }

  void OnTick(TimePoint now) {
    std::lock_guard lock(mu);
    std::vector<std::shared_ptr<Endpoint>> live;
    for (auto& weak : endpoints) {
      if (auto e = weak.lock(); e && e->status.ok()) live.push_back(std::move(e));
    }
    std::erase_if(endpoints, [](const auto& w) { return w.expired(); });
    for (auto& e : live) {
      if (frozen.contains(e->node)) continue;
      if (now - e->last_sent >= e->options->keepalive_interval) {
        Deliver(*e, OutFrame::Make(FrameType::kPing, {}));
      }
    }
    for (auto& e : live) {
      if (frozen.contains(e->node) || !e->status.ok()) continue;
      if (now - e->last_received > e->options->keepalive_timeout) {
        Fail(*e,
             DeadlineExceeded("keepalive: nothing heard from peer for " +
                              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 now - e->last_received)
                                                 .count()) +
                              " ms"));
      }
    }
    cv.notify_all();
  }

  // Waits on cv until pred() or the fake clock reaches `deadline`.
  template <typename Pred>
  bool WaitUntil(std::unique_lock<std::mutex>& lock, TimePoint deadline, Pred pred) {
    while (!pred()) {
      if (clock.Now() >= deadline) return false;
      cv.wait(lock);
    }
    return true;
  }

  TimePoint DeadlineAfter(Duration timeout) {
    TimePoint now = clock.Now();
    return timeout >= TimePoint::max() - now ? TimePoint::max() : now + timeout;
  }
};

namespace {

class MemoryConnection : public Connection {
 public:
  MemoryConnection(std::shared_ptr<MemoryNetwork::State> state, std::shared_ptr<Endpoint> e)
      : state_(std::move(state)), e_(std::move(e)) {}
  ~MemoryConnection() override { Close(); }

  const PeerInfo& peer() const override { return e_->peer; }

  Status Send(OutFrame frame, Duration timeout) override {
    WC_RETURN_IF_ERROR(CheckSendable(frame));
    std::unique_lock lock(state_->mu);
    auto room = [&] {
      auto to = e_->other.lock();
      return !e_->status.ok() || !to || to->inbox_bytes < e_->options->send_queue_bytes;
    };
    if (!state_->WaitUntil(lock, state_->DeadlineAfter(timeout), room)) {
      return DeadlineExceeded("send queue full (peer is not reading)");
    }
    if (!e_->status.ok()) return e_->status;
    if (!e_->other.lock())
      return Unavailable("peer closed the connection").WithReason(Reason::kPeerClosed);
    state_->Deliver(*e_, frame);
    return e_->status;
  }

  bool CanDeliverFrames() const override { return true; }

  bool DeliverFrames(FrameHandler handler) override {
    {
      std::lock_guard hold(e_->handler_mu);
      std::lock_guard lock(state_->mu);
      if (e_->pushing) return false;  // a second handler
      e_->pushing = true;
      e_->handler = std::move(handler);
      state_->pushing.push_back(e_);
      if (!state_->pusher.joinable() && !state_->stopping) {
        state_->pusher = std::thread([state = state_.get()] { state->PushLoop(); });
      }
    }
    state_->cv.notify_all();
    return true;
  }

  Result<Frame> Receive(Duration timeout) override {
    std::unique_lock lock(state_->mu);
    if (!state_->WaitUntil(lock, state_->DeadlineAfter(timeout),
                           [&] { return !e_->inbox.empty() || !e_->status.ok(); })) {
      return DeadlineExceeded("no frame within the timeout");
    }
    if (e_->inbox.empty()) return e_->status;
    Frame frame = std::move(e_->inbox.front());
    e_->inbox.pop_front();
    e_->inbox_bytes -= frame.body.size();
    state_->cv.notify_all();
    return frame;
  }

  Status Flush(Duration) override {
    std::lock_guard lock(state_->mu);
    return e_->status;  // Send delivers at once; nothing is ever queued on this side.
  }

  void Close() override {
    Status end;
    {
      std::lock_guard lock(state_->mu);
      if (e_->status.ok()) {
        e_->status = Unavailable("connection closed by this node").WithReason(Reason::kClosedHere);
        if (auto other = e_->other.lock()) {
          state_->Fail(*other,
                       Unavailable("peer closed the connection").WithReason(Reason::kPeerClosed));
        }
        state_->cv.notify_all();
      }
      if (!e_->pushing || e_->ended) return;
      e_->ended = true;  // the pusher starts no call for it from now on
      end = e_->status;
    }
    // The end, inside Close, once the handler's call in progress (if any) returned.
    std::lock_guard hold(e_->handler_mu);
    if (!e_->handler) return;
    FrameHandler last = std::move(e_->handler);
    e_->handler = nullptr;
    last(std::move(end));
  }

  Status status() const override {
    std::lock_guard lock(state_->mu);
    return e_->status;
  }

 private:
  std::shared_ptr<MemoryNetwork::State> state_;
  std::shared_ptr<Endpoint> e_;
};

class MemoryListener : public Listener {
 public:
  MemoryListener(std::shared_ptr<MemoryNetwork::State> state, std::string address,
                 std::shared_ptr<MemoryNetwork::State::ListenerQueue> queue)
      : state_(std::move(state)), address_(std::move(address)), queue_(std::move(queue)) {}
  ~MemoryListener() override { Close(); }

  Result<std::unique_ptr<Connection>> Accept(Duration timeout) override {
    std::unique_lock lock(state_->mu);
    if (!state_->WaitUntil(lock, state_->DeadlineAfter(timeout),
                           [&] { return !queue_->ready.empty() || queue_->closed; })) {
      return DeadlineExceeded("no peer connected within the timeout");
    }
    if (queue_->ready.empty()) return Unavailable("listener " + address_ + " is closed");
    std::shared_ptr<Endpoint> e = std::move(queue_->ready.front());
    queue_->ready.pop_front();
    return std::unique_ptr<Connection>(std::make_unique<MemoryConnection>(state_, std::move(e)));
  }

  std::string address() const override { return address_; }

  void Close() override {
    std::lock_guard lock(state_->mu);
    if (queue_->closed) return;
    queue_->closed = true;
    auto it = state_->listeners.find(address_);
    if (it != state_->listeners.end() && it->second == queue_) state_->listeners.erase(it);
    state_->cv.notify_all();
  }

 private:
  std::shared_ptr<MemoryNetwork::State> state_;
  std::string address_;
  std::shared_ptr<MemoryNetwork::State::ListenerQueue> queue_;
};

class MemoryTransport : public Transport {
 public:
  MemoryTransport(std::shared_ptr<MemoryNetwork::State> state, std::string name, Options options)
      : state_(std::move(state)),
        name_(std::move(name)),
        options_(std::make_shared<const Options>(std::move(options))) {}

  Capabilities capabilities() const override { return {"memory", false, false}; }

  Result<std::unique_ptr<Listener>> Listen(std::string_view address) override {
    std::lock_guard lock(state_->mu);
    if (state_->listeners.contains(address)) {
      return AlreadyExists("memory address " + std::string(address) + " is already listening");
    }
    auto queue = std::make_shared<MemoryNetwork::State::ListenerQueue>();
    queue->node = name_;
    queue->options = options_;
    state_->listeners.emplace(std::string(address), queue);
    return std::unique_ptr<Listener>(
        std::make_unique<MemoryListener>(state_, std::string(address), std::move(queue)));
  }

  Result<std::unique_ptr<Connection>> Connect(std::string_view address, Duration) override;
  // Both handshakes run in the caller's Connect, in process: the answer is known at once.
  bool CanConnectAsync() const override { return true; }

 private:
  std::shared_ptr<MemoryNetwork::State> state_;
  std::string name_;
  std::shared_ptr<const Options> options_;
};

// Decodes an OutFrame with the receiver's limits, as the wire would.
Result<Frame> RoundTrip(const OutFrame& out, uint32_t max_frame_bytes) {
  FrameDecoder decoder(max_frame_bytes);
  WC_RETURN_IF_ERROR(decoder.Feed(WireBytes(out)));
  std::deque<Frame> frames = decoder.TakeFrames();
  if (frames.size() != 1) return Internal("round trip produced no frame");
  return std::move(frames.front());
}

Result<std::unique_ptr<Connection>> MemoryTransport::Connect(std::string_view address, Duration) {
  std::unique_lock lock(state_->mu);
  auto it = state_->listeners.find(address);
  if (it == state_->listeners.end()) {
    return Unavailable("nothing listens at memory address " + std::string(address));
  }
  std::shared_ptr<MemoryNetwork::State::ListenerQueue> queue = it->second;
  const Options& mine = *options_;
  const Options& theirs = *queue->options;

  // Both handshakes run here, frame by frame, in the order the wire would carry them.
  Handshake initiator(mine.self, mine.secret, /*initiator=*/true);
  Handshake acceptor(theirs.self, theirs.secret, /*initiator=*/false);
  std::deque<OutFrame> to_acceptor, to_initiator;
  to_acceptor.push_back(initiator.HelloFrame());
  to_initiator.push_back(acceptor.HelloFrame());
  Status initiator_status, acceptor_status;
  auto step = [](Handshake& hs, const OutFrame& out, const Options& receiver,
                 std::deque<OutFrame>& replies) -> Status {
    WC_ASSIGN_OR_RETURN(Frame frame, RoundTrip(out, receiver.max_frame_bytes));
    WC_ASSIGN_OR_RETURN(std::optional<OutFrame> reply, hs.OnFrame(frame));
    if (reply) replies.push_back(std::move(*reply));
    return Status::Ok();
  };
  // Each round delivers what is in flight in both directions at once, as on a full-duplex
  // wire; a side that fails reports why to the other, unless that one failed too.
  while ((!to_acceptor.empty() || !to_initiator.empty()) && initiator_status.ok() &&
         acceptor_status.ok()) {
    std::deque<OutFrame> for_acceptor = std::exchange(to_acceptor, {});
    std::deque<OutFrame> for_initiator = std::exchange(to_initiator, {});
    for (const OutFrame& out : for_acceptor) {
      if (acceptor_status.ok()) acceptor_status = step(acceptor, out, theirs, to_initiator);
    }
    for (const OutFrame& out : for_initiator) {
      if (initiator_status.ok()) initiator_status = step(initiator, out, mine, to_acceptor);
    }
    if (!acceptor_status.ok() && initiator_status.ok()) {
      initiator_status =
          step(initiator, Handshake::ErrorFrameFor(acceptor_status), mine, to_acceptor);
    }
    if (!initiator_status.ok() && acceptor_status.ok()) {
      acceptor_status =
          step(acceptor, Handshake::ErrorFrameFor(initiator_status), theirs, to_initiator);
    }
  }
  if (!acceptor_status.ok() || !acceptor.established()) {
    if (acceptor_status.ok()) acceptor_status = Internal("handshake did not finish");
    theirs.log("memory " + queue->node + ": refused peer from " + name_ + ": " +
               acceptor_status.ToString());
  }
  if (!initiator_status.ok() || !initiator.established()) {
    if (initiator_status.ok()) initiator_status = Internal("handshake did not finish");
    mine.log("memory " + name_ + ": connect to " + std::string(address) +
             " failed: " + initiator_status.ToString());
    return initiator_status;
  }
  if (!acceptor_status.ok()) return acceptor_status;

  auto a = std::make_shared<Endpoint>();
  auto b = std::make_shared<Endpoint>();
  const TimePoint now = state_->clock.Now();
  a->node = name_;
  a->options_owner = options_;
  a->options = options_.get();
  a->peer = initiator.peer();
  a->peer.address = std::string(address);
  a->peer.transport = "memory";
  b->node = queue->node;
  b->options_owner = queue->options;
  b->options = queue->options.get();
  b->peer = acceptor.peer();
  b->peer.address = "mem:" + name_;
  b->peer.transport = "memory";
  for (auto* e : {a.get(), b.get()}) {
    e->decoder = std::make_unique<FrameDecoder>(e->options->max_frame_bytes);
    e->last_sent = e->last_received = now;
  }
  a->other = b;
  b->other = a;
  state_->endpoints.push_back(a);
  state_->endpoints.push_back(b);
  queue->ready.push_back(b);
  state_->cv.notify_all();
  return std::unique_ptr<Connection>(std::make_unique<MemoryConnection>(state_, std::move(a)));
}

}  // namespace

MemoryNetwork::MemoryNetwork(FakeClock& clock) : state_(std::make_shared<State>(clock)) {
  std::weak_ptr<State> weak = state_;
  state_->clock_listener = clock.AddListener([weak](TimePoint now) {
    if (auto state = weak.lock()) state->OnTick(now);
  });
}

MemoryNetwork::~MemoryNetwork() {
  state_->clock.RemoveListener(state_->clock_listener);
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
    state_->cv.notify_all();
  }
  if (state_->pusher.joinable()) state_->pusher.join();
}

std::unique_ptr<Transport> MemoryNetwork::CreateTransport(std::string name, Options options) {
  return std::make_unique<MemoryTransport>(state_, std::move(name), std::move(options));
}

void MemoryNetwork::Freeze(std::string_view name, bool frozen) {
  std::lock_guard lock(state_->mu);
  if (frozen) {
    state_->frozen.emplace(name);
  } else if (auto it = state_->frozen.find(name); it != state_->frozen.end()) {
    state_->frozen.erase(it);
  }
}

}  // namespace weightcast::net
