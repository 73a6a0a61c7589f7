#include "origin/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <mutex>
#include <optional>
#include <random>
#include <utility>

namespace weightcast::origin {
namespace {

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

std::optional<uint64_t> ParseUint(std::string_view text) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

// "bytes START-END/TOTAL" or "bytes */TOTAL" (a 416's). TOTAL "*" (unknown) is refused: every
// check of an origin object needs its size.
struct ContentRange {
  std::optional<uint64_t> first;
  uint64_t total = 0;
};
std::optional<ContentRange> ParseContentRange(std::string_view value) {
  value = Trim(value);
  if (!value.starts_with("bytes ")) return std::nullopt;
  value.remove_prefix(6);
  const size_t slash = value.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  ContentRange out;
  const auto total = ParseUint(value.substr(slash + 1));
  if (!total) return std::nullopt;
  out.total = *total;
  const std::string_view range = value.substr(0, slash);
  if (range == "*") return out;
  const size_t dash = range.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  out.first = ParseUint(range.substr(0, dash));
  if (!out.first || !ParseUint(range.substr(dash + 1))) return std::nullopt;
  return out;
}

bool StrongEtag(std::string_view etag) { return !etag.empty() && !etag.starts_with("W/"); }

bool RetryableCurlCode(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::chrono::milliseconds BackoffDelay(int attempt, std::chrono::milliseconds first,
                                       std::chrono::milliseconds max, double jitter) {
  std::chrono::milliseconds delay = first;
  for (int i = 1; i < attempt && delay < max; ++i) delay *= 2;
  delay = std::min(delay, max);
  jitter = std::clamp(jitter, 0.5, 1.0);
  return std::chrono::milliseconds(
      static_cast<int64_t>(static_cast<double>(delay.count()) * jitter));
}

bool RetryableHttpStatus(long status) { return status == 408 || status == 429 || status >= 500; }

struct HttpClient::Handle {
  CURL* curl = nullptr;
  Handle() : curl(curl_easy_init()) {}
  ~Handle() {
    if (curl != nullptr) curl_easy_cleanup(curl);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

// One response as it arrives: the headers of the last response (a redirect's are dropped when
// the next status line comes), then the body, checked before its first byte is taken.
struct HttpClient::Attempt {
  CURL* curl = nullptr;
  std::string url;
  uint64_t offset = 0;  // the first byte asked for
  // Bytes wanted (0: to the end); cut to the object's end once its size is known, so that a
  // probe of a prefix longer than a small object is complete with the whole object.
  uint64_t length = 0;
  const ObjectInfo* expected = nullptr;
  const ByteSink* sink = nullptr;
  uint64_t* taken = nullptr;  // bytes the sink took, over every attempt
  uint64_t start_taken = 0;   // *taken when this attempt began
  std::optional<ObjectInfo>* info = nullptr;
  // From the headers.
  std::string etag;
  std::string last_modified;
  std::optional<ContentRange> content_range;
  std::optional<uint64_t> content_length;
  // The body.
  bool checked = false;
  bool error_body = false;  // the body of a status other than 200 and 206, not taken
  bool done = false;        // every wanted byte taken: a stop, not a failure
  uint64_t skip = 0;        // bytes to drop first (a 200 that ignored the range of a resume)
  uint64_t received = 0;    // body bytes, for the counter
  Status failure;           // why the body was refused

  const std::atomic<bool>* cancelled = nullptr;

  // libcurl's progress callback: a non-zero answer aborts the transfer.
  static int OnProgress(void* self, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    return static_cast<Attempt*>(self)->cancelled->load() ? 1 : 0;
  }

  static size_t OnHeader(char* data, size_t size, size_t count, void* self) {
    auto& a = *static_cast<Attempt*>(self);
    const std::string_view line(data, size * count);
    if (line.starts_with("HTTP/")) {
      a.etag.clear();
      a.last_modified.clear();
      a.content_range.reset();
      a.content_length.reset();
      return line.size();
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return line.size();
    const std::string name = Lower(Trim(line.substr(0, colon)));
    const std::string_view value = Trim(line.substr(colon + 1));
    if (name == "etag") {
      a.etag = std::string(value);
    } else if (name == "last-modified") {
      a.last_modified = std::string(value);
    } else if (name == "content-range") {
      a.content_range = ParseContentRange(value);
    } else if (name == "content-length") {
      a.content_length = ParseUint(value);
    }
    return line.size();
  }

  static size_t OnBody(char* data, size_t size, size_t count, void* self) {
    auto& a = *static_cast<Attempt*>(self);
    const size_t n = size * count;
    a.received += n;
    if (!a.checked) {
      a.checked = true;
      long status = 0;
      curl_easy_getinfo(a.curl, CURLINFO_RESPONSE_CODE, &status);
      a.error_body = status != 200 && status != 206;
      if (!a.error_body) a.failure = a.Check(status);
      if (!a.failure.ok()) return 0;
    }
    if (a.error_body) return n;  // an error page: its status says what happened
    std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(data), n);
    const uint64_t drop = std::min<uint64_t>(a.skip, bytes.size());
    a.skip -= drop;
    bytes = bytes.subspan(drop);
    if (a.length != 0) {
      const uint64_t want = a.length - (*a.taken - a.start_taken);
      if (bytes.size() > want) bytes = bytes.first(want);
    }
    if (!bytes.empty()) {
      a.failure = (*a.sink)(bytes);
      if (!a.failure.ok()) return 0;
      *a.taken += bytes.size();
    }
    if (a.length != 0 && *a.taken - a.start_taken == a.length) {
      a.done = true;
      // The rest of a longer answer (a 200 that ignored the range) is not needed: stop it.
      return drop + bytes.size() == n ? n : 0;
    }
    return n;
  }

  // The answer's status and validators, before any body byte is taken.
  Status Check(long status) {
    const std::string where = RedactUrl(url);
    uint64_t size = 0;
    if (status == 206) {
      if (!content_range || !content_range->first || *content_range->first != offset) {
        return FailedPrecondition(where +
                                  ": the origin answered a range request with another range");
      }
      size = content_range->total;
    } else {
      // A 200 ignores the range: the whole object from byte 0. Taken only from its start.
      if (offset != 0 && start_taken == 0) {
        return FailedPrecondition(where + ": the origin ignores HTTP Range requests");
      }
      skip = offset;
      if (!content_length) {
        return FailedPrecondition(where +
                                  ": the origin sent neither Content-Range nor Content-Length");
      }
      size = *content_length;
    }
    if (info != nullptr) *info = ObjectInfo{size, etag, last_modified};
    if (offset >= size) {
      length = 0;
    } else if (length == 0 || length > size - offset) {
      length = size - offset;
    }
    if (expected == nullptr) return Status::Ok();
    if (size != expected->size) {
      return FailedPrecondition(where + " changed at the origin: its size was " +
                                std::to_string(expected->size) + " bytes, now " +
                                std::to_string(size));
    }
    if (!expected->etag.empty() && !etag.empty() && etag != expected->etag) {
      return FailedPrecondition(where + " changed at the origin: its ETag was " + expected->etag +
                                ", now " + etag);
    }
    if (!expected->last_modified.empty() && !last_modified.empty() &&
        last_modified != expected->last_modified) {
      return FailedPrecondition(where + " changed at the origin: Last-Modified was " +
                                expected->last_modified + ", now " + last_modified);
    }
    return Status::Ok();
  }
};

HttpClient::HttpClient(HttpOptions options) : options_(std::move(options)) { InitCurlOnce(); }
HttpClient::~HttpClient() = default;

std::unique_ptr<HttpClient::Handle> HttpClient::TakeHandle() {
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      auto handle = std::move(idle_.back());
      idle_.pop_back();
      return handle;
    }
  }
  return std::make_unique<Handle>();
}

void HttpClient::ReturnHandle(std::unique_ptr<Handle> handle) {
  std::lock_guard lock(mu_);
  idle_.push_back(std::move(handle));
}

void HttpClient::Cancel() {
  {
    std::lock_guard lock(mu_);
    cancelled_ = true;
  }
  cancel_cv_.notify_all();
}

uint64_t HttpClient::bytes_received() const {
  std::lock_guard lock(mu_);
  return bytes_received_;
}

uint64_t HttpClient::retries() const {
  std::lock_guard lock(mu_);
  return retries_;
}

Status HttpClient::Request(Handle& handle, const std::string& url, uint64_t offset, uint64_t length,
                           const ObjectInfo* expected, const ByteSink& sink, uint64_t* taken,
                           std::optional<ObjectInfo>* info) {
  if (handle.curl == nullptr) return Internal("curl_easy_init failed");
  CURL* curl = handle.curl;
  curl_easy_reset(curl);
  Attempt a;
  a.curl = curl;
  a.url = url;
  a.offset = offset + *taken;
  a.length = length == 0 ? 0 : length - *taken;
  a.expected = expected;
  a.sink = &sink;
  a.taken = taken;
  a.start_taken = *taken;
  a.info = info;
  a.cancelled = &cancelled_;
  // Bytes the sink took are not asked for again; a 200 (no ranges) resends them and they are
  // dropped (Attempt::skip).
  const std::string range =
      std::to_string(a.offset) + "-" +
      (a.length == 0 ? std::string() : std::to_string(a.offset + a.length - 1));
  curl_slist* headers = nullptr;
  std::string auth;
  if (!options_.bearer_token.empty()) {
    auth = "Authorization: Bearer " + options_.bearer_token;
    headers = curl_slist_append(headers, auth.c_str());
  }
  std::string if_match;
  if (expected != nullptr && StrongEtag(expected->etag)) {
    if_match = "If-Match: " + expected->etag;
    headers = curl_slist_append(headers, if_match.c_str());
  }
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connect_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(options_.low_speed_bytes));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME,
                   static_cast<long>(options_.low_speed_window.count()));
  if (!options_.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, options_.ca_file.c_str());
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &Attempt::OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &a);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Attempt::OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &a);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &Attempt::OnProgress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &a);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  const CURLcode code = curl_easy_perform(curl);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  curl_slist_free_all(headers);
  {
    std::lock_guard lock(mu_);
    bytes_received_ += a.received;
  }

  const std::string where = RedactUrl(url);
  if (cancelled_.load()) return Aborted(where + ": cancelled");
  if (!a.failure.ok()) return a.failure;
  if (a.done || (a.checked && !a.error_body && a.length == 0 && code == CURLE_OK)) {
    return Status::Ok();
  }
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  if (code != CURLE_OK) {
    std::string what = error[0] != '\0' ? std::string(error) : curl_easy_strerror(code);
    // curl's message may quote the URL it was given.
    if (const size_t at = what.find(url); at != std::string::npos)
      what.replace(at, url.size(), where);
    Status failed = Unavailable(where + ": " + what);
    if (!RetryableCurlCode(code)) failed = FailedPrecondition(where + ": " + what);
    return failed;
  }
  if (status == 416 && info != nullptr && a.content_range && a.content_range->total == 0) {
    *info = ObjectInfo{0, a.etag, a.last_modified};  // an empty object has no byte 0
    return Status::Ok();
  }
  if (status == 416 && expected != nullptr) {
    return FailedPrecondition(where + " changed at the origin: bytes from " +
                              std::to_string(a.offset) + " no longer exist (416)");
  }
  if (status == 412) {
    return FailedPrecondition(where + " changed at the origin: its ETag is no longer " +
                              (expected != nullptr ? expected->etag : std::string("the one read")) +
                              " (412)");
  }
  if (status == 401 || status == 403) {
    return Unauthenticated(where + ": the origin refused the request (HTTP " +
                           std::to_string(status) + ")" +
                           (options_.bearer_token.empty() ? "; no token was sent" : ""));
  }
  if (status == 404 || status == 410) {
    return NotFound(where + ": not found at the origin (HTTP " + std::to_string(status) + ")");
  }
  if (RetryableHttpStatus(status)) {
    return Unavailable(where + ": the origin answered HTTP " + std::to_string(status));
  }
  if (status != 200 && status != 206) {
    return FailedPrecondition(where + ": the origin answered HTTP " + std::to_string(status));
  }
  if (!a.checked) {
    // An empty body: nothing was checked or taken. Only an empty object answers so.
    if (info != nullptr && a.content_length == 0) *info = ObjectInfo{0, a.etag, a.last_modified};
    if (a.length != 0 && (expected == nullptr || expected->size != 0)) {
      return Unavailable(where + ": the answer had no body");
    }
    return Status::Ok();
  }
  return Unavailable(where + ": the answer ended after " + std::to_string(*taken - a.start_taken) +
                     " of " + std::to_string(a.length) + " bytes");
}

