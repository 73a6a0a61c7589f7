// TLS over a connected TCP socket with the record loop in our hands (certificate mode,
// docs/security.md). asio::ssl moves one TLS record (16 KiB) per socket read and per completion,
// which on loopback caps a connection at about a fifth of plain TCP (docs/BENCHMARKS.md,
// bench/tls_overhead.sh). Here OpenSSL reads the (non-blocking) socket itself, with read-ahead:
// one read system call of up to kTlsReadAheadBytes brings many records, decrypted in one go into
// the caller's buffer. It writes its records into a BIO pair's ring buffer, which leaves in one
// socket write per kTlsWriteSliceBytes of plaintext (OpenSSL alone makes one write per 16 KiB
// record). The coroutine waits for the socket only when it would block.
//
// One reader and one writer may be outstanding at once, on the socket's strand (the transport's
// read and write loops); the SSL object is only touched between suspensions, never during one.
// Include after net/asio_coroutines.h (asio needs it before its first header).
#pragma once

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>

#include <cstdint>
#include <span>
#include <system_error>
#include <utility>

#include <openssl/ssl.h>

namespace weightcast::net {

inline constexpr size_t kTlsReadAheadBytes = 256 << 10;
// The write ring, and the plaintext encrypted into it per socket write: a slice's records (each
// 22 bytes over its 16 KiB) fit it, with room for what the reading side may add meanwhile.
inline constexpr size_t kTlsWriteBufferBytes = 1 << 20;
inline constexpr size_t kTlsWriteSliceBytes = 512 << 10;

class TlsSession {
 public:
  // `socket` must outlive the session; `context` is shared (its settings: TLS 1.3, verification).
  TlsSession(asio::ip::tcp::socket& socket, SSL_CTX* context);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  asio::awaitable<std::error_code> Handshake(bool client);
  // At least one plaintext byte into `out` (or an error; asio::error::eof when the peer closed).
  asio::awaitable<std::pair<std::error_code, size_t>> ReadSome(std::span<uint8_t> out);
  // Every byte of `data`, encrypted.
  asio::awaitable<std::error_code> Write(std::span<const uint8_t> data);

  SSL* native_handle() { return ssl_; }

 private:
  // After an OpenSSL call returned `result`: waits until the socket is ready for what it wants
  // (kOk: it did not fail), or the error to return.
  asio::awaitable<std::error_code> WaitFor(int result);
  std::error_code SslError(int error);
  // Sends what OpenSSL put in the write ring.
  asio::awaitable<std::error_code> Flush();

  asio::ip::tcp::socket& socket_;
  SSL* ssl_ = nullptr;
  BIO* ring_ = nullptr;    // our end of the write pair; OpenSSL's end is owned by ssl_
  bool flushing_ = false;  // a Flush is suspended in a socket write
  // The first failed socket write: sending is over, every later Write returns it, reads go on.
  std::error_code write_error_;
};

}  // namespace weightcast::net
