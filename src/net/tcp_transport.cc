// The TCP transport: framing, connections and their writers and keepalive, the handshake's
// admission, the listener. One file because they share the transport's state and asio types no
// other file sees. The socket a connection reads and writes (TLS, read-ahead, byte counts) is
// tcp_channel.h; the handshake's messages are handshake.cc, admission rules admission.cc, the
// TLS record loop tls_session.cc.

#include "net/tcp_transport.h"

#include "net/asio_coroutines.h"  // before any asio header
#include "net/tcp_channel.h"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/redirect_error.hpp>
#include <asio/ssl.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <netdb.h>
#include <sys/ioctl.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "net/admission.h"
#include "net/tls_session.h"
#include "util/host_port.h"

namespace weightcast::net {
namespace {

using asio::awaitable;
using asio::ip::tcp;

// Before authentication a peer may not make us allocate more than this per
// frame.
constexpr uint32_t kHandshakeMaxFrameBytes = 64 << 10;
// The writer hands at most this many bytes to one gather write.
constexpr size_t kMaxBatchBytes = 16u << 20;
constexpr size_t kMaxBatchFrames = 64;
constexpr size_t kPacedBatchBytes = 256u << 10;
// Under a rate limit a chunk is read and written in pieces of this size, each paced.
constexpr size_t kPacedPieceBytes = 256u << 10;
std::string EndpointString(const tcp::endpoint& ep) {
  std::string host = ep.address().to_string();
  if (ep.address().is_v6()) host = "[" + host + "]";
  return host + ":" + std::to_string(ep.port());
}

Result<tcp::endpoint> ParseEndpoint(std::string_view address) {
  WC_ASSIGN_OR_RETURN(const HostPort parsed, ParseHostPort(address));
  const std::string& host = parsed.host;
  const uint16_t port = *parsed.port;
  std::error_code ec;
  asio::ip::address ip = asio::ip::make_address(host, ec);
  if (!ec) return tcp::endpoint(ip, port);
  // A host name (DNS, a Kubernetes service, /etc/hosts), resolved at every connect so that a
  // name that moves is followed. IPv4 first: a listener given "localhost" binds 127.0.0.1.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    // Unavailable, not a bad argument: a name that does not resolve yet may resolve later.
    return Unavailable("address '" + std::string(address) + "': cannot resolve '" + host +
                       "': " + ::gai_strerror(rc));
  }
  const addrinfo* pick = found;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  tcp::endpoint endpoint;
  std::memcpy(endpoint.data(), pick->ai_addr, pick->ai_addrlen);
  ::freeaddrinfo(found);
  endpoint.port(port);
  return endpoint;
}

template <typename Pred>
bool WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Duration timeout,
             Pred pred) {
  if (timeout == kForever) {
    cv.wait(lock, pred);
    return true;
  }
  return cv.wait_for(lock, timeout, pred);
}

struct Shared {
  explicit Shared(Options o) : options(std::move(o)) {}
  asio::io_context io;
  Options options;
  std::unique_ptr<asio::ssl::context> tls;  // set when options.tls.enabled
  WireBytes bytes;
};

// TLS 1.3 with mutual certificate verification against the cluster CA. Throws
// std::system_error (caught by TcpTransport::Create) when a file is missing or
// does not parse.
std::unique_ptr<asio::ssl::context> MakeTlsContext(const TlsOptions& tls) {
  auto context = std::make_unique<asio::ssl::context>(asio::ssl::context::tls);
  context->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                       asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                       asio::ssl::context::no_tlsv1_1);
  context->use_certificate_chain_file(tls.cert_file);
  context->use_private_key_file(tls.key_file, asio::ssl::context::pem);
  context->load_verify_file(tls.ca_file);
  context->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_3_VERSION);
  // No session tickets: nothing resumes sessions, and a ticket is a write the reading side
  // would otherwise have to send (TlsSession).
  SSL_CTX_set_num_tickets(context->native_handle(), 0);
  // AES-128-GCM first: with AES-NI it is the cheapest suite per byte, and weights are bulk.
  SSL_CTX_set_ciphersuites(context->native_handle(),
                           "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                           "TLS_CHACHA20_POLY1305_SHA256");
  return context;
}

awaitable<Result<PeerInfo>> RunHandshake(TcpChannel& channel, const Options& options,
                                         bool initiator, std::atomic<bool>* spoke);
awaitable<Status> WriteFrame(TcpChannel& channel, const OutFrame& frame);

// TLS first (when configured), then the HMAC handshake inside it. `spoke` (optional) is set
// once the peer's Hello was accepted.
awaitable<Result<PeerInfo>> SecureAndAuthenticate(Shared& shared, TcpChannel& channel,
                                                  bool initiator,
                                                  std::atomic<bool>* spoke = nullptr) {
  if (shared.tls) {
    if (!initiator) {
      // A peer that speaks weightcast without TLS (a node not given the certificate flags)
      // would see only a hang-up: tell it in its own protocol. A TLS record starts with 0x16.
      uint8_t first = 0;
      std::error_code peeked;
      co_await channel.socket().async_receive(asio::buffer(&first, 1), tcp::socket::message_peek,
                                              asio::redirect_error(asio::use_awaitable, peeked));
      if (!peeked && first != 0x16) {
        const Status refused = Unauthenticated(
            "this node runs in certificate mode: connect with TLS and a certificate of the "
            "cluster CA (--ca, --cert, --key; docs/security.md)");
        (void)co_await WriteFrame(channel, Handshake::ErrorFrameFor(refused));
        co_return refused;
      }
    }
    std::error_code ec = co_await channel.StartTls(*shared.tls, initiator);
    if (ec) {
      co_return Unauthenticated("TLS handshake failed: " + ec.message() +
                                (initiator ? " (does the peer run in certificate mode, with a "
                                             "certificate of the same CA?)"
                                           : ""));
    }
  }
  co_return co_await RunHandshake(channel, shared.options, initiator, spoke);
}

