#include "net/transport_select.h"

#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "net/tcp_transport.h"
#include "util/host_port.h"

namespace weightcast::net {

#ifndef WC_HAVE_UCX
// This build has no UCX (CMake WEIGHTCAST_UCX=OFF, or AUTO without libucx-dev).
bool UcxTransport::Built() { return false; }
// The signature is the UCX build's, whose Create moves from its options.
// NOLINTNEXTLINE(performance-unnecessary-value-param)
Result<std::unique_ptr<Transport>> UcxTransport::Create(Options, UcxOptions) {
  return FailedPrecondition(
      "this weightcast was built without UCX (WEIGHTCAST_UCX=OFF or no libucx-dev)");
}
std::optional<UcxMemoryStats> UcxTransport::MemoryStats(const Transport&) { return std::nullopt; }
#endif

namespace {

constexpr std::string_view kUcxSuffix = ",ucx=";

// Remembers the addresses whose UCX connection failed, so reconnects go over TCP for a while.
struct FallbackMemory {
  std::mutex mu;
  std::map<std::string, TimePoint, std::less<>> ucx_failed_until;

  bool Failed(std::string_view address) {
    std::lock_guard lock(mu);
    auto it = ucx_failed_until.find(address);
    if (it == ucx_failed_until.end()) return false;
    if (Clock::Real().Now() < it->second) return true;
    ucx_failed_until.erase(it);
    return false;
  }
  void MarkFailed(const std::string& address, Duration for_how_long) {
    std::lock_guard lock(mu);
    ucx_failed_until[address] = Clock::Real().Now() + for_how_long;
  }
};

// A UCX connection that reports to FallbackMemory when it fails (rather than being closed by
// this node), so that the next connect to its address uses TCP.
class WatchedConnection : public Connection {
 public:
  WatchedConnection(std::unique_ptr<Connection> inner, std::shared_ptr<FallbackMemory> memory,
                    std::string address, Duration retry_after, LogFn log)
      : inner_(std::move(inner)),
        memory_(std::move(memory)),
        address_(std::move(address)),
        retry_after_(retry_after),
        log_(std::move(log)) {}
  ~WatchedConnection() override { Close(); }

  const PeerInfo& peer() const override { return inner_->peer(); }
  Status Send(OutFrame frame, Duration timeout) override {
    return Observe(inner_->Send(std::move(frame), timeout));
  }
  Result<Frame> Receive(Duration timeout) override {
    Result<Frame> frame = inner_->Receive(timeout);
    if (!frame.ok()) Observe(frame.status()).IgnoreError();
    return frame;
  }
  Status Flush(Duration timeout) override { return Observe(inner_->Flush(timeout)); }
  bool CanDeliverFrames() const override { return inner_->CanDeliverFrames(); }
  // The end reaches the handler through Observe, as a failed Receive would.
  // NOLINTNEXTLINE(performance-unnecessary-value-param): the interface takes it by value
  bool DeliverFrames(FrameHandler handler) override {
    return inner_->DeliverFrames([this, handler = std::move(handler)](Result<Frame> frame) {
      if (!frame.ok()) Observe(frame.status()).IgnoreError();
      handler(std::move(frame));
    });
  }
  void Close() override {
    Observe(Status::Ok()).IgnoreError();
    {
      std::lock_guard lock(mu_);
      if (!reported_) reported_ = true;  // closed by us: not a UCX failure
    }
    inner_->Close();
  }
  Status status() const override { return inner_->status(); }

 private:
  Status Observe(Status result) {
    const Status now = inner_->status();
    if (now.ok()) return result;
    std::lock_guard lock(mu_);
    if (reported_) return result;
    reported_ = true;
    // Routine ends on either side (the peer's transport said goodbye first) are not failures.
    if (now.reason() == Reason::kClosedHere || now.reason() == Reason::kPeerClosed) {
      return result;
    }
    memory_->MarkFailed(address_, retry_after_);
    if (log_) {
      log_("ucx: connection to " + address_ + " failed (" + now.ToString() +
           "); connects to it use TCP for the next " +
           std::to_string(std::chrono::duration_cast<std::chrono::seconds>(retry_after_).count()) +
           " s");
    }
    return result;
  }

  std::unique_ptr<Connection> inner_;
  std::shared_ptr<FallbackMemory> memory_;
  std::string address_;
  Duration retry_after_;
  LogFn log_;
  std::mutex mu_;
  bool reported_ = false;
};

// Accepts on a TCP and a UCX listener at once: one thread each waits on its listener and hands
// what it accepts to Accept (two threads per listener, whatever the number of peers).
class DualListener : public Listener {
 public:
  DualListener(std::unique_ptr<Listener> tcp, std::unique_ptr<Listener> ucx, std::string address)
      : tcp_(std::move(tcp)), ucx_(std::move(ucx)), address_(std::move(address)) {
    threads_.emplace_back([this] { Pump(*tcp_); });
    threads_.emplace_back([this] { Pump(*ucx_); });
  }
  ~DualListener() override {
    Close();
    for (auto& t : threads_) t.join();
  }