Status HttpClient::WithRetries(const std::string& url, const std::function<Status()>& attempt) {
  thread_local std::minstd_rand random(std::random_device{}());
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  Status last;
  for (int i = 1; i <= options_.max_attempts; ++i) {
    if (cancelled_.load()) return Aborted(RedactUrl(url) + ": cancelled");
    last = attempt();
    if (last.ok() || last.code() != Code::kUnavailable) return last;
    if (i == options_.max_attempts) break;
    std::unique_lock lock(mu_);
    ++retries_;
    cancel_cv_.wait_for(
        lock, BackoffDelay(i, options_.first_backoff, options_.max_backoff, jitter(random)),
        [&] { return cancelled_.load(); });
  }
  return Unavailable(RedactUrl(url) + ": gave up after " + std::to_string(options_.max_attempts) +
                     " attempts: " + last.message());
}

Result<ObjectInfo> HttpClient::Probe(const std::string& url, uint64_t prefix_bytes,
                                     const ByteSink& sink) {
  std::optional<ObjectInfo> info;
  uint64_t taken = 0;
  std::unique_ptr<Handle> handle = TakeHandle();
  // The first answer names the object; a retry checks that it is still the same one.
  Status status = WithRetries(url, [&] {
    std::optional<ObjectInfo> seen;
    const ObjectInfo* expected = info ? &*info : nullptr;
    Status s = Request(*handle, url, 0, std::max<uint64_t>(prefix_bytes, 1), expected, sink, &taken,
                       &seen);
    if (!info && seen) info = std::move(seen);
    return s;
  });
  ReturnHandle(std::move(handle));
  WC_RETURN_IF_ERROR(status);
  if (!info) return Internal(RedactUrl(url) + ": the probe learned nothing of the object");
  return *info;
}

Status HttpClient::GetRange(const std::string& url, uint64_t offset, uint64_t length,
                            const ObjectInfo& expected, const ByteSink& sink) {
  if (length == 0) return Status::Ok();
  if (offset > expected.size || length > expected.size - offset) {
    return OutOfRange(RedactUrl(url) + ": bytes [" + std::to_string(offset) + ", " +
                      std::to_string(offset + length) + ") beyond its " +
                      std::to_string(expected.size) + " bytes");
  }
  uint64_t taken = 0;
  std::unique_ptr<Handle> handle = TakeHandle();
  Status status = WithRetries(
      url, [&] { return Request(*handle, url, offset, length, &expected, sink, &taken, nullptr); });
  ReturnHandle(std::move(handle));
  return status;
}

}  // namespace weightcast::origin