// Reads one frame (header, then body into its own buffer) with `max_body` as
// the limit. `progress` (optional) is stamped whenever bytes arrive; `paused`
// (optional) is set while the reader waits for rate-limit tokens, time that is
// not the peer's silence.
awaitable<Result<Frame>> ReadFrame(TcpChannel& channel, uint32_t max_body, TokenBucket* limit,
                                   asio::steady_timer* pacing,
                                   std::atomic<int64_t>* progress = nullptr,
                                   std::atomic<bool>* paused = nullptr) {
  std::array<uint8_t, kFrameHeaderSize> head;
  std::error_code ec = co_await channel.ReadExact(head, nullptr);
  if (ec) {
    // A TLS peer that closes without close_notify reads as stream_truncated:
    // still a hang-up.
    const bool closed = ec == asio::error::eof || ec == asio::ssl::error::stream_truncated;
    co_return closed ? Unavailable("peer closed the connection").WithReason(Reason::kPeerClosed)
                     : Unavailable("read: " + ec.message());
  }
  Result<FrameHeader> header = ParseFrameHeader(head, max_body);
  if (!header.ok()) co_return header.status();
  Frame frame;
  frame.type = header->type;
  frame.body.resize(header->length);
  // A rate limit paces chunk data only: control frames (heartbeats, requests, HAVEs) are small
  // and must never wait behind the data's debt (otherwise a download-limited agent's heartbeat
  // replies wait seconds and the coordinator declares it dead). A chunk is read in paced
  // pieces, so that a large one arrives as steady progress instead of one long stall.
  const bool paced = limit != nullptr && pacing != nullptr && frame.type == FrameType::kChunk;
  size_t at = 0;
  while (at < frame.body.size()) {
    const size_t piece =
        paced ? std::min(kPacedPieceBytes, frame.body.size() - at) : frame.body.size() - at;
    if (paced) {
      Duration wait = limit->Reserve(piece + (at == 0 ? kFrameHeaderSize : 0));
      if (wait > Duration(0)) {
        if (paused != nullptr) *paused = true;
        pacing->expires_after(wait);
        co_await pacing->async_wait(asio::redirect_error(asio::use_awaitable, ec));
        if (paused != nullptr) *paused = false;
        if (progress != nullptr) *progress = SteadyNowNs();
      }
    }
    ec = co_await channel.ReadExact(std::span<uint8_t>(frame.body.data() + at, piece), progress);
    if (ec) co_return Unavailable("read: " + ec.message());
    at += piece;
  }
  Status valid = ValidateFrameBody(frame.type, frame.body);
  if (!valid.ok()) co_return valid;
  co_return frame;
}

awaitable<Status> WriteFrame(TcpChannel& channel, const OutFrame& frame) {
  std::array<asio::const_buffer, 2> buffers = {
      asio::buffer(frame.head.data(), frame.head_size),
      asio::buffer(frame.payload.data(), frame.payload.size())};
  std::error_code ec = co_await channel.Write(buffers);
  if (ec) co_return Unavailable("write: " + ec.message());
  co_return Status::Ok();
}

// A peer that refuses us writes why and closes without reading what we sent meanwhile, so its
// kernel resets the connection and our next handshake write fails. Its reason is still in our
// receive queue (Linux keeps received bytes past a reset): read it, so the caller learns the
// cause and not "broken pipe". The handshake deadline bounds the read.
awaitable<Status> PeersReasonOr(TcpChannel& channel, Handshake& hs, Status write_failed) {
  Result<Frame> frame = co_await ReadFrame(channel, kHandshakeMaxFrameBytes, nullptr, nullptr);
  if (!frame.ok() || frame->type != FrameType::kError) co_return write_failed;
  Result<std::optional<OutFrame>> told = hs.OnFrame(*frame);
  co_return told.ok() ? write_failed : told.status();
}

// Runs the handshake on a fresh socket. On failure it tells the peer why (best
// effort).
awaitable<Result<PeerInfo>> RunHandshake(TcpChannel& channel, const Options& options,
                                         bool initiator, std::atomic<bool>* spoke) {
  Handshake hs(options.self, options.secret, initiator);
  Status sent = co_await WriteFrame(channel, hs.HelloFrame());
  if (!sent.ok()) co_return co_await PeersReasonOr(channel, hs, sent);
  bool role_checked = false;
  while (!hs.established()) {
    Result<Frame> frame = co_await ReadFrame(channel, kHandshakeMaxFrameBytes, nullptr, nullptr);
    if (!frame.ok()) {
      if (frame.status().code() == Code::kCorrupt) {
        (void)co_await WriteFrame(channel, Handshake::ErrorFrameFor(frame.status()));
      }
      co_return frame.status();
    }
    Result<std::optional<OutFrame>> reply = hs.OnFrame(*frame);
    if (!reply.ok()) {
      if (reply.status().code() != Code::kAborted) {
        (void)co_await WriteFrame(channel, Handshake::ErrorFrameFor(reply.status()));
      }
      co_return reply.status();
    }
    if (!role_checked && hs.heard_hello() && channel.tls() && options.tls.check_peer) {
      // The role the peer claims must be one its certificate holds; refused before our Auth
      // goes out, so the peer learns why instead of seeing a hang-up.
      role_checked = true;
      Status allowed = options.tls.check_peer(channel.PeerCertificateDer(), hs.peer());
      if (!allowed.ok()) {
        (void)co_await WriteFrame(channel, Handshake::ErrorFrameFor(allowed));
        co_return allowed;
      }
    }
    if (spoke != nullptr) *spoke = true;
    if (*reply) {
      Status s = co_await WriteFrame(channel, **reply);
      if (!s.ok()) co_return co_await PeersReasonOr(channel, hs, s);
    }
  }
  PeerInfo peer = hs.peer();
  std::error_code ec;
  tcp::endpoint remote = channel.socket().remote_endpoint(ec);
  peer.address = ec ? "?" : EndpointString(remote);
  peer.transport = "tcp";
  co_return peer;
}

