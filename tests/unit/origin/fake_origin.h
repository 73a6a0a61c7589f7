// An HTTP/1.1 origin for unit tests: serves named byte strings with Range requests, ETags and
// If-Match, and injects the faults an origin shows (5xx answers, connections reset mid-body,
// ranges ignored, content replaced). The tests against a real server (nginx) are
// tests/integration/origin_*.sh.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace weightcast::origin::testing {

class FakeOrigin {
 public:
  FakeOrigin() {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(listener_, 64);
    socklen_t len = sizeof(addr);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~FakeOrigin() {
    stopping_ = true;
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    acceptor_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      for (int fd : open_) shutdown(fd, SHUT_RDWR);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }
  FakeOrigin(const FakeOrigin&) = delete;
  FakeOrigin& operator=(const FakeOrigin&) = delete;

  std::string url(const std::string& name) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + name;
  }

  // Serves `bytes` at /name with a new ETag.
  void Put(const std::string& name, std::vector<uint8_t> bytes) {
    std::lock_guard lock(mu_);
    files_[name] = File{std::move(bytes), "\"e" + std::to_string(++etags_) + "\""};
  }
  void Put(const std::string& name, const std::string& text) {
    Put(name, std::vector<uint8_t>(text.begin(), text.end()));
  }
  // The next `count` requests are answered with `status` and no body.
  void FailNext(int count, int status) {
    std::lock_guard lock(mu_);
    fail_count_ = count;
    fail_status_ = status;
  }
  // The next answer with a body sends only its first `bytes` of it, then resets the connection.
  void ResetNextAfter(uint64_t bytes) {
    std::lock_guard lock(mu_);
    reset_after_ = bytes;
  }
  // Sends bodies at about `bytes_per_second` (0: as fast as the socket takes them).
  void SlowTo(uint64_t bytes_per_second) {
    std::lock_guard lock(mu_);
    rate_ = bytes_per_second;
  }
  // The next answer with a body sends its first `bytes`, then nothing for `stall` (the
  // connection stays open), then the rest.
  void StallNextAfter(uint64_t bytes, std::chrono::milliseconds stall) {
    std::lock_guard lock(mu_);
    stall_after_ = bytes;
    stall_ = stall;
  }
  // Answers every GET with the whole object (200), as a server without range support does.
  void IgnoreRanges(bool ignore) {
    std::lock_guard lock(mu_);
    ignore_ranges_ = ignore;
  }
  // Answers 401 unless the request carries "Authorization: Bearer <token>".
  void RequireToken(std::string token) {
    std::lock_guard lock(mu_);
    token_ = std::move(token);
  }
  // Every request's head as received.
  std::vector<std::string> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  uint64_t body_bytes_sent() const { return body_bytes_; }

 private:
  struct File {
    std::vector<uint8_t> bytes;
    std::string etag;
  };

  void AcceptLoop() {
    while (!stopping_) {
      const int fd = accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      std::lock_guard lock(mu_);
      open_.push_back(fd);
      threads_.emplace_back([this, fd] { Serve(fd); });
    }
  }

