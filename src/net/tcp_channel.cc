#include "net/asio_coroutines.h"  // before any asio header, which tcp_channel.h includes

#include "net/tcp_channel.h"

#include <asio/read.hpp>
#include <asio/ssl/context.hpp>

#include <openssl/x509.h>

#include <chrono>
#include <cstring>
#include <tuple>

namespace weightcast::net {

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<uint8_t> TcpChannel::PeerCertificateDer() const {
  if (!tls_) return {};
  X509* cert = SSL_get1_peer_certificate(tls_->native_handle());
  if (cert == nullptr) return {};
  std::vector<uint8_t> der;
  const int size = i2d_X509(cert, nullptr);
  if (size > 0) {
    der.resize(static_cast<size_t>(size));
    unsigned char* cursor = der.data();
    i2d_X509(cert, &cursor);
  }
  X509_free(cert);
  return der;
}

asio::awaitable<std::error_code> TcpChannel::StartTls(asio::ssl::context& context, bool client) {
  tls_ = std::make_unique<TlsSession>(socket_, context.native_handle());
  co_return co_await tls_->Handshake(client);
}

asio::awaitable<std::error_code> TcpChannel::ReadExact(std::span<uint8_t> out,
                                                       std::atomic<int64_t>* progress) {
  size_t at = TakeAhead(out);
  if (at == out.size()) co_return std::error_code();
  if (out.size() - at >= kReadAheadBytes) {
    co_return co_await ReadAll(out.subspan(at), TransferAllNotingProgress{progress});
  }
  ahead_.resize(kReadAheadBytes);
  while (at < out.size()) {
    std::error_code ec;
    size_t n = 0;
    if (tls_) {
      std::tie(ec, n) = co_await tls_->ReadSome(ahead_);
    } else {
      n = co_await socket_.async_read_some(asio::buffer(ahead_),
                                           asio::redirect_error(asio::use_awaitable, ec));
    }
    bytes_.received.fetch_add(n, std::memory_order_relaxed);
    if (progress != nullptr && n > 0) *progress = SteadyNowNs();
    ahead_begin_ = 0;
    ahead_end_ = n;
    if (ec) co_return ec;
    at += TakeAhead(out.subspan(at));
  }
  co_return std::error_code();
}

size_t TcpChannel::TakeAhead(std::span<uint8_t> out) {
  const size_t n = std::min(out.size(), ahead_end_ - ahead_begin_);
  if (n > 0) std::memcpy(out.data(), ahead_.data() + ahead_begin_, n);
  ahead_begin_ += n;
  return n;
}

asio::awaitable<std::error_code> TcpChannel::ReadAll(std::span<uint8_t> out,
                                                     TransferAllNotingProgress condition) {
  std::error_code ec;
  size_t n = 0;
  if (tls_) {
    std::span<uint8_t> rest = out;
    while (!ec && !rest.empty()) {
      size_t got = 0;
      std::tie(ec, got) = co_await tls_->ReadSome(rest);
      rest = rest.subspan(got);
      n += got;
      condition(ec, n);
    }
  } else {
    n = co_await asio::async_read(socket_, asio::buffer(out.data(), out.size()), condition,
                                  asio::redirect_error(asio::use_awaitable, ec));
  }
  bytes_.received.fetch_add(n, std::memory_order_relaxed);
  co_return ec;
}

}  // namespace weightcast::net

#ifdef WC_NET_POP_NO_SANITIZE_FUNCTION
#pragma clang attribute pop
#endif