class TcpConn : public std::enable_shared_from_this<TcpConn> {
 public:
  TcpConn(std::shared_ptr<Shared> shared, std::unique_ptr<TcpChannel> channel, PeerInfo peer)
      : shared_(std::move(shared)),
        options_(shared_->options),
        strand_(channel->socket().get_executor()),
        channel_(std::move(channel)),
        write_wake_(strand_),
        read_wake_(strand_),
        watchdog_(strand_),
        write_pacing_(strand_),
        read_pacing_(strand_),
        peer_(std::move(peer)) {
    std::error_code ec;
    channel_->socket().set_option(tcp::no_delay(true), ec);
    last_received_ns_ = SteadyNowNs();
    if (channel_->tls()) peer_certificate_ = channel_->PeerCertificateDer();
  }

  // The socket was created on a strand; the loops run on it too, which
  // serialises them (socket and timers are only touched from the strand).
  void Start() {
    auto self = shared_from_this();
    asio::co_spawn(strand_, WriteLoop(self), asio::detached);
    asio::co_spawn(strand_, ReadLoop(self), asio::detached);
    asio::co_spawn(strand_, Watchdog(self), asio::detached);
  }

  const PeerInfo& peer() const { return peer_; }
  // The certificate the peer presented (DER); empty without TLS.
  const std::vector<uint8_t>& peer_certificate() const { return peer_certificate_; }

  // Control frames have a queue of their own that the writer empties first: a heartbeat or a
  // request never waits behind megabytes of queued chunk data, nor for room among them.
  Status Send(OutFrame frame, Duration timeout) {
    WC_RETURN_IF_ERROR(CheckSendable(frame));
    std::unique_lock lock(mu_);
    const size_t size = frame.wire_size();
    const bool control = frame.type() != FrameType::kChunk;
    size_t& queued = control ? control_bytes_ : data_bytes_;
    bool room = WaitFor(cv_, lock, timeout, [&] {
      return !status_.ok() || queued == 0 || queued + size <= options_.send_queue_bytes;
    });
    if (!status_.ok()) return status_;
    if (!room)
      return DeadlineExceeded("send queue full for " + std::to_string(timeout.count() / 1000000) +
                              " ms (peer is slow)");
    queued += size;
    send_bytes_ += size;
    (control ? control_queue_ : send_queue_).push_back(std::move(frame));
    WakeWriterLocked();
    return Status::Ok();
  }

  Result<Frame> Receive(Duration timeout) {
    std::unique_lock lock(mu_);
    if (pushing_) return FailedPrecondition("frames of this connection go to its frame handler");
    bool got = WaitFor(cv_, lock, timeout, [&] { return !recv_queue_.empty() || !status_.ok(); });
    if (recv_queue_.empty()) {
      if (!status_.ok()) return status_;
      if (!got) return DeadlineExceeded("no frame within the timeout");
    }
    Frame frame = std::move(recv_queue_.front());
    recv_queue_.pop_front();
    recv_bytes_ -= frame.body.size();
    if (reader_waiting_ && recv_bytes_ < options_.receive_queue_bytes) {
      reader_waiting_ = false;
      asio::post(strand_, [self = shared_from_this()] { self->read_wake_.cancel(); });
    }
    return frame;
  }

  // Connection::DeliverFrames. handler_mu_ is held from here to the end of the backlog, so a
  // frame the read loop takes meanwhile waits for it and keeps its place in the order.
  bool Deliver(Connection::FrameHandler handler) {
    std::lock_guard handler_lock(handler_mu_);
    std::deque<Frame> backlog;
    Status status;
    bool wake_reader = false;
    {
      std::lock_guard lock(mu_);
      if (pushing_) return false;  // a second handler
      pushing_ = true;
      backlog.swap(recv_queue_);
      recv_bytes_ = 0;
      status = status_;
      wake_reader = reader_waiting_;
      reader_waiting_ = false;
    }
    if (wake_reader) {
      asio::post(strand_, [self = shared_from_this()] { self->read_wake_.cancel(); });
    }
    for (Frame& frame : backlog) handler(std::move(frame));
    if (!status.ok()) {
      handler(status);  // Fail ran before us: it found no handler to tell
      return true;
    }
    handler_ = std::move(handler);
    return true;
  }

  Status Flush(Duration timeout) {
    std::unique_lock lock(mu_);
    bool done = WaitFor(cv_, lock, timeout, [&] { return send_bytes_ == 0 || !status_.ok(); });
    // Everything went out before the connection ended (e.g. the peer hung up
    // after reading).
    if (!status_.ok()) return flushed_before_failure_ ? Status::Ok() : status_;
    return done ? Status::Ok() : DeadlineExceeded("flush did not finish within the timeout");
  }

  Status status() const {
    std::lock_guard lock(mu_);
    return status_;
  }

  // Records why the connection ended (first reason wins), wakes every waiter
  // and closes the socket on the strand, which ends the three loops.
  void Fail(const Status& status, bool log) {
    {
      std::lock_guard lock(mu_);
      if (!status_.ok()) return;
      status_ = status;
      flushed_before_failure_ = send_bytes_ == 0;
      send_queue_.clear();  // releases keep_alive references of unsent chunks
      control_queue_.clear();
      send_bytes_ = 0;
      control_bytes_ = 0;
      data_bytes_ = 0;
    }
    // Logged before waking waiters, so that whoever sees the failure can also
    // see the line.
    if (log) {
      options_.log("tcp: connection to node " + std::to_string(peer_.node_id.value()) + " at " +
                   peer_.address + " closed: " + status.ToString());
    }
    cv_.notify_all();
    {
      // The end goes to a frame handler once; after it (and so after Close) no call starts.
      std::lock_guard handler_lock(handler_mu_);
      if (handler_) {
        Connection::FrameHandler handler = std::move(handler_);
        handler_ = nullptr;
        handler(status);
      }
    }
    asio::post(strand_, [self = shared_from_this()] {
      std::error_code ec;
      self->channel_->socket().shutdown(tcp::socket::shutdown_both, ec);
      self->channel_->socket().close(ec);
      self->write_wake_.cancel();
      self->read_wake_.cancel();
      self->watchdog_.cancel();
      self->write_pacing_.cancel();
      self->read_pacing_.cancel();
    });
  }

