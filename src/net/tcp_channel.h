// A connected TCP socket as the TCP transport reads and writes it: optionally wrapped in TLS
// (net/tls_session.h), with a read-ahead buffer so that a burst of small frames costs one read
// system call, and the transport's byte counts. A TcpChannel never moves once created (the TLS
// session refers to its socket), so it lives behind a unique_ptr. One read and one write may be
// outstanding at the same time, from the connection's strand.
//
// Private to the TCP transport; include after net/asio_coroutines.h (asio needs it before its
// first header).
#pragma once

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <system_error>
#include <vector>

#include "net/tls_session.h"

namespace asio::ssl {
class context;
}

namespace weightcast::net {

// A connection's read-ahead buffer (TcpChannel::ReadExact).
inline constexpr size_t kReadAheadBytes = 64u << 10;

// The steady clock in nanoseconds: the keepalive watchdog's time of the last progress.
int64_t SteadyNowNs();

// asio's transfer_all caps each read/write system call at 64 KiB and goes back through the event
// loop between calls; for multi-megabyte chunks that costs more than the copy itself. This
// condition lets one sendmsg/recvmsg move as much as the kernel takes.
struct TransferAllLarge {
  size_t operator()(const std::error_code& ec, size_t) const { return ec ? 0 : (64u << 20); }
};

// As TransferAllLarge, and records the time of every partial read, so that a large frame
// arriving slowly (shaped link, rate limit) is progress, not silence, to the keepalive watchdog.
struct TransferAllNotingProgress {
  std::atomic<int64_t>* last_progress_ns;
  size_t operator()(const std::error_code& ec, size_t) const {
    if (last_progress_ns != nullptr) *last_progress_ns = SteadyNowNs();
    return ec ? 0 : (64u << 20);
  }
};

// Bytes read and written by every channel of a transport: one relaxed add per completed read
// or write, never per byte.
struct WireBytes {
  std::atomic<uint64_t> received{0};
  std::atomic<uint64_t> sent{0};
};

class TcpChannel {
 public:
  // `bytes` must outlive the channel (the transport's shared state holds it).
  TcpChannel(asio::ip::tcp::socket socket, WireBytes& bytes)
      : socket_(std::move(socket)), bytes_(bytes) {}
  asio::ip::tcp::socket& socket() { return socket_; }
  bool tls() const { return tls_ != nullptr; }

  // The certificate the TLS peer presented, DER (empty without TLS or certificate).
  std::vector<uint8_t> PeerCertificateDer() const;

  asio::awaitable<std::error_code> StartTls(asio::ssl::context& context, bool client);

  // Reads exactly out.size() bytes, stamping `progress` (optional) at every partial read. What
  // the peer sent beyond them is kept for the next call: small frames (requests, HAVEs, the
  // few-KiB payloads of a delta step) then arrive many to one read system call instead of at
  // least two each (header, body). A rest of kReadAheadBytes or more is read straight into `out`.
  asio::awaitable<std::error_code> ReadExact(std::span<uint8_t> out,
                                             std::atomic<int64_t>* progress);

  template <typename Buffers>
  asio::awaitable<std::error_code> Write(const Buffers& buffers) {
    std::error_code ec;
    size_t n = 0;
    if (tls_) {
      for (auto it = asio::buffer_sequence_begin(buffers);
           !ec && it != asio::buffer_sequence_end(buffers); ++it) {
        const asio::const_buffer piece(*it);
        ec = co_await tls_->Write({static_cast<const uint8_t*>(piece.data()), piece.size()});
        if (!ec) n += piece.size();
      }
    } else {
      n = co_await asio::async_write(socket_, buffers, TransferAllLarge{},
                                     asio::redirect_error(asio::use_awaitable, ec));
    }
    bytes_.sent.fetch_add(n, std::memory_order_relaxed);
    co_return ec;
  }

 private:
  // Moves what is read ahead into the front of `out`; returns the bytes moved.
  size_t TakeAhead(std::span<uint8_t> out);
  // Reads all of `out` (one buffer), `condition` told of every partial read.
  asio::awaitable<std::error_code> ReadAll(std::span<uint8_t> out,
                                           TransferAllNotingProgress condition);

  asio::ip::tcp::socket socket_;
  WireBytes& bytes_;
  std::unique_ptr<TlsSession> tls_;
  // Bytes read beyond the last frame: [ahead_begin_, ahead_end_) of ahead_ (ReadExact).
  std::vector<uint8_t> ahead_;
  size_t ahead_begin_ = 0;
  size_t ahead_end_ = 0;
};

}  // namespace weightcast::net
