// The transport interface: authenticated, framed, bounded connections between
// nodes. One narrow interface, several implementations chosen at construction:
// TCP on asio coroutines (tcp_transport.h), in-memory with a fake clock for
// tests (memory_transport.h), and UCX over RDMA, shared memory or TCP
// (ucx_transport.h, docs/transport_ucx.md). Callers hold only these types, so
// a new transport touches no caller and no header here.
//
// Threading: every call below is safe from any thread. Blocking calls take a
// timeout measured on the transport's clock (real or fake) and return
// kDeadlineExceeded when it passes; a connection that failed or was closed
// returns its sticky failure status from every call.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <weightcast/status.h>

#include "net/clock.h"
#include "net/frame.h"
#include "net/handshake.h"
#include "net/rate_limiter.h"

namespace weightcast::net {

inline constexpr Duration kForever = Duration::max();

// Receives one line per event worth an operator's attention (a refused or
// dropped peer and why). Called from transport threads; must be thread-safe and
// quick.
using LogFn = std::function<void(std::string_view line)>;
void LogToStderr(std::string_view line);

// TLS 1.3 (OpenSSL via asio::ssl) for untrusted networks: encrypts each connection
// and makes both sides present a certificate that chains to the cluster CA; the
// HMAC handshake still runs inside it. Off by default: on a trusted network it
// costs CPU and the zero-copy send. TCP only (the in-memory transport ignores
// it). Host names are not checked: trust is the CA.
struct TlsOptions {
  bool enabled = false;
  std::string cert_file;  // PEM certificate (chain) of this node
  std::string key_file;   // PEM private key of that certificate
  std::string ca_file;    // PEM certificate(s) of the cluster CA
  // Called once the peer's Hello names the id and role it claims, with the certificate it
  // presented (DER, already chained to the CA by TLS): an error refuses the connection, and the
  // peer is told why (docs/security.md: a certificate must hold the role its node claims, and
  // name its id when it names one). Null: any certificate of the CA may claim anything. Called
  // from transport threads.
  std::function<Status(std::span<const uint8_t> certificate_der, const PeerInfo& claimed)>
      check_peer{};
  // With check_peer: how often every open connection's certificate is checked again, so that a
  // certificate revoked (or expired) while its connection is open is cut off within about this
  // long, with the reason logged, not only refused at the next connect.
  Duration recheck_every = std::chrono::seconds(1);
  // For a transport without TLS (UCX): the same identities, proven in the handshake instead
  // (net/handshake.h, KeyProof). With `enabled`, UCX requires it; TCP does not use it.
  std::shared_ptr<const KeyProof> key_proof{};
};

struct Options {
  Identity self;
  std::string secret;  // the cluster secret (LoadClusterSecret); never from argv
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
  // Backpressure: Send blocks while this many bytes are queued and not yet
  // written. A frame larger than the bound is still accepted when the queue is
  // empty.
  size_t send_queue_bytes = 32u << 20;
  // Received frames not yet taken by Receive; past this the transport stops
  // reading the socket and TCP flow control slows the sender.
  size_t receive_queue_bytes = 32u << 20;
  Duration handshake_timeout = std::chrono::seconds(5);
  // An accepted peer must have sent a Hello this node accepts (under TLS: finished the TLS
  // handshake first) within hello_timeout; until then it is "silent". A real node sends its
  // Hello as soon as it connects, so this closes idle sockets long before handshake_timeout.
  Duration hello_timeout = std::chrono::seconds(3);
  // Accepted sockets a listener holds in the handshake at once, overall and silent ones per
  // source IP address. A new connection is never refused for want of a slot: it displaces the
  // oldest silent pending connection of its source address when that address is at its cap,
  // else, when the listener is full, the oldest silent one of any address (the oldest pending
  // one when none is silent). A flood of idle sockets, which needs no key, thus cannot hold
  // slots against peers that complete the handshake (docs/wire_format.md, "Handshake").
  uint32_t max_pending_handshakes = 64;
  uint32_t max_silent_handshakes_per_source = 8;
  // The per-source rule spares connections younger than this: a real peer's Hello may still be
  // unread when many of one address connect at once on a loaded machine.
  Duration silent_grace = std::chrono::milliseconds(250);
  // A Ping goes out when nothing was sent for keepalive_interval; a peer from
  // which nothing (not even a Ping) arrived for keepalive_timeout is declared
  // dead and the connection fails with kDeadlineExceeded.
  Duration keepalive_interval = std::chrono::seconds(1);
  Duration keepalive_timeout = std::chrono::seconds(5);
  // Per-process rate limits, shared by every connection of the transport; null
  // = unlimited.
  std::shared_ptr<TokenBucket> upload_limit;
  std::shared_ptr<TokenBucket> download_limit;
  LogFn log = LogToStderr;
  TlsOptions tls;
};

// What a transport can do, for callers that pick strategies (e.g. zero-copy
// file sends).
struct Capabilities {
  std::string name;             // "tcp", "memory"
  bool zero_copy_send = false;  // chunk payloads are written from caller memory, not copied
  bool crosses_hosts = false;
};

class Connection {
 public:
  virtual ~Connection() = default;  // closes the connection (as Close)