 private:
  void WakeWriterLocked() {
    if (!writer_waiting_) return;
    writer_waiting_ = false;
    asio::post(strand_, [self = shared_from_this()] { self->write_wake_.cancel(); });
  }

  bool failed() {
    std::lock_guard lock(mu_);
    return !status_.ok();
  }

  static awaitable<void> WriteLoop(std::shared_ptr<TcpConn> self) {
    std::vector<OutFrame> batch;
    std::vector<asio::const_buffer> buffers;
    std::error_code ec;
    for (;;) {
      size_t batch_bytes = 0;
      // Under a rate limit, batches stay small so that pacing is smooth rather
      // than one long wait followed by a burst.
      const size_t max_batch = self->options_.upload_limit ? kPacedBatchBytes : kMaxBatchBytes;
      size_t control_bytes = 0;
      size_t data_bytes = 0;
      {
        std::lock_guard lock(self->mu_);
        if (!self->status_.ok()) co_return;
        for (std::deque<OutFrame>* queue : {&self->control_queue_, &self->send_queue_}) {
          size_t& taken = queue == &self->control_queue_ ? control_bytes : data_bytes;
          while (!queue->empty() && batch.size() < kMaxBatchFrames &&
                 (batch.empty() || batch_bytes + queue->front().wire_size() <= max_batch)) {
            batch_bytes += queue->front().wire_size();
            taken += queue->front().wire_size();
            batch.push_back(std::move(queue->front()));
            queue->pop_front();
          }
        }
        if (batch.empty()) self->writer_waiting_ = true;
      }
      if (batch.empty()) {
        self->write_wake_.expires_after(self->options_.keepalive_interval);
        co_await self->write_wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        std::lock_guard lock(self->mu_);
        if (!self->status_.ok()) co_return;
        if (!ec && self->writer_waiting_ && self->send_queue_.empty() &&
            self->control_queue_.empty()) {
          // Idle for a whole interval: tell the peer we are alive.
          OutFrame ping = OutFrame::Make(FrameType::kPing, {});
          self->send_bytes_ += ping.wire_size();
          self->control_bytes_ += ping.wire_size();
          self->control_queue_.push_back(std::move(ping));
        }
        self->writer_waiting_ = false;
        continue;
      }
      buffers.clear();
      for (const OutFrame& f : batch) {
        buffers.emplace_back(f.head.data(), f.head_size);
        if (!f.payload.empty()) buffers.emplace_back(f.payload.data(), f.payload.size());
      }
      if (self->options_.upload_limit && data_bytes > 0) {
        // Paced: chunk data only, in pieces (a batch holds at most one piece's worth of frames,
        // or one larger chunk, which goes out piece by piece).
        ec = co_await PacedWrite(self, buffers);
      } else {
        ec = co_await self->channel_->Write(buffers);
      }
      batch.clear();
      if (ec) {
        if (!self->failed()) self->Fail(Unavailable("write: " + ec.message()), true);
        co_return;
      }
      {
        std::lock_guard lock(self->mu_);
        self->send_bytes_ -= std::min(self->send_bytes_, batch_bytes);
        self->control_bytes_ -= std::min(self->control_bytes_, control_bytes);
        self->data_bytes_ -= std::min(self->data_bytes_, data_bytes);
      }
      self->cv_.notify_all();
    }
  }

  // Writes `buffers` in pieces of kPacedPieceBytes, each reserved from the upload limit first.
  static awaitable<std::error_code> PacedWrite(const std::shared_ptr<TcpConn>& self,
                                               const std::vector<asio::const_buffer>& buffers) {
    std::error_code ec;
    std::vector<asio::const_buffer> piece;
    size_t i = 0;
    size_t offset = 0;  // into buffers[i]
    while (i < buffers.size()) {
      piece.clear();
      size_t piece_bytes = 0;
      while (i < buffers.size() && piece_bytes < kPacedPieceBytes) {
        const size_t take = std::min(buffers[i].size() - offset, kPacedPieceBytes - piece_bytes);
        piece.emplace_back(static_cast<const uint8_t*>(buffers[i].data()) + offset, take);
        piece_bytes += take;
        offset += take;
        if (offset == buffers[i].size()) {
          ++i;
          offset = 0;
        }
      }
      Duration wait = self->options_.upload_limit->Reserve(piece_bytes);
      if (wait > Duration(0)) {
        self->write_pacing_.expires_after(wait);
        co_await self->write_pacing_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        if (self->failed()) co_return asio::error::operation_aborted;
      }
      ec = co_await self->channel_->Write(piece);
      if (ec) co_return ec;
    }
    co_return std::error_code();
  }

