#include "net/asio_coroutines.h"  // before any asio header, which tls_session.h includes

#include "net/tls_session.h"

#include <asio/redirect_error.hpp>
#include <asio/ssl/error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <openssl/err.h>

#include <algorithm>
#include <cerrno>

namespace weightcast::net {

TlsSession::TlsSession(asio::ip::tcp::socket& socket, SSL_CTX* context)
    : socket_(socket), ssl_(SSL_new(context)) {
  std::error_code ignored;
  socket_.non_blocking(true, ignored);
  BIO* reader = BIO_new_socket(static_cast<int>(socket_.native_handle()), BIO_NOCLOSE);
  BIO* writer = nullptr;
  BIO_new_bio_pair(&writer, kTlsWriteBufferBytes, &ring_, kTlsWriteBufferBytes);
  SSL_set0_rbio(ssl_, reader);
  SSL_set0_wbio(ssl_, writer);
  SSL_set_read_ahead(ssl_, 1);
  SSL_set_default_read_buffer_len(ssl_, kTlsReadAheadBytes);
  // A peer that closes without close_notify has still closed: end of stream, not an error.
  SSL_set_options(ssl_, SSL_OP_IGNORE_UNEXPECTED_EOF);
}

TlsSession::~TlsSession() {
  SSL_free(ssl_);
  BIO_free(ring_);
}

asio::awaitable<std::error_code> TlsSession::Flush() {
  if (write_error_) co_return write_error_;
  // Another coroutine's flush is writing: its loop sends what is pending when it resumes.
  if (flushing_) co_return std::error_code();
  flushing_ = true;
  std::error_code ec;
  while (!ec) {
    // Written straight from the ring: bytes OpenSSL adds meanwhile go after these and never move
    // them, and these are consumed only once sent.
    char* data = nullptr;
    const int n = BIO_nread0(ring_, &data);
    if (n <= 0) break;
    co_await asio::async_write(socket_, asio::buffer(data, static_cast<size_t>(n)),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (!ec) BIO_nread(ring_, &data, n);
  }
  flushing_ = false;
  write_error_ = ec;
  co_return ec;
}

std::error_code TlsSession::SslError(int error) {
  if (error == SSL_ERROR_ZERO_RETURN) return asio::error::eof;
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code != 0) return std::error_code(static_cast<int>(code), asio::error::get_ssl_category());
  if (error == SSL_ERROR_SYSCALL && errno != 0)
    return std::error_code(errno, std::system_category());
  return asio::error::eof;
}

asio::awaitable<std::error_code> TlsSession::WaitFor(int result) {
  const int error = SSL_get_error(ssl_, result);
  std::error_code ec;
  // Whatever OpenSSL wants next, what it wrote goes out first (a handshake flight, an alert).
  if (BIO_ctrl_pending(ring_) > 0) {
    ec = co_await Flush();
    if (error == SSL_ERROR_WANT_WRITE) co_return ec;  // the ring has room again, or never will
    // A read goes on when sending failed: what the peer sent before it closed (why it refused
    // us) is still to be read.
    if (ec && error != SSL_ERROR_WANT_READ) co_return ec;
    ec.clear();
  }
  if (error == SSL_ERROR_WANT_READ) {
    co_await socket_.async_wait(asio::ip::tcp::socket::wait_read,
                                asio::redirect_error(asio::use_awaitable, ec));
  } else if (error == SSL_ERROR_WANT_WRITE) {
    co_await socket_.async_wait(asio::ip::tcp::socket::wait_write,
                                asio::redirect_error(asio::use_awaitable, ec));
  } else {
    ec = SslError(error);
  }
  co_return ec;
}

asio::awaitable<std::error_code> TlsSession::Handshake(bool client) {
  if (client) {
    SSL_set_connect_state(ssl_);
  } else {
    SSL_set_accept_state(ssl_);
  }
  while (true) {
    const int result = SSL_do_handshake(ssl_);
    if (result == 1) co_return co_await Flush();
    if (std::error_code ec = co_await WaitFor(result)) co_return ec;
  }
}

asio::awaitable<std::pair<std::error_code, size_t>> TlsSession::ReadSome(std::span<uint8_t> out) {
  while (true) {
    size_t n = 0;
    const int result = SSL_read_ex(ssl_, out.data(), out.size(), &n);
    if (result == 1) {
      // Records the peer sent after the handshake may ask for an answer (a key update). A
      // failure to send it is the writer's to report; these bytes are the reader's.
      if (BIO_ctrl_pending(ring_) > 0) (void)co_await Flush();
      // Decrypt what read-ahead brought while it is at hand: many records per system call.
      while (n < out.size() && SSL_pending(ssl_) > 0) {
        size_t more = 0;
        if (SSL_read_ex(ssl_, out.data() + n, out.size() - n, &more) != 1) {
          ERR_clear_error();
          break;
        }
        n += more;
      }
      co_return std::pair(std::error_code(), n);
    }
    if (std::error_code ec = co_await WaitFor(result)) co_return std::pair(ec, size_t{0});
  }
}

asio::awaitable<std::error_code> TlsSession::Write(std::span<const uint8_t> data) {
  while (!data.empty()) {
    const size_t slice = std::min(data.size(), kTlsWriteSliceBytes);
    size_t written = 0;
    // After a would-block, OpenSSL wants the very same call again: same pointer and length.
    const int result = SSL_write_ex(ssl_, data.data(), slice, &written);
    if (result == 1) {
      data = data.subspan(written);
      if (std::error_code ec = co_await Flush()) co_return ec;
      continue;
    }
    if (std::error_code ec = co_await WaitFor(result)) co_return ec;
  }
  co_return std::error_code();
}

}  // namespace weightcast::net

#ifdef WC_NET_POP_NO_SANITIZE_FUNCTION
#pragma clang attribute pop
#endif
