#include "coord/etcd_client.h"

#include <httplib.h>

#include <charconv>
#include <ctime>

#include "util/host_port.h"

namespace weightcast::coord::etcd {
namespace {

std::string FormatUtc(std::chrono::system_clock::time_point t) {
  const time_t seconds = std::chrono::system_clock::to_time_t(t);
  struct tm tm {};
  gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string ErrorBody(const std::string& body) {
  // The gateway's error JSON names the cause; anything else is cut short.
  auto parsed = ParseEmptyResponse(body);
  if (!parsed.ok()) return parsed.message();
  return body.substr(0, 200);
}

std::vector<std::string_view> SplitCommas(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace

Client::Client(std::vector<Endpoint> endpoints, std::string text, ClientOptions options)
    : endpoints_(std::move(endpoints)),
      endpoints_text_(std::move(text)),
      options_(std::move(options)) {}

Result<std::unique_ptr<Client>> Client::Create(std::string_view endpoints, ClientOptions options) {
  std::vector<Endpoint> parsed;
  for (std::string_view item : SplitCommas(endpoints)) {
    std::string_view rest = item;
    const bool tls = rest.starts_with("https://");
    if (tls) {
      if (options.ca_file.empty()) {
        return InvalidArgument("etcd endpoint " + std::string(item) +
                               ": https needs the CA that issued etcd's certificate (--ca)");
      }
      rest.remove_prefix(8);
    }
    if (rest.starts_with("http://")) rest.remove_prefix(7);
    while (rest.ends_with('/')) rest.remove_suffix(1);
    Result<HostPort> where = ParseHostPort(rest);
    if (!where.ok() || where->port == 0) {
      return InvalidArgument("etcd endpoint '" + std::string(item) + "' is not http://HOST:PORT" +
                             (where.ok() ? " (port 0)" : ": " + where.status().message()));
    }
    // An IPv6 host keeps its brackets, as it is written in the URLs the client asks.
    parsed.push_back({where->bracketed ? "[" + where->host + "]" : where->host, *where->port, tls});
  }
  if (parsed.empty()) return InvalidArgument("--etcd: no endpoint");
  return std::unique_ptr<Client>(
      new Client(std::move(parsed), std::string(endpoints), std::move(options)));
}

Status Client::FailFast() const {
  std::lock_guard lock(mu_);
  if (failing_ && std::chrono::steady_clock::now() - last_failure_ < options_.retry_after) {
    return last_error_;
  }
  return Status::Ok();
}

void Client::Succeeded() {
  std::lock_guard lock(mu_);
  failing_ = false;
  last_error_ = Status::Ok();
}

void Client::Failed(const Status& status) {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (!failing_) {
    failing_ = true;
    failing_since_ = now;
    failing_since_wall_ = std::chrono::system_clock::now();
  }
  last_failure_ = now;
  last_error_ = status;
}

bool Client::failing() const {
  std::lock_guard lock(mu_);
  return failing_;
}

std::string Client::Health() const {
  std::lock_guard lock(mu_);
  if (!failing_) return {};
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::steady_clock::now() - failing_since_)
                           .count();
  return "etcd (" + endpoints_text_ + ") unreachable or without quorum since " +
         FormatUtc(failing_since_wall_) + " (" + std::to_string(seconds) +
         " s): " + last_error_.message();
}

Result<std::string> Client::Post(std::string_view path, const std::string& body, bool probe) {
  if (!probe) WC_RETURN_IF_ERROR(FailFast());
  size_t start = 0;
  {
    std::lock_guard lock(mu_);
    start = preferred_;
  }
  Status last = Unavailable("etcd: no endpoint");
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const size_t index = (start + i) % endpoints_.size();
    const Endpoint& endpoint = endpoints_[index];
    const std::string where = "etcd " + endpoint.host + ":" + std::to_string(endpoint.port);
    const std::string url = (endpoint.tls ? "https://" : "http://") + endpoint.host + ":" +
                            std::to_string(endpoint.port);
    httplib::Client http(url, options_.cert_file, options_.key_file);
    if (endpoint.tls) {
      // etcd's certificate must chain to the cluster CA and name the host asked.
      http.set_ca_cert_path(options_.ca_file);
      http.enable_server_certificate_verification(true);
    }
    http.set_connection_timeout(options_.timeout);
    http.set_read_timeout(options_.timeout);
    http.set_write_timeout(options_.timeout);
    http.set_keep_alive(false);
    auto response = http.Post(std::string(path), body, "application/json");
    if (!response) {
      std::string why = httplib::to_string(response.error());
      if (response.error() == httplib::Error::SSLServerVerification) {
        why += " (etcd's certificate is not from the CA given, or does not name this host)";
      } else if (response.error() == httplib::Error::SSLConnection) {
        why += " (does etcd want a client certificate of this CA? the coordinator presents --cert)";
      }
      last = Unavailable(where + ": " + std::move(why));
      continue;
    }
    if (response->status != 200) {
      last = Unavailable(where + ": HTTP " + std::to_string(response->status) + ": " +
                         ErrorBody(response->body));
      continue;
    }
    // A member without a leader answers 200 with nothing wrong only once it has one; an error
    // object in a 200 is still an error, which the caller's parser reports.
    {
      std::lock_guard lock(mu_);
      preferred_ = index;
    }
    return std::move(response->body);
  }
  Failed(last);
  return last;
}

Result<RangeResult> Client::Range(std::string_view key, std::string_view range_end, int64_t limit,
                                  bool serializable) {
  WC_ASSIGN_OR_RETURN(std::string body,
                      Post("/v3/kv/range", RangeRequest(key, range_end, limit, serializable),
                           /*probe=*/true));
  auto parsed = ParseRangeResponse(body);
  if (parsed.ok()) Succeeded();
  return parsed;
}

Result<TxnResult> Client::Commit(const Txn& txn) {
  WC_ASSIGN_OR_RETURN(std::string body, Post("/v3/kv/txn", TxnRequest(txn), /*probe=*/false));
  auto parsed = ParseTxnResponse(body);
  if (parsed.ok()) {
    Succeeded();
  } else if (parsed.status().code() == Code::kUnavailable) {
    Failed(parsed.status());
  }
  return parsed;
}

Result<LeaseGrantResult> Client::LeaseGrant(int64_t ttl_seconds) {
  WC_ASSIGN_OR_RETURN(std::string body,
                      Post("/v3/lease/grant", LeaseGrantRequest(ttl_seconds), /*probe=*/true));
  auto parsed = ParseLeaseGrantResponse(body);
  if (parsed.ok()) Succeeded();
  return parsed;
}

Result<int64_t> Client::KeepAlive(int64_t lease) {
  WC_ASSIGN_OR_RETURN(std::string body,
                      Post("/v3/lease/keepalive", LeaseIdRequest(lease), /*probe=*/true));
  auto parsed = ParseKeepAliveResponse(body);
  if (parsed.ok()) {
    Succeeded();
  } else if (parsed.status().code() == Code::kUnavailable) {
    Failed(parsed.status());
  }
  return parsed;
}

Status Client::LeaseRevoke(int64_t lease) {
  WC_ASSIGN_OR_RETURN(std::string body,
                      Post("/v3/lease/revoke", LeaseIdRequest(lease), /*probe=*/true));
  return ParseEmptyResponse(body);
}

Result<std::vector<WatchEvent>> Client::Watch(std::string_view key, std::string_view range_end,
                                              int64_t start_revision,
                                              std::chrono::milliseconds wait) {
  size_t index = 0;
  {
    std::lock_guard lock(mu_);
    index = preferred_;
  }
  const Endpoint& endpoint = endpoints_[index];
  httplib::Client http(endpoint.host, endpoint.port);
  http.set_connection_timeout(options_.timeout);
  // The stream is silent until a change: the read timeout is how long we wait for one.
  http.set_read_timeout(wait);
  http.set_keep_alive(false);

  httplib::Request request;
  request.method = "POST";
  request.path = "/v3/watch";
  request.headers.emplace("Content-Type", "application/json");
  request.body = WatchCreateRequest(key, range_end, start_revision);
  std::string pending;
  std::vector<WatchEvent> events;
  Status failed = Status::Ok();
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    pending.append(data, size);
    size_t newline = 0;
    while ((newline = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      if (line.empty()) continue;
      auto message = ParseWatchMessage(line);
      if (!message.ok()) {
        failed = message.status();
        return false;
      }
      if (message->canceled) {
        failed = Unavailable("etcd watch canceled (compacted at revision " +
                             std::to_string(message->compact_revision) + ")");
        return false;
      }
      for (WatchEvent& event : message->events) events.push_back(std::move(event));
      if (!events.empty()) return false;  // what we waited for: stop reading
    }
    // A watch line is small; one that never ends is not etcd.
    if (pending.size() > (64u << 20)) {
      failed = Corrupt("etcd watch: a line above 64 MiB");
      return false;
    }
    return true;
  };
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  const bool sent = http.send(request, response, error);
  if (!failed.ok()) return failed;
  if (!events.empty()) return events;
  if (!sent && error != httplib::Error::Read && error != httplib::Error::Canceled) {
    // Could not reach this endpoint: let the next call start elsewhere.
    std::lock_guard lock(mu_);
    preferred_ = (index + 1) % endpoints_.size();
    return Unavailable("etcd watch at " + endpoint.host + ":" + std::to_string(endpoint.port) +
                       ": " + httplib::to_string(error));
  }
  return events;  // nothing happened within `wait`
}

}  // namespace weightcast::coord::etcd