  static awaitable<void> ReadLoop(std::shared_ptr<TcpConn> self) {
    std::error_code ec;
    for (;;) {
      Result<Frame> frame = co_await ReadFrame(
          *self->channel_, self->options_.max_frame_bytes, self->options_.download_limit.get(),
          &self->read_pacing_, &self->last_received_ns_, &self->reader_paused_);
      if (!frame.ok()) {
        // A peer hanging up cleanly is routine; anything else is worth a line.
        const bool clean_close = frame.status().reason() == Reason::kPeerClosed;
        self->Fail(frame.status(), !clean_close);
        co_return;
      }
      self->last_received_ns_ = SteadyNowNs();
      if (frame->type == FrameType::kPing) continue;
      if (frame->type == FrameType::kHello || frame->type == FrameType::kAuth) {
        self->Fail(Corrupt("handshake frame after the handshake"), true);
        co_return;
      }
      if (frame->type == FrameType::kError) {
        self->Fail(Handshake::ReportedError(*frame), true);
        co_return;
      }
      bool pause = false;
      bool push = false;
      {
        // One section: a frame is either queued before Deliver takes the backlog, or pushed.
        std::lock_guard lock(self->mu_);
        if (!self->status_.ok()) co_return;
        push = self->pushing_;
        if (!push) {
          self->recv_bytes_ += frame->body.size();
          self->recv_queue_.push_back(std::move(*frame));
          pause = self->recv_bytes_ >= self->options_.receive_queue_bytes;
          self->reader_waiting_ = pause;
          self->reader_paused_ = pause;
        }
      }
      if (push) {
        // Deliver may still be handing over the backlog: this waits for it, keeping the order.
        std::lock_guard handler_lock(self->handler_mu_);
        if (self->handler_) self->handler_(std::move(*frame));
        continue;
      }
      self->cv_.notify_all();
      if (pause) {
        // Stop reading until Receive drains the queue; TCP flow control then
        // slows the peer.
        self->read_wake_.expires_at(asio::steady_timer::time_point::max());
        co_await self->read_wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        self->last_received_ns_ = SteadyNowNs();  // silence while paused was ours, not the peer's
        self->reader_paused_ = false;
        if (self->failed()) co_return;
      }
    }
  }

  static awaitable<void> Watchdog(std::shared_ptr<TcpConn> self) {
    std::error_code ec;
    const Duration timeout = self->options_.keepalive_timeout;
    const Duration period = std::max<Duration>(std::chrono::milliseconds(10), timeout / 4);
    for (;;) {
      self->watchdog_.expires_after(period);
      co_await self->watchdog_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (self->failed()) co_return;
      if (self->reader_paused_) {
        self->last_received_ns_ = SteadyNowNs();
        continue;
      }
      int64_t silent_ns = SteadyNowNs() - self->last_received_ns_;
      if (silent_ns > timeout.count()) {
        self->Fail(DeadlineExceeded("keepalive: nothing heard from peer for " +
                                    std::to_string(silent_ns / 1000000) + " ms"),
                   true);
        co_return;
      }
    }
  }

  std::shared_ptr<Shared> shared_;
  const Options& options_;
  asio::any_io_executor strand_;
  std::unique_ptr<TcpChannel> channel_;
  asio::steady_timer write_wake_;
  asio::steady_timer read_wake_;
  asio::steady_timer watchdog_;
  asio::steady_timer write_pacing_;
  asio::steady_timer read_pacing_;
  const PeerInfo peer_;
  std::vector<uint8_t> peer_certificate_;  // set once in the constructor

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Status status_;
  std::deque<OutFrame> send_queue_;     // chunk frames
  std::deque<OutFrame> control_queue_;  // everything else: written before any chunk frame
  size_t send_bytes_ = 0;               // queued or being written, both queues
  size_t control_bytes_ = 0;
  size_t data_bytes_ = 0;
  bool flushed_before_failure_ = false;
  bool writer_waiting_ = false;
  std::deque<Frame> recv_queue_;
  size_t recv_bytes_ = 0;
  bool pushing_ = false;  // frames go to handler_, not recv_queue_ (Deliver)
  // Push delivery (Connection::DeliverFrames): held across every handler call, never under mu_.
  std::mutex handler_mu_;
  Connection::FrameHandler handler_;  // empty before Deliver and once the end was delivered
  bool reader_waiting_ = false;
  std::atomic<bool> reader_paused_{false};
  std::atomic<int64_t> last_received_ns_{0};
};

class TcpConnection : public Connection {
 public:
  explicit TcpConnection(std::shared_ptr<TcpConn> conn) : conn_(std::move(conn)) {}
  ~TcpConnection() override { Close(); }
  const PeerInfo& peer() const override { return conn_->peer(); }
  Status Send(OutFrame frame, Duration timeout) override {
    return conn_->Send(std::move(frame), timeout);
  }
  Result<Frame> Receive(Duration timeout) override { return conn_->Receive(timeout); }
  bool CanDeliverFrames() const override { return true; }
  bool DeliverFrames(FrameHandler handler) override { return conn_->Deliver(std::move(handler)); }
  Status Flush(Duration timeout) override { return conn_->Flush(timeout); }
  void Close() override {
    conn_->Fail(Unavailable("connection closed by this node").WithReason(Reason::kClosedHere),
                false);
  }
  Status status() const override { return conn_->status(); }

 private:
  std::shared_ptr<TcpConn> conn_;
};

// One accepted socket still in the handshake, as the listener's admission control sees it.
struct PendingHandshake {
  std::string source;            // the peer's IP address, without the port
  std::string from;              // address:port, for the log
  asio::any_io_executor strand;  // the handshake's strand; the socket is touched only there
  tcp::socket* socket = nullptr;
  // The socket's descriptor, for a FIONREAD from the accept loop (never for I/O): once the
  // handshake closed it, a reused number misjudges one admission at worst.
  int fd = -1;
  std::chrono::steady_clock::time_point accepted_at{};
  std::atomic<bool> spoke{false};  // the peer's Hello was accepted
  // Only touched on `strand`.
  bool done = false;                   // the handshake returned; `socket` may be gone
  std::optional<Status> closed_early;  // why this node closed it before the handshake ended

  // Closes the socket, which ends the handshake with `why`, unless it already ended. Runs on
  // `strand`.
  void CloseEarly(Status why) {
    if (done || closed_early) return;
    closed_early = std::move(why);
    std::error_code ignored;
    socket->close(ignored);
  }
};

// Silent (net/admission.h): nothing came from the peer, neither an accepted Hello nor a byte
// waiting in the socket.
bool Silent(const PendingHandshake& p) {
  if (p.spoke.load()) return false;
  int waiting = 0;
  return !(p.fd >= 0 && ::ioctl(p.fd, FIONREAD, &waiting) == 0 && waiting > 0);
}