  Result<std::unique_ptr<Connection>> Accept(Duration timeout) override {
    std::unique_lock lock(mu_);
    auto ready = [&] { return !accepted_.empty() || closed_; };
    const bool got =
        timeout == kForever ? (cv_.wait(lock, ready), true) : cv_.wait_for(lock, timeout, ready);
    if (accepted_.empty()) {
      if (closed_) return Unavailable("listener closed");
      if (!got) return DeadlineExceeded("no connection within the timeout");
    }
    std::unique_ptr<Connection> conn = std::move(accepted_.front());
    accepted_.pop_front();
    return conn;
  }
  std::string address() const override { return address_; }
  void Close() override {
    {
      std::lock_guard lock(mu_);
      if (closed_) return;
      closed_ = true;
      accepted_.clear();
    }
    cv_.notify_all();
    tcp_->Close();
    ucx_->Close();
  }

 private:
  void Pump(Listener& from) {
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (closed_) return;
      }
      Result<std::unique_ptr<Connection>> conn = from.Accept(std::chrono::milliseconds(200));
      if (!conn.ok()) {
        if (conn.status().code() == Code::kDeadlineExceeded) continue;
        return;  // closed
      }
      std::lock_guard lock(mu_);
      if (closed_) return;
      accepted_.push_back(std::move(*conn));
      cv_.notify_one();
    }
  }

  std::unique_ptr<Listener> tcp_, ucx_;
  std::string address_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Connection>> accepted_;
  bool closed_ = false;
  std::vector<std::thread> threads_;
};

// `address` with its port replaced by `port`.
Result<std::string> WithPort(std::string_view address, uint16_t port) {
  WC_ASSIGN_OR_RETURN(HostPort parsed, ParseHostPort(address));
  parsed.port = port;
  return parsed.ToString();
}

class DualTransport : public Transport {
 public:
  DualTransport(const Options& options, TransportSelection selection,
                std::unique_ptr<Transport> tcp, std::unique_ptr<Transport> ucx)
      : log_(options.log),
        selection_(selection),
        tcp_(std::move(tcp)),
        ucx_(std::move(ucx)),
        memory_(std::make_shared<FallbackMemory>()) {}

  Capabilities capabilities() const override {
    Capabilities c = tcp_->capabilities();
    if (ucx_ != nullptr) c.name = "ucx+tcp";
    return c;
  }
  TransportStats stats() const override {
    TransportStats s = tcp_->stats();
    if (ucx_ != nullptr) {
      const TransportStats u = ucx_->stats();
      s.bytes_received += u.bytes_received;
      s.bytes_sent += u.bytes_sent;
    }
    return s;
  }
  std::vector<std::pair<std::string, TransportStats>> ByTransport() const {
    std::vector<std::pair<std::string, TransportStats>> out = {{"tcp", tcp_->stats()}};
    if (ucx_ != nullptr) out.emplace_back("ucx", ucx_->stats());
    return out;
  }

  Result<std::unique_ptr<Listener>> Listen(std::string_view address) override {
    WC_ASSIGN_OR_RETURN(auto parts, SplitTransportAddress(address));
    WC_ASSIGN_OR_RETURN(std::unique_ptr<Listener> tcp, tcp_->Listen(parts.first));
    if (ucx_ == nullptr) return tcp;
    const std::string bound_tcp = tcp->address();
    std::string ucx_address = parts.second;
    if (ucx_address.empty()) {
      WC_ASSIGN_OR_RETURN(ucx_address, WithPort(bound_tcp, 0));
    }
    Result<std::unique_ptr<Listener>> ucx = ucx_->Listen(ucx_address);
    if (!ucx.ok()) {
      if (selection_.kind == TransportKind::kUcx) return ucx.status();
      Log("ucx: cannot listen on " + ucx_address + " (" + ucx.status().ToString() +
          "); serving over TCP only");
      return tcp;
    }
    WC_ASSIGN_OR_RETURN(const HostPort bound_ucx, ParseHostPort((*ucx)->address()));
    const std::string advertised =
        bound_tcp + std::string(kUcxSuffix) + std::to_string(*bound_ucx.port);
    return std::unique_ptr<Listener>(
        std::make_unique<DualListener>(std::move(tcp), std::move(*ucx), advertised));
  }

  // Without UCX every connect is TCP's, which does not block. With UCX a connect may try UCX
  // first and fall back to TCP: that chain blocks (Connect), on the caller's connect threads.
  bool CanConnectAsync() const override { return ucx_ == nullptr; }
  void ConnectAsync(std::string_view address, Duration timeout, ConnectDone done) override {
    if (ucx_ != nullptr) {
      done(Connect(address, timeout));
      return;
    }
    Result<std::pair<std::string, std::string>> parts = SplitTransportAddress(address);
    if (!parts.ok()) {
      done(parts.status());
      return;
    }
    tcp_->ConnectAsync(parts->first, timeout, std::move(done));
  }

