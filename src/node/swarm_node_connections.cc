// Peers: accepting and connecting, their frames onto the event loop, control messages out.
#include "node/swarm_node_impl.h"

namespace weightcast::node {

void SwarmNode::Impl::AcceptLoop() {
  while (true) {
    auto conn = listener_->Accept();
    if (!conn.ok()) {
      {
        std::lock_guard lock(qmu_);
        if (qstop_) return;
      }
      if (conn.status().code() == Code::kUnavailable) return;  // listener closed
      continue;
    }
    Push(Accepted{std::move(conn).value()});
  }
}

void SwarmNode::Impl::Handle(Accepted& e) { Admit(std::move(e.conn), /*outgoing=*/false); }

void SwarmNode::Impl::Handle(Connected& e) {
  const PeerAddress& a = e.listed;
  connecting_.erase(a.id.value());
  if (!e.conn.ok()) {
    Log("connect to peer " + std::to_string(a.id.value()) + " at " + a.address + ": " +
        e.conn.status().ToString());
    return;
  }
  if ((*e.conn)->peer().node_id != a.id) {
    Log("peer at " + a.address + " is node " + std::to_string((*e.conn)->peer().node_id.value()) +
        ", not " + std::to_string(a.id.value()));
    DropUnadmitted(std::move(*e.conn));
    return;
  }
  Admit(std::move(*e.conn), /*outgoing=*/true);
}

// A connection the loop will not keep: closed with the dead peers, outside the lock.
void SwarmNode::Impl::DropUnadmitted(std::unique_ptr<net::Connection> conn) {
  auto peer = std::make_shared<Peer>();
  peer->conn = std::move(conn);
  dead_.push_back(std::move(peer));
}

void SwarmNode::Impl::Admit(std::unique_ptr<net::Connection> conn, bool outgoing) {
  const PeerId id = conn->peer().node_id;
  if (stopping_ || !protocol_.Admits(Now(), id)) {  // this node, or banned
    DropUnadmitted(std::move(conn));
    return;
  }
  // Every transport pushes frames (TCP, UCX, memory): the handler queues them onto the event
  // loop from the transport's own thread, so no peer has a thread of its own. A connection that
  // cannot is refused by name, as the coordinator refuses one.
  if (!conn->CanDeliverFrames()) {
    Log("peer " + std::to_string(id.value()) + " over " + conn->peer().transport +
        ": the transport cannot push frames; refused");
    DropUnadmitted(std::move(conn));
    return;
  }
  auto peer = std::make_shared<Peer>();
  peer->id = id;
  peer->outgoing = outgoing;
  peer->conn = std::move(conn);
  peer->gen = ++next_gen_;
  auto& slot = peers_[id.value()];
  if (slot != nullptr) {
    // A reconnect (the peer restarted): the old connection is finished.
    Apply(protocol_.OnPeerDisconnected(Now(), slot->id));
    dead_.push_back(slot);
  }
  slot = peer;
  Log("peer " + std::to_string(id.value()) + " connected (" + (outgoing ? "out" : "in") + ")");
  Apply(protocol_.OnPeerConnected(Now(), id));
  // Frames are pushed only now: a have-set handled before its peer would be lost. The frames
  // and the end reach the loop as events (the handler may run inside DeliverFrames, and only
  // queues). The handler holds no Peer: Stop closes every connection, after which no call
  // starts, before this node goes away.
  const uint64_t gen = peer->gen;
  peer->conn->DeliverFrames([this, id, gen](Result<net::Frame> frame) {
    if (frame.ok()) {
      Push(Received{id, gen, std::move(frame).value()});
    } else {
      Push(PeerDown{id, gen, frame.status()});
    }
  });
}

void SwarmNode::Impl::ClosePeer(Peer& p) {
  {
    std::lock_guard lock(p.wmu);
    p.closing = true;
  }
  if (p.conn) p.conn->Close();
}

// Under mu_ (it counts into target_). Control messages go to the transport at once (its
// control queue is written ahead of chunk data); a peer that leaves megabytes of them unread
// is dropped rather than waited for.
void SwarmNode::Impl::SendTo(Peer& p, const Message& m) {
  {
    std::lock_guard lock(p.wmu);
    if (p.closing) return;
  }
  const std::vector<uint8_t> bytes = swarm::EncodeMessage(m);
  if (static_cast<size_t>(m.type) < target_.messages_sent.size()) {
    ++target_.messages_sent[static_cast<size_t>(m.type)];
  }
  target_.control_bytes_sent += bytes.size();
  const Status sent = p.conn->SendControl(bytes, net::Duration::zero());
  if (!sent.ok() && sent.code() == Code::kDeadlineExceeded) {
    Log("peer " + std::to_string(p.id.value()) + " does not read its control messages; closing");
    ClosePeer(p);  // its end arrives as PeerDown
  }
}

std::shared_ptr<SwarmNode::Impl::Peer> SwarmNode::Impl::FindPeer(PeerId id, uint64_t gen) {
  auto it = peers_.find(id.value());
  if (it == peers_.end() || it->second->gen != gen) return nullptr;
  return it->second;
}

void SwarmNode::Impl::Handle(PeerDown& e) {
  auto p = FindPeer(e.id, e.gen);
  if (p == nullptr) return;
  Log("peer " + std::to_string(e.id.value()) + " disconnected: " + e.why.ToString());
  peers_.erase(e.id.value());
  dead_.push_back(p);
  Apply(protocol_.OnPeerDisconnected(Now(), e.id));
}

void SwarmNode::Impl::Handle(Received& e) {
  auto p = FindPeer(e.id, e.gen);
  if (p == nullptr) return;
  if (e.frame.type == net::FrameType::kChunk) {
    OnChunkFrame(p->id, std::move(e.frame));
    return;
  }
  if (e.frame.type != net::FrameType::kControl) return;
  auto m = swarm::ParseMessage(e.frame.body);
  if (!m.ok()) {
    Apply(protocol_.OnMalformed(Now(), p->id, m.status().ToString()));
    return;
  }
  Apply(protocol_.OnMessage(Now(), p->id, *m));
}

void SwarmNode::Impl::SetPeers(std::span<const PeerAddress> list) {
  OnLoop([&] {
    if (stopping_ || !started_) return;
    std::set<uint64_t> listed;
    listed_.clear();
    for (const PeerAddress& a : list) {
      if (a.id == options_.node_id) continue;
      listed.insert(a.id.value());
      listed_.push_back(a.id);
      if (a.id > options_.node_id) continue;  // it connects to us
      if (peers_.count(a.id.value()) != 0 || connecting_.count(a.id.value()) != 0) continue;
      if (!protocol_.Admits(Now(), a.id)) continue;  // banned
      connecting_.insert(a.id.value());
      // The result comes back as an event (through the sink: a connect may end after Stop).
      net::Transport::ConnectDone done = [sink = upload_sink_,
                                          a](Result<std::unique_ptr<net::Connection>> conn) {
        std::lock_guard lock(sink->mu);
        if (sink->impl != nullptr) sink->impl->Push(Connected{a, std::move(conn)});
      };
      if (transport_.CanConnectAsync()) {
        transport_.ConnectAsync(a.address, kConnectTimeout, std::move(done));
      } else {
        // A transport whose connects block (UCX, with its TCP fallback) connects on a few
        // threads, whatever the number of peers.
        connect_pool_->Submit([this, a, done = std::move(done)]() mutable {
          {
            std::lock_guard lock(qmu_);
            if (qstop_) return;  // stopping: a queued connect does not start
          }
          transport_.ConnectAsync(a.address, kConnectTimeout, std::move(done));
        });
      }
    }
    // Outgoing connections to peers no longer listed are closed (incoming ones are the other
    // side's to close).
    for (auto it = peers_.begin(); it != peers_.end();) {
      if (it->second->outgoing && listed.count(it->first) == 0) {
        Log("peer " + std::to_string(it->first) + " no longer listed");
        Apply(protocol_.OnPeerDisconnected(Now(), it->second->id));
        dead_.push_back(it->second);
        it = peers_.erase(it);
      } else {
        ++it;
      }
    }
    qcv_.notify_one();
  });
}

}  // namespace weightcast::node