// The pending handshake a new connection from `source` displaces (net/admission.h), removed
// from `pending`; null when there is room. With the listener's pending_mu held.
std::shared_ptr<PendingHandshake> TakeDisplaced(
    std::list<std::shared_ptr<PendingHandshake>>& pending, const std::string& source,
    const Options& options, Status* why) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<HandshakeSlot> slots;
  slots.reserve(pending.size());
  for (const auto& p : pending) {
    slots.push_back(
        {p->source, Silent(*p), std::chrono::duration_cast<Duration>(now - p->accepted_at)});
  }
  std::optional<Displacement> d = PickDisplaced(slots, source, options);
  if (!d) return nullptr;
  auto it = std::next(pending.begin(), static_cast<std::ptrdiff_t>(d->index));
  std::shared_ptr<PendingHandshake> displaced = *it;
  pending.erase(it);
  *why = std::move(d->why);
  return displaced;
}

struct ListenerState {
  explicit ListenerState(tcp::acceptor a) : acceptor(std::move(a)) {}
  tcp::acceptor acceptor;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<TcpConn>> ready;
  bool closed = false;
  // Accepted sockets still in the handshake, oldest first (bounded by TakeDisplaced).
  std::mutex pending_mu;
  std::list<std::shared_ptr<PendingHandshake>> pending;

  // Stops accepting; safe from any thread but the io threads. Blocks until the
  // acceptor closed.
  void Close() {
    {
      std::lock_guard lock(mu);
      if (closed) return;
      closed = true;
      for (auto& c : ready) c->Fail(Unavailable("listener closed"), false);
      ready.clear();
    }
    cv.notify_all();
    std::promise<void> finished;
    asio::post(acceptor.get_executor(), [this, &finished] {
      std::error_code ec;
      acceptor.close(ec);
      finished.set_value();
    });
    finished.get_future().wait();
  }
};

// Tracks live connections and listeners so that the transport's destructor can
// close them.
struct Registry {
  std::mutex mu;
  std::vector<std::weak_ptr<TcpConn>> conns;
  std::vector<std::weak_ptr<ListenerState>> listeners;
  void AddListener(const std::shared_ptr<ListenerState>& l) {
    std::lock_guard lock(mu);
    listeners.push_back(l);
  }
  void Add(const std::shared_ptr<TcpConn>& c) {
    std::lock_guard lock(mu);
    std::erase_if(conns, [](const auto& w) { return w.expired(); });
    conns.push_back(c);
  }
  void CloseAll() {
    std::vector<std::shared_ptr<TcpConn>> live;
    std::vector<std::shared_ptr<ListenerState>> open;
    {
      std::lock_guard lock(mu);
      for (auto& w : listeners) {
        if (auto l = w.lock()) open.push_back(std::move(l));
      }
      for (auto& w : conns) {
        if (auto c = w.lock()) live.push_back(std::move(c));
      }
    }
    for (auto& l : open) l->Close();
    for (auto& c : live) c->Fail(Unavailable("transport shut down"), false);
  }
  // Checks every open connection's certificate again (TlsOptions::check_peer) and closes those
  // that no longer pass, logging why.
  void RecheckPeers(const TlsOptions& tls) {
    std::vector<std::shared_ptr<TcpConn>> live;
    {
      std::lock_guard lock(mu);
      std::erase_if(conns, [](const auto& w) { return w.expired(); });
      for (auto& w : conns) {
        if (auto c = w.lock()) live.push_back(std::move(c));
      }
    }
    for (auto& c : live) {
      if (c->peer_certificate().empty()) continue;
      const Status allowed = tls.check_peer(c->peer_certificate(), c->peer());
      if (!allowed.ok()) {
        c->Fail(Unauthenticated("the peer's certificate no longer passes: " + allowed.message()),
                true);
      }
    }
  }
};

class TcpListener : public Listener {
 public:
  TcpListener(std::shared_ptr<Shared> shared, std::shared_ptr<Registry> registry,
              tcp::acceptor acceptor)
      : shared_(std::move(shared)),
        registry_(std::move(registry)),
        state_(std::make_shared<State>(std::move(acceptor))) {
    registry_->AddListener(state_);
    std::error_code ec;
    address_ = EndpointString(state_->acceptor.local_endpoint(ec));
    asio::co_spawn(state_->acceptor.get_executor(), AcceptLoop(shared_, registry_, state_),
                   asio::detached);
  }
  ~TcpListener() override { Close(); }

  Result<std::unique_ptr<Connection>> Accept(Duration timeout) override {
    std::unique_lock lock(state_->mu);
    bool got = WaitFor(state_->cv, lock, timeout,
                       [&] { return !state_->ready.empty() || state_->closed; });
    if (state_->ready.empty()) {
      if (state_->closed) return Unavailable("listener " + address_ + " is closed");
      if (!got) return DeadlineExceeded("no peer connected within the timeout");
    }
    auto conn = std::move(state_->ready.front());
    state_->ready.pop_front();
    return std::unique_ptr<Connection>(std::make_unique<TcpConnection>(std::move(conn)));
  }

  std::string address() const override { return address_; }

  void Close() override { state_->Close(); }

 private:
  using State = ListenerState;