  Result<std::unique_ptr<Connection>> Connect(std::string_view address, Duration timeout) override {
    WC_ASSIGN_OR_RETURN(auto parts, SplitTransportAddress(address));
    if (ucx_ == nullptr || parts.second.empty()) return tcp_->Connect(parts.first, timeout);
    const bool required = selection_.kind == TransportKind::kUcx;
    if (!required && memory_->Failed(parts.second)) return tcp_->Connect(parts.first, timeout);
    Result<std::unique_ptr<Connection>> conn = ucx_->Connect(
        parts.second, required ? timeout : std::min(timeout, selection_.ucx_connect_timeout));
    if (conn.ok()) {
      return std::unique_ptr<Connection>(std::make_unique<WatchedConnection>(
          std::move(*conn), memory_, parts.second, selection_.ucx_retry_after, log_));
    }
    // A peer that refused us (wrong cluster, bad proof) refuses TCP too: no fallback for that.
    const Code code = conn.status().code();
    if (required || code == Code::kUnauthenticated || code == Code::kFailedPrecondition) {
      return conn.status();
    }
    Log("ucx: connect to " + parts.second + " failed (" + conn.status().ToString() +
        "); using TCP");
    memory_->MarkFailed(parts.second, selection_.ucx_retry_after);
    return tcp_->Connect(parts.first, timeout);
  }

 private:
  void Log(const std::string& line) {
    if (log_) log_(line);
  }

  LogFn log_;
  TransportSelection selection_;
  std::unique_ptr<Transport> tcp_, ucx_;
  std::shared_ptr<FallbackMemory> memory_;
};

// A fault point for the UCX fallback tests: compiled in only with WC_TEST_HOOKS, so a user's
// environment cannot make an installed build fail its transfers.
uint64_t FailAfterBytesFromEnv(uint64_t configured) {
#if WC_TEST_HOOKS
  const char* text = std::getenv("WEIGHTCAST_UCX_FAIL_AFTER_BYTES");
  if (text == nullptr || *text == '\0') return configured;
  uint64_t value = 0;
  const std::string_view s(text);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return configured;
  return value;
#else
  return configured;
#endif
}

}  // namespace

Result<TransportKind> ParseTransportKind(std::string_view text) {
  if (text == "auto") return TransportKind::kAuto;
  if (text == "ucx") return TransportKind::kUcx;
  if (text == "tcp") return TransportKind::kTcp;
  return InvalidArgument("transport '" + std::string(text) + "' is not one of auto, ucx, tcp");
}

std::string_view TransportKindName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kAuto:
      return "auto";
    case TransportKind::kUcx:
      return "ucx";
    case TransportKind::kTcp:
      return "tcp";
  }
  return "?";
}

Result<std::pair<std::string, std::string>> SplitTransportAddress(std::string_view address) {
  const size_t at = address.find(kUcxSuffix);
  if (at == std::string_view::npos) return std::pair{std::string(address), std::string()};
  const std::string_view tcp = address.substr(0, at);
  const std::string_view port = address.substr(at + kUcxSuffix.size());
  uint32_t value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    return InvalidArgument("address '" + std::string(address) +
                           "': the UCX port after ',ucx=' must be a number up to 65535");
  }
  WC_ASSIGN_OR_RETURN(std::string ucx, WithPort(tcp, static_cast<uint16_t>(value)));
  return std::pair{std::string(tcp), std::move(ucx)};
}

Result<std::unique_ptr<Transport>> CreateTransport(const Options& options,
                                                   TransportSelection selection) {
  selection.ucx.fail_after_bytes = FailAfterBytesFromEnv(selection.ucx.fail_after_bytes);
  std::unique_ptr<Transport> ucx;
  if (selection.kind == TransportKind::kTcp) {
    // TCP only, but still through DualTransport: peers' addresses may offer UCX (",ucx=").
  } else if (UcxTransport::Built()) {
    Result<std::unique_ptr<Transport>> made = UcxTransport::Create(options, selection.ucx);
    if (made.ok()) {
      ucx = std::move(*made);
    } else if (selection.kind == TransportKind::kUcx) {
      return made.status();
    } else if (options.log) {
      options.log("ucx: " + made.status().ToString() + "; using TCP only");
    }
  } else if (selection.kind == TransportKind::kUcx) {
    return UcxTransport::Create(options, selection.ucx).status();
  }
  Options tcp_options = options;
  WC_ASSIGN_OR_RETURN(std::unique_ptr<Transport> tcp,
                      TcpTransport::Create(std::move(tcp_options), selection.tcp_io_threads));
  return std::unique_ptr<Transport>(
      std::make_unique<DualTransport>(options, selection, std::move(tcp), std::move(ucx)));
}

std::vector<std::pair<std::string, TransportStats>> StatsByTransport(const Transport& transport) {
  if (const auto* dual = dynamic_cast<const DualTransport*>(&transport)) return dual->ByTransport();
  return {{transport.capabilities().name, transport.stats()}};
}

}  // namespace weightcast::net