  static std::string Header(const std::string& head, const std::string& name) {
    std::string lower_head = head;
    for (char& c : lower_head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const std::string key = "\r\n" + name + ":";
    const size_t at = lower_head.find(key);
    if (at == std::string::npos) return {};
    size_t start = at + key.size();
    while (start < head.size() && head[start] == ' ') ++start;
    return head.substr(start, head.find("\r\n", start) - start);
  }

  static bool SendAll(int fd, const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
      if (n <= 0) return false;
      p += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }

  void Serve(int fd) {
    std::string buffer;
    char chunk[4096];
    while (true) {
      size_t end;
      while ((end = buffer.find("\r\n\r\n")) == std::string::npos) {
        const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
        if (n <= 0) {
          Close(fd);
          return;
        }
        buffer.append(chunk, static_cast<size_t>(n));
      }
      const std::string head = buffer.substr(0, end);
      buffer.erase(0, end + 4);
      if (!Answer(fd, head)) {
        Close(fd);
        return;
      }
    }
  }

  void Close(int fd) {
    std::lock_guard lock(mu_);
    std::erase(open_, fd);
    close(fd);
  }

  // False: the connection is to be closed.
  bool Answer(int fd, const std::string& head) {
    std::string status_line = "200 OK";
    std::string headers;
    std::vector<uint8_t> body;
    std::optional<uint64_t> reset_after;
    std::optional<uint64_t> stall_after;
    std::chrono::milliseconds stall{0};
    uint64_t rate = 0;
    {
      std::lock_guard lock(mu_);
      requests_.push_back(head);
      const size_t sp1 = head.find(' ');
      const size_t sp2 = head.find(' ', sp1 + 1);
      const std::string path = head.substr(sp1 + 2, sp2 - sp1 - 2);
      const std::string name = path.substr(0, path.find('?'));
      auto it = files_.find(name);
      if (fail_count_ > 0) {
        --fail_count_;
        status_line = std::to_string(fail_status_) + " Injected";
      } else if (!token_.empty() && Header(head, "authorization") != "Bearer " + token_) {
        status_line = "401 Unauthorized";
      } else if (it == files_.end()) {
        status_line = "404 Not Found";
      } else {
        const File& f = it->second;
        const std::string if_match = Header(head, "if-match");
        const std::string range = Header(head, "range");
        headers += "ETag: " + f.etag + "\r\n";
        if (!if_match.empty() && if_match != f.etag) {
          status_line = "412 Precondition Failed";
        } else if (!range.empty() && !ignore_ranges_) {
          const uint64_t size = f.bytes.size();
          const size_t dash = range.find('-');
          const uint64_t first = std::stoull(range.substr(6, dash - 6));
          uint64_t last = size == 0 ? 0 : size - 1;
          if (dash + 1 < range.size())
            last = std::min<uint64_t>(last, std::stoull(range.substr(dash + 1)));
          if (first >= size) {
            status_line = "416 Range Not Satisfiable";
            headers += "Content-Range: bytes */" + std::to_string(size) + "\r\n";
          } else {
            status_line = "206 Partial Content";
            headers += "Content-Range: bytes " + std::to_string(first) + "-" +
                       std::to_string(last) + "/" + std::to_string(size) + "\r\n";
            body.assign(f.bytes.begin() + static_cast<ptrdiff_t>(first),
                        f.bytes.begin() + static_cast<ptrdiff_t>(last + 1));
          }
        } else {
          body = f.bytes;
        }
      }
      if (reset_after_ && !body.empty()) {
        reset_after = reset_after_;
        reset_after_.reset();
      }
      if (stall_after_ && !body.empty()) {
        stall_after = stall_after_;
        stall = stall_;
        stall_after_.reset();
      }
      rate = rate_;
    }
    const std::string response = "HTTP/1.1 " + status_line + "\r\n" + headers +
                                 "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    if (!SendAll(fd, response.data(), response.size())) return false;
    const size_t send_bytes =
        reset_after ? std::min<size_t>(*reset_after, body.size()) : body.size();
    // In pieces of a tenth of a second's worth when slowed, and with the stall where asked.
    const size_t piece = rate == 0 ? send_bytes : std::max<size_t>(rate / 10, 1);
    for (size_t sent = 0; sent < send_bytes;) {
      size_t n = std::min(piece, send_bytes - sent);
      if (stall_after && sent < *stall_after) n = std::min<size_t>(n, *stall_after - sent);
      if (!SendAll(fd, body.data() + sent, n)) return false;
      sent += n;
      if (stall_after && sent == *stall_after) std::this_thread::sleep_for(stall);
      if (rate != 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    body_bytes_ += send_bytes;
    if (reset_after) {
      linger no_linger{1, 0};  // close with a reset, as a crashed server's kernel does
      setsockopt(fd, SOL_SOCKET, SO_LINGER, &no_linger, sizeof(no_linger));
      return false;
    }
    return true;
  }

  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> body_bytes_{0};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<int> open_;
  std::vector<std::thread> threads_;
  std::map<std::string, File> files_;
  uint64_t etags_ = 0;
  int fail_count_ = 0;
  int fail_status_ = 503;
  std::optional<uint64_t> reset_after_;
  bool ignore_ranges_ = false;
  uint64_t rate_ = 0;
  std::optional<uint64_t> stall_after_;
  std::chrono::milliseconds stall_{0};
  std::string token_;
  std::vector<std::string> requests_;
};

}  // namespace weightcast::origin::testing