  static awaitable<void> HandshakeAccepted(std::shared_ptr<Shared> shared,
                                           std::shared_ptr<Registry> registry,
                                           std::shared_ptr<State> state,
                                           std::unique_ptr<TcpChannel> channel,
                                           std::shared_ptr<PendingHandshake> pending) {
    const Options& options = shared->options;
    // On every way out of this coroutine, the early co_returns included (all on the strand):
    // the socket is no longer ours to close, and the slot is free.
    struct Release {
      State& state;
      std::shared_ptr<PendingHandshake> pending;
      ~Release() {
        pending->done = true;
        std::lock_guard lock(state.pending_mu);
        state.pending.remove(pending);
      }
    } release{*state, pending};
    // The handlers may run after this frame is gone (expired just before cancel): CloseEarly
    // checks `done` before touching the socket.
    asio::steady_timer hello_deadline(channel->socket().get_executor());
    hello_deadline.expires_after(options.hello_timeout);
    Status silent = DeadlineExceeded(
        "sent no Hello within " +
        std::to_string(
            std::chrono::duration_cast<std::chrono::milliseconds>(options.hello_timeout).count()) +
        " ms");
    hello_deadline.async_wait([pending, silent](std::error_code e) {
      if (e || pending->spoke.load()) return;
      pending->CloseEarly(silent);
    });
    asio::steady_timer deadline(channel->socket().get_executor());
    deadline.expires_after(options.handshake_timeout);
    deadline.async_wait([pending](std::error_code e) {
      if (e) return;
      pending->CloseEarly(DeadlineExceeded("handshake did not finish in time"));
    });
    Result<PeerInfo> peer =
        co_await SecureAndAuthenticate(*shared, *channel, /*initiator=*/false, &pending->spoke);
    pending->done = true;
    hello_deadline.cancel();
    deadline.cancel();
    if (!peer.ok()) {
      Status why = pending->closed_early ? *pending->closed_early : peer.status();
      options.log("tcp: refused peer " + pending->from + ": " + why.ToString());
      co_return;
    }
    auto conn = std::make_shared<TcpConn>(shared, std::move(channel), std::move(*peer));
    {
      std::lock_guard lock(state->mu);
      if (state->closed) co_return;
      registry->Add(conn);
      conn->Start();
      state->ready.push_back(conn);
    }
    state->cv.notify_all();
  }

  static awaitable<void> AcceptLoop(std::shared_ptr<Shared> shared,
                                    std::shared_ptr<Registry> registry,
                                    std::shared_ptr<State> state) {
    for (;;) {
      std::error_code ec;
      tcp::socket socket(asio::make_strand(shared->io));
      co_await state->acceptor.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted || !state->acceptor.is_open()) co_return;
        shared->options.log("tcp: accept failed: " + ec.message());
        continue;
      }
      auto pending = std::make_shared<PendingHandshake>();
      tcp::endpoint remote = socket.remote_endpoint(ec);
      pending->source = ec ? "?" : remote.address().to_string();
      pending->from = ec ? "?" : EndpointString(remote);
      pending->strand = socket.get_executor();
      auto channel = std::make_unique<TcpChannel>(std::move(socket), shared->bytes);
      pending->socket = &channel->socket();  // a TcpChannel never moves
      pending->fd = channel->socket().native_handle();
      pending->accepted_at = std::chrono::steady_clock::now();
      std::shared_ptr<PendingHandshake> displaced;
      Status why;
      {
        std::lock_guard lock(state->pending_mu);
        displaced = TakeDisplaced(state->pending, pending->source, shared->options, &why);
        state->pending.push_back(pending);
      }
      if (displaced) {
        asio::post(displaced->strand, [displaced, why] { displaced->CloseEarly(why); });
      }
      asio::co_spawn(pending->strand,
                     HandshakeAccepted(shared, registry, state, std::move(channel), pending),
                     asio::detached);
    }
  }

  std::shared_ptr<Shared> shared_;
  std::shared_ptr<Registry> registry_;
  std::shared_ptr<State> state_;
  std::string address_;
};

class TcpTransportImpl : public Transport {
 public:
  TcpTransportImpl(Options options, int io_threads, std::unique_ptr<asio::ssl::context> tls)
      : shared_(MakeShared(std::move(options), std::move(tls))),
        registry_(std::make_shared<Registry>()),
        work_(asio::make_work_guard(shared_->io)) {
    for (int i = 0; i < std::max(io_threads, 1); ++i) {
      threads_.emplace_back([shared = shared_] { shared->io.run(); });
    }
    if (shared_->tls != nullptr && shared_->options.tls.check_peer) {
      recheck_ = std::thread([this] { RecheckLoop(); });
    }
  }

