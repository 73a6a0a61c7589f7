// Reading objects from an HTTP(S) origin (docs/origin.md) with libcurl: ranged GETs that resume
// where a failed attempt stopped, retried with backoff on 5xx answers, resets and stalls, and
// checked against the object's validators (size, ETag, Last-Modified) so that content changed
// under the same URL is an error, not a mix of two files.
//
// Why libcurl (Debian's libcurl4-openssl-dev) over cpp-httplib, which serves /metrics: origins
// are CDNs and object stores that redirect (a Hugging Face "resolve" URL answers 302 to its
// CDN), need proxies from the environment, HTTP/2 and long-lived connection reuse, and a
// low-speed limit that tells a stalled transfer from a slow one. libcurl has each of these, and
// it is the same code as the `curl` users fetch models with today.
//
// Credentials: a bearer token (read from a file by the caller) goes in the Authorization header
// of every request and nowhere else; errors and logs name URLs without their query string (a
// pre-signed URL's signature is a credential too, origin/listing.h RedactUrl).
//
// Thread-safety: every method is safe from any thread; each call takes an idle libcurl handle
// (its connections stay open for the next call) or makes one.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

#include "origin/listing.h"

namespace weightcast::origin {

struct HttpOptions {
  // CA certificates that sign the origin's TLS certificate (PEM); empty: the system's.
  std::filesystem::path ca_file;
  // Sent as "Authorization: Bearer <token>" with every request; empty: none.
  std::string bearer_token;
  // Attempts per request (the first included) before a retryable failure is returned.
  int max_attempts = 8;
  std::chrono::milliseconds first_backoff{200};
  std::chrono::milliseconds max_backoff{10'000};
  std::chrono::milliseconds connect_timeout{10'000};
  // A transfer that moves fewer than low_speed_bytes per second for low_speed_window is
  // dropped and retried from where it stopped. A slow origin that keeps moving is waited for:
  // there is no limit on a whole transfer.
  uint64_t low_speed_bytes = 1024;
  std::chrono::seconds low_speed_window{30};
};

// Bytes as they arrive; a non-OK status stops the transfer and is returned.
using ByteSink = std::function<Status(std::span<const uint8_t>)>;

// The wait before retry `attempt` (1: after the first failure): doubling from `first`, at most
// `max`, then scaled by `jitter` in [0.5, 1] so that a fleet does not retry in step.
std::chrono::milliseconds BackoffDelay(int attempt, std::chrono::milliseconds first,
                                       std::chrono::milliseconds max, double jitter);

// Whether an HTTP status is worth retrying: 408, 429 and every 5xx.
bool RetryableHttpStatus(long status);

class HttpClient {
 public:
  explicit HttpClient(HttpOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // The object's size and validators, with its first bytes (up to `prefix_bytes`) sent to
  // `sink`: one ranged GET (object stores sign pre-signed URLs for GET, so HEAD may be refused).
  Result<ObjectInfo> Probe(const std::string& url, uint64_t prefix_bytes, const ByteSink& sink);

  // Bytes [offset, offset + length) of the object, in order, to `sink`. Checks every answer
  // against `expected` (size from Content-Range, ETag, Last-Modified; If-Match is sent with a
  // strong ETag): a change is kFailedPrecondition "<url> changed at the origin: ...". Retries
  // resume after the bytes `sink` already took. kUnavailable once the attempts are spent;
  // kUnauthenticated for 401 and 403; kNotFound for 404 and 410.
  Status GetRange(const std::string& url, uint64_t offset, uint64_t length,
                  const ObjectInfo& expected, const ByteSink& sink);

  // Ends every request in flight and every later one with kAborted, at once (a retry's wait
  // included): a daemon that stops does not wait out a slow or unreachable origin.
  void Cancel();
  bool cancelled() const { return cancelled_.load(); }

  // Bytes received from the origin so far (bodies only), across calls.
  uint64_t bytes_received() const;
  // Requests that were retried after a failure.
  uint64_t retries() const;

 private:
  struct Handle;
  struct Attempt;
  std::unique_ptr<Handle> TakeHandle();
  void ReturnHandle(std::unique_ptr<Handle> handle);
  // One request: GET of [offset, offset + length) (length 0: to the end), validators checked
  // when `expected` is set. `*taken` counts the bytes `sink` took, so a retry resumes there.
  Status Request(Handle& handle, const std::string& url, uint64_t offset, uint64_t length,
                 const ObjectInfo* expected, const ByteSink& sink, uint64_t* taken,
                 std::optional<ObjectInfo>* info);
  Status WithRetries(const std::string& url, const std::function<Status()>& attempt);

  HttpOptions options_;
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mu_;
  std::condition_variable cancel_cv_;  // wakes a retry's wait
  std::vector<std::unique_ptr<Handle>> idle_;
  uint64_t bytes_received_ = 0;
  uint64_t retries_ = 0;
};

}  // namespace weightcast::origin