  // The authenticated peer. Never blocks.
  virtual const PeerInfo& peer() const = 0;

  // Queues `frame` for sending. Blocks while the connection's send queue is
  // full (backpressure) until there is room, `timeout` passes
  // (kDeadlineExceeded, frame not queued) or the connection fails. Ownership:
  // the frame's owned bytes move into the transport; a payload that views
  // caller memory must stay valid until `frame.keep_alive` is released, which
  // the transport does once the bytes are written (or the connection closes).
  virtual Status Send(OutFrame frame, Duration timeout = kForever) = 0;

  // Blocks until a frame arrives (returned; the caller owns it), `timeout`
  // passes (kDeadlineExceeded; the connection stays usable) or the connection
  // fails (its status). Pings are consumed by the transport and never returned.
  virtual Result<Frame> Receive(Duration timeout = kForever) = 0;

  // Blocks until every queued frame was handed to the network, or `timeout`.
  virtual Status Flush(Duration timeout = kForever) = 0;

  // Push delivery, for callers that serve many connections without a thread each: from now on
  // every received frame goes to `handler` (frames that arrived before the call first, in
  // order), then the connection's end status once, after which the handler is dropped. Receive
  // must not be called after a successful call. The handler runs on a transport thread (or, with
  // the end status, inside Close()), one call at a time; it must be quick and must not block on
  // this connection: queue the frame and return. No call starts after Close() returned; the
  // destructor closes, so what the handler touches must outlive the connection (or its Close).
  // Returns false, and changes nothing, when this connection cannot push (then use Receive).
  using FrameHandler = std::function<void(Result<Frame>)>;
  // Whether DeliverFrames is supported here (asked before it, by callers that must choose
  // between it and a thread of their own before the first frame can arrive). Never blocks.
  virtual bool CanDeliverFrames() const { return false; }
  // By value: an implementation keeps the handler.
  // NOLINTNEXTLINE(performance-unnecessary-value-param)
  virtual bool DeliverFrames(FrameHandler /*handler*/) { return false; }

  // Never blocks; idempotent. Queued frames that were not written are dropped;
  // blocked Send and Receive calls return kUnavailable.
  virtual void Close() = 0;

  // OK while open; otherwise why it ended. Never blocks.
  virtual Status status() const = 0;

  // Convenience: Send of a control frame (copies `body`).
  Status SendControl(std::span<const uint8_t> body, Duration timeout = kForever) {
    return Send(OutFrame::Make(FrameType::kControl, std::vector<uint8_t>(body.begin(), body.end())),
                timeout);
  }
  // Convenience: Send of a chunk whose payload stays owned by the caller via
  // `keep_alive`.
  Status SendChunk(const ChunkHeader& header, std::span<const uint8_t> payload,
                   std::shared_ptr<const void> keep_alive, Duration timeout = kForever) {
    return Send(OutFrame::Chunk(header, payload, std::move(keep_alive)), timeout);
  }
};

class Listener {
 public:
  virtual ~Listener() = default;  // stops accepting (as Close)
  // Blocks until a peer completed the handshake, `timeout` passes, or the
  // listener closes. Peers that fail the handshake are logged and dropped here;
  // they never surface.
  virtual Result<std::unique_ptr<Connection>> Accept(Duration timeout = kForever) = 0;
  // The bound address, e.g. "127.0.0.1:41234" when listening on port 0.
  virtual std::string address() const = 0;
  virtual void Close() = 0;
};

// Bytes a transport moved over all its connections (for /metrics).
struct TransportStats {
  uint64_t bytes_received = 0;
  uint64_t bytes_sent = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;  // closes listeners and connections it created
  virtual Capabilities capabilities() const = 0;
  // Frame bytes (headers and bodies; handshakes and pings included) read and written by every
  // connection since the transport was created; under TLS, the bytes before encryption. Never
  // blocks; any thread. A transport that does not count returns zeros.
  virtual TransportStats stats() const { return {}; }
  // Never blocks.
  virtual Result<std::unique_ptr<Listener>> Listen(std::string_view address) = 0;
  // Blocks until connected and authenticated, or `timeout` / failure (the
  // handshake's status: kUnauthenticated, kFailedPrecondition, kCorrupt,
  // kAborted, kUnavailable).
  virtual Result<std::unique_ptr<Connection>> Connect(
      std::string_view address, Duration timeout = std::chrono::seconds(10)) = 0;

  using ConnectDone = std::function<void(Result<std::unique_ptr<Connection>>)>;
  // Whether ConnectAsync returns at once (TCP: the connect and handshake run on the I/O threads;
  // memory: in-process). False: ConnectAsync is Connect, blocking, and a caller that connects to
  // many peers runs it on a few threads of its own.
  virtual bool CanConnectAsync() const { return false; }
  // What Connect returns, handed to `done` once: on a thread of the transport's, or on the
  // caller's when the answer is known at once (a malformed address, an in-memory peer). `done`
  // must not block. The default blocks in Connect.
  // NOLINTNEXTLINE(performance-unnecessary-value-param): overrides keep it, so it is by value
  virtual void ConnectAsync(std::string_view address, Duration timeout, ConnectDone done) {
    done(Connect(address, timeout));
  }
};

}  // namespace weightcast::net