  ~TcpTransportImpl() override {
    {
      std::lock_guard lock(recheck_mu_);
      stopping_ = true;
    }
    recheck_cv_.notify_all();
    if (recheck_.joinable()) recheck_.join();
    registry_->CloseAll();
    work_.reset();
    // Every socket and timer is closed, so the loops finish and run() returns;
    // stop() is a backstop for a handler we did not foresee.
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  Capabilities capabilities() const override {
    // Under TLS payloads are encrypted into OpenSSL's buffers: no longer
    // zero-copy.
    return {shared_->tls ? "tcp+tls" : "tcp", shared_->tls == nullptr, true};
  }

  TransportStats stats() const override {
    return {shared_->bytes.received.load(std::memory_order_relaxed),
            shared_->bytes.sent.load(std::memory_order_relaxed)};
  }

  Result<std::unique_ptr<Listener>> Listen(std::string_view address) override {
    WC_ASSIGN_OR_RETURN(tcp::endpoint endpoint, ParseEndpoint(address));
    try {
      tcp::acceptor acceptor(asio::make_strand(shared_->io));
      acceptor.open(endpoint.protocol());
      acceptor.set_option(tcp::acceptor::reuse_address(true));
      acceptor.bind(endpoint);
      acceptor.listen(asio::socket_base::max_listen_connections);
      return std::unique_ptr<Listener>(
          std::make_unique<TcpListener>(shared_, registry_, std::move(acceptor)));
    } catch (const std::system_error& e) {
      return IoError("listen on " + std::string(address) + ": " + e.what());
    }
  }

  Result<std::unique_ptr<Connection>> Connect(std::string_view address, Duration timeout) override {
    WC_ASSIGN_OR_RETURN(tcp::endpoint endpoint, ParseEndpoint(address));
    auto promise = std::make_shared<std::promise<Result<std::unique_ptr<Connection>>>>();
    auto future = promise->get_future();
    StartConnect(shared_, registry_, std::string(address), endpoint, timeout,
                 [promise](Result<std::unique_ptr<Connection>> conn) {
                   promise->set_value(std::move(conn));
                 });
    return future.get();
  }

  bool CanConnectAsync() const override { return true; }
  // A host name is resolved on the I/O threads too (asio's resolver), an address parsed at once.
  void ConnectAsync(std::string_view address, Duration timeout, ConnectDone done) override {
    Result<HostPort> parsed = ParseHostPort(address);
    if (!parsed.ok()) {
      done(parsed.status());
      return;
    }
    std::error_code ec;
    const asio::ip::address ip = asio::ip::make_address(parsed->host, ec);
    if (!ec) {
      StartConnect(shared_, registry_, std::string(address), tcp::endpoint(ip, *parsed->port),
                   timeout, std::move(done));
      return;
    }
    auto resolver = std::make_shared<tcp::resolver>(shared_->io);
    resolver->async_resolve(
        parsed->host, std::to_string(*parsed->port),
        [shared = shared_, registry = registry_, resolver, address = std::string(address), timeout,
         done = std::move(done)](std::error_code error,
                                 const tcp::resolver::results_type& found) mutable {
          if (error || found.empty()) {
            done(Unavailable("address '" + address + "': cannot resolve: " + error.message()));
            return;
          }
          // IPv4 first, as ParseEndpoint: a listener given "localhost" binds 127.0.0.1.
          tcp::endpoint pick = found.begin()->endpoint();
          for (const auto& entry : found) {
            if (entry.endpoint().address().is_v4()) {
              pick = entry.endpoint();
              break;
            }
          }
          StartConnect(shared, registry, address, pick, timeout, std::move(done));
        });
  }

 private:
  static std::shared_ptr<Shared> MakeShared(Options options,
                                            std::unique_ptr<asio::ssl::context> tls) {
    auto shared = std::make_shared<Shared>(std::move(options));
    shared->tls = std::move(tls);
    return shared;
  }

  // Connects and authenticates on a strand of the I/O threads; `done` gets the started
  // connection or why not, there.
  static void StartConnect(const std::shared_ptr<Shared>& shared,
                           const std::shared_ptr<Registry>& registry, std::string address,
                           tcp::endpoint endpoint, Duration timeout, ConnectDone done) {
    const Duration limit = timeout == kForever ? shared->options.handshake_timeout : timeout;
    auto finish = [shared, registry, address = std::move(address),
                   done = std::move(done)](Result<std::shared_ptr<TcpConn>> conn) {
      if (!conn.ok()) {
        shared->options.log("tcp: connect to " + address + " failed: " + conn.status().ToString());
        done(conn.status());
        return;
      }
      registry->Add(*conn);
      (*conn)->Start();
      done(std::unique_ptr<Connection>(std::make_unique<TcpConnection>(std::move(*conn))));
    };
    asio::co_spawn(asio::make_strand(shared->io),
                   DoConnect(shared, std::move(endpoint), limit, std::move(finish)),
                   asio::detached);
  }

  static awaitable<void> DoConnect(std::shared_ptr<Shared> shared, tcp::endpoint endpoint,
                                   Duration timeout,
                                   std::function<void(Result<std::shared_ptr<TcpConn>>)> finish) {
    auto executor = co_await asio::this_coro::executor;
    auto channel = std::make_unique<TcpChannel>(tcp::socket(executor), shared->bytes);
    tcp::socket& socket = channel->socket();
    asio::steady_timer deadline(executor);
    auto timed_out = std::make_shared<bool>(false);
    auto done = std::make_shared<bool>(false);
    if (timeout != kForever) {
      deadline.expires_after(timeout);
      deadline.async_wait([sock = &socket, timed_out, done](std::error_code e) {
        if (e || *done) return;
        *timed_out = true;
        std::error_code ignored;
        sock->close(ignored);
      });
    }
    std::error_code ec;
    co_await socket.async_connect(endpoint, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      *done = true;
      deadline.cancel();
      finish(*timed_out
                 ? DeadlineExceeded("connect timed out")
                 : Unavailable("connect to " + EndpointString(endpoint) + ": " + ec.message()));
      co_return;
    }
    Result<PeerInfo> peer = co_await SecureAndAuthenticate(*shared, *channel, /*initiator=*/true);
    *done = true;
    deadline.cancel();
    if (!peer.ok()) {
      finish(*timed_out ? DeadlineExceeded("handshake timed out") : peer.status());
      co_return;
    }
    finish(std::make_shared<TcpConn>(shared, std::move(channel), std::move(*peer)));
  }

  // A certificate revoked while its connection is open is cut off at the next recheck (docs/
  // security.md): the trust anchor reads a new CRL within a second of its arrival.
  void RecheckLoop() {
    const TlsOptions& tls = shared_->options.tls;
    std::unique_lock lock(recheck_mu_);
    while (!recheck_cv_.wait_for(lock, tls.recheck_every, [this] { return stopping_; })) {
      lock.unlock();
      registry_->RecheckPeers(tls);
      lock.lock();
    }
  }

  std::shared_ptr<Shared> shared_;
  std::shared_ptr<Registry> registry_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
  std::mutex recheck_mu_;
  std::condition_variable recheck_cv_;
  bool stopping_ = false;
  std::thread recheck_;
};

}  // namespace

Result<std::unique_ptr<Transport>> TcpTransport::Create(Options options, int io_threads) {
  if (options.secret.size() < kMinSecretBytes) {
    return InvalidArgument("the cluster secret must hold at least " +
                           std::to_string(kMinSecretBytes) + " bytes");
  }
  std::unique_ptr<asio::ssl::context> tls;
  if (options.tls.enabled) {
    try {
      tls = MakeTlsContext(options.tls);
    } catch (const std::system_error& e) {
      return InvalidArgument("TLS setup (cert " + options.tls.cert_file + ", key " +
                             options.tls.key_file + ", CA " + options.tls.ca_file +
                             "): " + e.what());
    }
  }
  try {
    return std::unique_ptr<Transport>(
        std::make_unique<TcpTransportImpl>(std::move(options), io_threads, std::move(tls)));
  } catch (const std::exception& e) {
    return Internal(std::string("tcp transport: ") + e.what());
  }
}

}  // namespace weightcast::net

#if defined(WC_NET_POP_NO_SANITIZE_FUNCTION)
#pragma clang attribute pop
#endif
