// The UCX transport (net/ucx_transport.h, docs/transport_ucx.md). One file, past 800 lines, because
// every UCP call and callback runs on the one progress thread its Core owns: the connection, the
// listener and the transport are thin faces of that one thread's state.
//
// Threads: one progress thread per transport owns the UCP worker (UCS_THREAD_MODE_SINGLE); every
// UCP call and callback runs on it. Caller threads (Send, Receive, Connect, Accept, Close) only
// touch a connection's `Shared` part under its mutex and hand work to the progress thread
// through a command queue and an eventfd. The progress thread sleeps in poll() on that eventfd
// and the worker's event fd (ucp_worker_get_efd / ucp_worker_arm), waking at least every
// kTickPeriod for keepalives and handshake deadlines.
//
// Receive path: the AM handler parses the message head (net/ucx_message.h), reserves the frame's
// slot by sequence number, and either copies an eager message's data or, for rendezvous, calls
// ucp_am_recv_data_nbx straight into the frame's body. When the connection's receive queue is
// full a rendezvous descriptor is kept unreceived (the sender's request stays pending), which is
// this transport's flow control. Frames are handed to Receive (or a push handler) in sequence
// order. A download limit paces the taking: Receive sleeps the limit's debt after a chunk; push
// delivery holds the frames after a chunk in the inbox until the debt is paid (on the progress
// thread's clock), where they count against the receive queue, so rendezvous reads wait and the
// sender slows down either way.
//
// Registered memory (docs/transport_ucx.md, "Registered memory"): a rendezvous receive maps the
// frame's buffer (ucp_mem_map) for the time of the receive and passes the handle; a large send
// passes the handle of a cached registration of its region (net/ucx_registration_cache.h).
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "net/ucx_message.h"
#include "net/ucx_registration_cache.h"
#include "net/ucx_transport.h"
#include "util/host_port.h"

namespace weightcast::net {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr unsigned kAmId = 17;
// The upgrade message: "here is my worker address and my id for this connection".
constexpr unsigned kUpgradeAmId = 18;
constexpr size_t kMaxWorkerAddressBytes = 64 << 10;
constexpr auto kTickPeriod = std::chrono::milliseconds(20);
// Sequence numbers further ahead of the next one to deliver than this are a broken peer.
constexpr uint64_t kMaxReorderWindow = 1u << 16;
// Rendezvous receives a connection runs at once: one, or more while they total under
// kReceiveAheadBytes (small chunks over a long link still pipeline). Few pulls keep the buffers
// being written few, so they stay in cache: with every announced message pulled at once (up to
// receive_queue_bytes, 8 of 4 MiB) the shared-memory receive wrote a 32 MiB working set, and
// one pull of 4 MiB at a time ran 1.17x two (docs/transport_ucx.md, "One pull at a time"). The
// cost is a round trip between large messages, a few percent of a 4 MiB message even at
// 100 Gbit/s.
constexpr uint32_t kMinReceivesInFlight = 1;
constexpr size_t kReceiveAheadBytes = 4u << 20;
// Payloads from this size on are sent and received under a ucp_mem_map handle: they go by
// rendezvous (or zero-copy) on every UCX transport, where a registration is what UCX would make
// anyway. Smaller ones are copied into UCX's own registered buffers.
constexpr size_t kRegisterMinBytes = 256u << 10;
// The send registrations kept for reuse (docs/transport_ucx.md): on RDMA every registered page
// is pinned, so this is the memory a node pins for sending, beyond the sends in flight.
constexpr UcxRegistrationCache::Limits kSendCacheLimits{.max_entries = 256,
                                                        .max_bytes = size_t{512} << 20};

std::string UcsError(ucs_status_t status) { return ucs_status_string(status); }

template <typename Pred>
bool WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Duration timeout,
             Pred pred) {
  if (timeout == kForever) {
    cv.wait(lock, pred);
    return true;
  }
  return cv.wait_for(lock, timeout, pred);
}

// "ip:port" or "[ipv6]:port", numeric only (no name lookups on the progress thread).
Result<sockaddr_storage> ParseSockaddr(std::string_view address, socklen_t* length) {
  Result<HostPort> parsed = ParseHostPort(address);
  if (!parsed.ok()) return parsed.status().WithContext("ucx");
  const std::string& host = parsed->host;
  const std::string port = std::to_string(*parsed->port);
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return InvalidArgument("ucx address '" + std::string(address) + "' is not a numeric ip:port");
  }
  sockaddr_storage out{};
  std::memcpy(&out, found->ai_addr, found->ai_addrlen);
  *length = found->ai_addrlen;
  freeaddrinfo(found);
  return out;
}

std::string FormatSockaddr(const sockaddr_storage& addr) {
  char host[NI_MAXHOST], port[NI_MAXSERV];
  const socklen_t len = addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), port,
                  sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  if (addr.ss_family == AF_INET6) return "[" + std::string(host) + "]:" + port;
  return std::string(host) + ":" + port;
}

// Whether something accepts TCP connections at `addr` within `timeout`. UCX 1.13 aborts the
// process on an assertion (wireup_ep.c:494, in ucp_ep_set_failed) when a client endpoint's
// connection is refused during wireup, so Connect asks the kernel first: a refused or silent
// port fails here, cleanly, before any endpoint exists.
Status ProbeListener(const sockaddr_storage& addr, socklen_t len, Duration timeout,
                     const std::string& address) {
  const int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("ucx: socket", errno);
  int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len);
  int err = rc == 0 ? 0 : errno;
  if (rc != 0 && err == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
    rc = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(ms, 1, 10000)));
    if (rc <= 0) {
      err = ETIMEDOUT;
    } else {
      socklen_t err_len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len);
    }
  }
  ::close(fd);
  if (err != 0) {
    return Unavailable("ucx: connect to " + address + ": " + std::strerror(err));
  }
  return Status::Ok();
}

class Core;
struct ListenerState;

// One connection. `mu` guards the block marked "shared"; everything else belongs to the
// progress thread.
struct Conn : std::enable_shared_from_this<Conn> {
  // -- shared (mu) --
  std::mutex mu;
  std::condition_variable cv;
  Status status;
  bool established = false;
  PeerInfo peer;
  std::deque<Frame> inbox;
  size_t inbox_bytes = 0;
  size_t control_bytes = 0;  // queued or in flight, per class (control frames never wait for
  size_t data_bytes = 0;     // room behind chunk bytes)
  bool flushed_before_failure = false;
  bool kick_pending = false;  // a receive-queue wake is posted

  // -- push delivery (Connection::DeliverFrames) --
  // handler_mu is held across every handler call and while a frame goes to the inbox, and is
  // taken before mu, never under it: a frame is either in the inbox before the handler is set
  // (and drained to it by DeliverFrames) or handed to the handler, never stranded.
  std::mutex handler_mu;
  Connection::FrameHandler handler;  // guarded by handler_mu
  bool handler_ended = false;        // guarded by handler_mu: the end status went to it

  // -- progress thread --
  Core* core_for_callbacks = nullptr;
  ucp_ep_h ep = nullptr;       // made from the sockaddr (the handshake travels on it)
  ucp_ep_h data_ep = nullptr;  // made from the peer's worker address (every frame after it)
  uint64_t local_id = 0;       // our id for this connection (the peer puts it in each message)
  uint64_t remote_id = 0;      // the peer's id, learned from its upgrade message
  std::optional<std::pair<uint64_t, std::vector<uint8_t>>> early_upgrade;  // before established
  bool initiator = false;
  std::string address;
  std::optional<Handshake> handshake;
  std::shared_ptr<ListenerState> listener;  // the acceptor's, until established
  TimePoint handshake_deadline{};
  TimePoint last_sent{}, last_received{};
  uint64_t next_send_seq = 0;
  uint64_t next_deliver_seq = 0;
  bool dead = false;  // failed or closed: ep closed or closing, nothing more is processed
  size_t receiving_bytes = 0;
  uint32_t receiving = 0;  // rendezvous receives in flight
  bool starting = false;   // inside StartDeferred (a receive that completes at once re-enters)
  // Push delivery under a download limit: no frame goes to the handler before this (the limit's
  // debt for the last chunk handed over); meanwhile frames wait in the inbox.
  TimePoint deliver_after{};

  struct Slot {
    FrameType type = FrameType::kPing;
    // The body; for a deferred rendezvous message empty until its receive starts, so that
    // waiting messages hold no buffer.
    Bytes body;
    size_t length = 0;                                     // the body's length
    size_t prefix = 0;                                     // body bytes that came in the AM header
    std::array<uint8_t, kChunkHeaderSize> prefix_bytes{};  // those bytes, while body is empty
    void* desc = nullptr;  // rendezvous descriptor not yet received (deferred)
    bool ready = false;    // the body is complete
  };
  std::map<uint64_t, Slot> slots;  // by sequence number, from next_deliver_seq on

  bool established_io() const { return handshake.has_value() && handshake->established(); }
  bool upgraded() const { return data_ep != nullptr; }

  // Marks the connection failed (first status wins) and hands the status to a push handler.
  // Returns false when it already was.
  bool FailShared(Status why) {
    Status end;
    {
      std::lock_guard lock(mu);
      if (!status.ok()) return false;
      status = std::move(why);
      end = status;
      flushed_before_failure = control_bytes == 0 && data_bytes == 0;
      cv.notify_all();
    }
    EndHandler(end);
    return true;
  }

  // The end status to the push handler, once, after the frames a download limit held in the
  // inbox; the handler is dropped after it.
  void EndHandler(const Status& end) {
    std::lock_guard h(handler_mu);
    if (!handler || handler_ended) return;
    handler_ended = true;
    Connection::FrameHandler last = std::move(handler);
    handler = nullptr;
    std::deque<Frame> held;
    {
      std::lock_guard lock(mu);
      held.swap(inbox);
      inbox_bytes = 0;
    }
    for (Frame& frame : held) last(std::move(frame));
    last(end);
  }

  // Push delivery from now on: the inbox first, in order, then every frame as it is ready, then
  // the end status.
  bool StartDelivering(Connection::FrameHandler to) {
    std::lock_guard h(handler_mu);
    if (handler || handler_ended) return false;
    std::deque<Frame> backlog;
    Status end;
    {
      std::lock_guard lock(mu);
      backlog.swap(inbox);
      inbox_bytes = 0;
      end = status;
    }
    for (Frame& frame : backlog) to(std::move(frame));
    if (!end.ok()) {
      handler_ended = true;
      to(end);
      return true;
    }
    handler = std::move(to);
    return true;
  }
};

struct ListenerState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Conn>> ready;
  bool closed = false;
  // progress thread
  ucp_listener_h listener = nullptr;
  size_t pending = 0;
  Core* core = nullptr;
};

struct SendOp {
  std::shared_ptr<Conn> conn;
  OutFrame frame;
  std::array<uint8_t, kUcxMaxMessageHeadSize> head{};
  size_t head_size = 0;
  bool control = false;
  bool counted = true;  // holds send-queue room taken by Send (pings and handshake frames do not)
  UcxRegistrationCache::Lease lease;  // the payload's registration, while in flight
};

// A rendezvous receive in flight owns the frame's buffer, so that a connection killed meanwhile
// cannot free memory UCX is still writing into.
struct RecvOp {
  std::shared_ptr<Conn> conn;
  uint64_t seq = 0;
  Bytes body;
  ucp_mem_h memh = nullptr;  // the body's registration for this receive (null: none)
};

class Core : public std::enable_shared_from_this<Core> {
 public:
  Core(Options options, UcxOptions ucx) : options_(std::move(options)), ucx_(ucx) {}

  ~Core() {
    Stop();
    if (worker_address_ != nullptr) ucp_worker_release_address(worker_, worker_address_);
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    // Requests that never completed (a receive from a peer that vanished mid-rendezvous on an
    // endpoint without error handling) are gone with the worker, callbacks uncalled: their
    // registrations must go before ucp_cleanup, which asserts that none is left, and their
    // buffers and payload owners with them.
    for (RecvOp* op : receiving_) {
      if (op->memh != nullptr) ucp_mem_unmap(context_, op->memh);
      delete op;  // NOLINT(cppcoreguidelines-owning-memory): owned by the request, now gone
    }
    for (SendOp* op : sending_) delete op;  // NOLINT(cppcoreguidelines-owning-memory): as above
    // After the worker: no request may still use a cached registration.
    send_cache_.reset();
    if (context_ != nullptr) ucp_cleanup(context_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  Status Start() {
    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) return Unavailable("ucx: reading the UCX configuration: " + UcsError(s));
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.name = "weightcast";
    s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (s != UCS_OK) return Unavailable("ucx: ucp_init failed: " + UcsError(s));
    send_cache_ = std::make_unique<UcxRegistrationCache>(
        kSendCacheLimits,
        [this](const void* start, size_t length) -> UcxRegistrationCache::Handle {
          return Map(const_cast<void*>(start), length,
                     UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_REMOTE_READ);
        },
        [this](UcxRegistrationCache::Handle handle) {
          ucp_mem_unmap(context_, static_cast<ucp_mem_h>(handle));
        });
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    s = ucp_worker_create(context_, &wp, &worker_);
    if (s != UCS_OK) return Unavailable("ucx: ucp_worker_create failed: " + UcsError(s));
    s = ucp_worker_get_efd(worker_, &worker_fd_);
    if (s != UCS_OK) return Unavailable("ucx: no worker event fd: " + UcsError(s));
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = kAmId;
    hp.cb = &Core::OnAmThunk;
    hp.arg = this;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    s = ucp_worker_set_am_recv_handler(worker_, &hp);
    if (s != UCS_OK) return Unavailable("ucx: cannot set the AM handler: " + UcsError(s));
    hp.id = kUpgradeAmId;
    hp.cb = &Core::OnUpgradeThunk;
    s = ucp_worker_set_am_recv_handler(worker_, &hp);
    if (s != UCS_OK) return Unavailable("ucx: cannot set the AM handler: " + UcsError(s));
    s = ucp_worker_get_address(worker_, &worker_address_, &worker_address_size_);
    if (s != UCS_OK) return Unavailable("ucx: no worker address: " + UcsError(s));
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return Internal("ucx: eventfd failed");
    thread_ = std::thread([this] { Loop(); });
    return Status::Ok();
  }

  // Fails every connection, closes every endpoint and listener, joins the progress thread.
  // Idempotent; never from the progress thread.
  void Stop() {
    {
      std::lock_guard lock(cmd_mu_);
      if (stop_) return;
      stop_ = true;
    }
    if (thread_.joinable()) {
      Wake();
      thread_.join();
    }
  }

  const Options& options() const { return options_; }
  TransportStats stats() const { return {bytes_received_.load(), bytes_sent_.load()}; }
  UcxMemoryStats memory_stats() const {
    return {.bytes_sent_registered = bytes_sent_registered_.load(),
            .bytes_received_registered = bytes_received_registered_.load(),
            .send_registrations = send_registrations_.load(),
            .send_registration_hits = send_registration_hits_.load(),
            .receive_registrations = receive_registrations_.load(),
            .registration_failures = registration_failures_.load(),
            .cached_registrations = cached_registrations_.load(),
            .cached_registered_bytes = cached_registered_bytes_.load(),
            .max_receives_in_flight = max_receives_in_flight_.load()};
  }

  // Runs `fn` on the progress thread (soon; never inline).
  void Post(std::function<void()> fn) {
    {
      std::lock_guard lock(cmd_mu_);
      if (stop_) return;  // the progress thread is gone or going: nothing would run it
      commands_.push_back(std::move(fn));
    }
    Wake();
  }

  // Runs `fn` on the progress thread and waits for its result.
  // Only for calls whose result type can say "stopped" (Status).
  template <typename T>
  T Call(std::function<T()> fn) {
    {
      std::lock_guard lock(cmd_mu_);
      if (stop_) return T(Unavailable("ucx transport is shut down"));
    }
    std::mutex m;
    std::condition_variable cv;
    std::optional<T> out;
    Post([&] {
      T value = fn();
      std::lock_guard lock(m);
      out.emplace(std::move(value));
      cv.notify_all();
    });
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return out.has_value(); });
    return std::move(*out);
  }

  // Caller side of Send: waits for room, then hands the frame to the progress thread.
  Status Send(const std::shared_ptr<Conn>& conn, OutFrame frame, Duration timeout) {
    WC_RETURN_IF_ERROR(CheckSendable(frame));
    const size_t size = frame.wire_size();
    const bool control = frame.type() != FrameType::kChunk;
    if (options_.upload_limit && !control) {
      const Duration wait = options_.upload_limit->Reserve(size);
      if (wait > Duration::zero()) std::this_thread::sleep_for(wait);
    }
    {
      std::unique_lock lock(conn->mu);
      size_t& queued = control ? conn->control_bytes : conn->data_bytes;
      const bool room = WaitFor(conn->cv, lock, timeout, [&] {
        return !conn->status.ok() || queued == 0 || queued + size <= options_.send_queue_bytes;
      });
      if (!conn->status.ok()) return conn->status;
      if (!room) {
        return DeadlineExceeded("send queue full for " + std::to_string(timeout.count() / 1000000) +
                                " ms (peer is slow)");
      }
      queued += size;
    }
    auto op = std::make_unique<SendOp>();
    op->conn = conn;
    op->frame = std::move(frame);
    op->control = control;
    // std::function wants a copyable callable: the op travels in a shared holder.
    auto holder = std::make_shared<std::unique_ptr<SendOp>>(std::move(op));
    Post([this, holder] { StartSend(std::move(*holder)); });
    return Status::Ok();
  }

  bool paces_downloads() const { return options_.download_limit != nullptr; }

  Result<Frame> Receive(const std::shared_ptr<Conn>& conn, Duration timeout) {
    std::unique_lock lock(conn->mu);
    const bool got = WaitFor(conn->cv, lock, timeout,
                             [&] { return !conn->inbox.empty() || !conn->status.ok(); });
    if (conn->inbox.empty()) {
      if (!conn->status.ok()) return conn->status;
      if (!got) return DeadlineExceeded("no frame within the timeout");
    }
    Frame frame = std::move(conn->inbox.front());
    conn->inbox.pop_front();
    conn->inbox_bytes -= frame.body.size();
    // The download limit paces the taking: the receive queue fills, rendezvous reads wait, and
    // the sender slows down.
    Duration pace = Duration::zero();
    if (options_.download_limit && frame.type == FrameType::kChunk) {
      pace = options_.download_limit->Reserve(kFrameHeaderSize + frame.body.size());
    }
    // Deferred rendezvous messages may now fit: let the progress thread look.
    if (!conn->kick_pending) {
      conn->kick_pending = true;
      Post([this, conn] {
        {
          std::lock_guard inner(conn->mu);
          conn->kick_pending = false;
        }
        StartDeferred(*conn);
      });
    }
    lock.unlock();
    if (pace > Duration::zero()) std::this_thread::sleep_for(pace);
    return frame;
  }

  Status Flush(const std::shared_ptr<Conn>& conn, Duration timeout) {
    std::unique_lock lock(conn->mu);
    const bool done = WaitFor(conn->cv, lock, timeout, [&] {
      return (conn->control_bytes == 0 && conn->data_bytes == 0) || !conn->status.ok();
    });
    if (!conn->status.ok()) return conn->flushed_before_failure ? Status::Ok() : conn->status;
    return done ? Status::Ok() : DeadlineExceeded("flush did not finish within the timeout");
  }

  void Close(const std::shared_ptr<Conn>& conn) {
    if (conn->FailShared(
            Unavailable("connection closed by this node").WithReason(Reason::kClosedHere))) {
      Post([this, conn] { SayGoodbyeAndClose(conn); });
    }
  }

  // A routine close from this side. UCX reports the peer's end of any disconnect as a reset,
  // whether we closed on purpose or crashed, so the goodbye (behind every frame sent before it,
  // and flushed by the close) is how the peer tells the two apart (transport_select.cc's
  // fallback memory demotes an address to TCP only for a failure).
  void SayGoodbyeAndClose(const std::shared_ptr<Conn>& conn) {
    if (!conn->dead && conn->established_io()) {
      SendNow(conn, Handshake::GoodbyeFrame(), /*counted=*/false);
    }
    Kill(*conn, /*force=*/false);
  }

  Result<std::shared_ptr<Conn>> Connect(std::string_view address, Duration timeout) {
    socklen_t len = 0;
    WC_ASSIGN_OR_RETURN(sockaddr_storage addr, ParseSockaddr(address, &len));
    auto conn = std::make_shared<Conn>();
    conn->core_for_callbacks = this;
    conn->initiator = true;
    conn->address = std::string(address);
    const Duration limit = std::min(timeout, options_.handshake_timeout);
    WC_RETURN_IF_ERROR(ProbeListener(addr, len, limit, conn->address));
    Status created = Call<Status>([&]() -> Status {
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
      ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
      ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
      ep.sockaddr.addrlen = len;
      // PEER is required here: under NONE, UCX 1.13 refuses sends on a client sockaddr endpoint
      // ("Endpoint is not connected"). Known UCX 1.13 bug: under PEER it aborts the process (an
      // assertion in wireup_ep.c:494, in ucp_ep_set_failed) when the peer resets the
      // connection while this endpoint is still in wireup (a peer killed just then; reproduced
      // with a listener that accepts and resets). The probe above avoids the common case (no
      // listener); docs/transport_ucx.md says why `tcp` stays the default.
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &Core::OnEpErrorThunk;
      ep.err_handler.arg = conn.get();
      ucs_status_t s = ucp_ep_create(worker_, &ep, &conn->ep);
      if (s != UCS_OK) {
        return Unavailable("ucx: connect to " + conn->address + ": " + UcsError(s));
      }
      Begin(conn, Clock::Real().Now() + limit);
      return Status::Ok();
    });
    WC_RETURN_IF_ERROR(created);
    std::unique_lock lock(conn->mu);
    WaitFor(conn->cv, lock, limit + std::chrono::milliseconds(100),
            [&] { return conn->established || !conn->status.ok(); });
    if (conn->established && conn->status.ok()) return conn;
    Status why = conn->status.ok()
                     ? DeadlineExceeded("ucx: handshake with " + conn->address + " timed out")
                     : conn->status;
    lock.unlock();
    if (conn->FailShared(why)) Post([this, conn] { Kill(*conn, /*force=*/true); });
    return why;
  }

  Result<std::shared_ptr<ListenerState>> Listen(std::string_view address, std::string* bound) {
    socklen_t len = 0;
    WC_ASSIGN_OR_RETURN(sockaddr_storage addr, ParseSockaddr(address, &len));
    auto state = std::make_shared<ListenerState>();
    state->core = this;
    Status made = Call<Status>([&]() -> Status {
      ucp_listener_params_t lp{};
      lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
      lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
      lp.sockaddr.addrlen = len;
      lp.conn_handler.cb = &Core::OnConnRequestThunk;
      lp.conn_handler.arg = state.get();
      ucs_status_t s = ucp_listener_create(worker_, &lp, &state->listener);
      if (s != UCS_OK) {
        return Unavailable("ucx: listen on " + std::string(address) + ": " + UcsError(s));
      }
      ucp_listener_attr_t attr{};
      attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
      s = ucp_listener_query(state->listener, &attr);
      if (s != UCS_OK) return Unavailable("ucx: listener query: " + UcsError(s));
      *bound = FormatSockaddr(attr.sockaddr);
      listeners_.push_back(state);
      return Status::Ok();
    });
    WC_RETURN_IF_ERROR(made);
    return state;
  }

  void CloseListener(const std::shared_ptr<ListenerState>& state) {
    std::deque<std::shared_ptr<Conn>> unclaimed;
    {
      std::lock_guard lock(state->mu);
      if (state->closed) return;
      state->closed = true;
      unclaimed.swap(state->ready);
      state->cv.notify_all();
    }
    for (auto& c : unclaimed) Close(c);
    Call<Status>([&] {
      if (state->listener != nullptr) ucp_listener_destroy(state->listener);
      state->listener = nullptr;
      std::erase(listeners_, state);
      return Status::Ok();
    }).IgnoreError();
  }

 private:
  // ucp_mem_map of existing memory; null (and counted) when UCX refuses, e.g. a protection the
  // memory does not allow.
  ucp_mem_h Map(void* start, size_t length, unsigned prot) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_PROT;
    mp.address = start;
    mp.length = length;
    mp.prot = prot;
    ucp_mem_h memh = nullptr;
    if (ucp_mem_map(context_, &mp, &memh) != UCS_OK) {
      ++registration_failures_;
      return nullptr;
    }
    return memh;
  }

  void PublishCacheCounters() {
    const UcxRegistrationCache::Counters c = send_cache_->counters();
    send_registrations_ = c.registrations;
    send_registration_hits_ = c.hits;
    cached_registrations_ = c.entries;
    cached_registered_bytes_ = c.bytes;
  }

  void Wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  }

  // A new endpoint: register it, send our Hello, start the handshake clock.
  void Begin(const std::shared_ptr<Conn>& conn, TimePoint deadline) {
    const TimePoint now = Clock::Real().Now();
    conn->handshake.emplace(options_.self, options_.secret, conn->initiator);
    if (options_.tls.enabled) conn->handshake->ProveKeys(options_.tls.key_proof.get());
    conn->handshake_deadline = deadline;
    conn->last_received = now;
    // Random, so that a peer cannot aim a message at another peer's connection by guessing.
    do {
      conn->local_id = (static_cast<uint64_t>(random_()) << 32) | random_();
    } while (conn->local_id == 0 || by_id_.count(conn->local_id) != 0);
    by_id_[conn->local_id] = conn;
    by_ep_[conn->ep] = conn;
    SendNow(conn, conn->handshake->HelloFrame(), /*counted=*/false);
  }

  // After the handshake: tell the peer our worker address and our id for the connection. The
  // sockaddr endpoint gets only the lanes of its own network device (UCX 1.13: tcp on the
  // interface of the address); an endpoint made from the worker address gets every transport
  // both workers share (shared memory and cma on one host, verbs on a fabric).
  void SendUpgrade(const std::shared_ptr<Conn>& conn) {
    auto* header = new uint64_t(conn->local_id);
    ucp_request_param_t rp{};
    rp.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    rp.cb.send = [](void* request, ucs_status_t, void* user_data) {
      delete static_cast<uint64_t*>(user_data);
      ucp_request_free(request);
    };
    rp.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
    rp.user_data = header;
    ucs_status_ptr_t r = ucp_am_send_nbx(conn->ep, kUpgradeAmId, header, sizeof(*header),
                                         worker_address_, worker_address_size_, &rp);
    if (!UCS_PTR_IS_PTR(r)) {
      delete header;
      if (UCS_PTR_STATUS(r) != UCS_OK) {
        Fail(*conn,
             Unavailable("ucx: upgrade to " + conn->address + ": " + UcsError(UCS_PTR_STATUS(r))),
             true);
      }
    }
  }

  static ucs_status_t OnUpgradeThunk(void* arg, const void* header, size_t header_length,
                                     void* data, size_t length, const ucp_am_recv_param_t* param) {
    auto* core = static_cast<Core*>(arg);
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) return UCS_OK;
    auto it = core->by_ep_.find(param->reply_ep);
    if (it == core->by_ep_.end()) return UCS_OK;
    std::shared_ptr<Conn> conn = it->second;
    if (conn->dead || conn->ep != param->reply_ep) return UCS_OK;
    uint64_t remote_id = 0;
    if (header_length == sizeof(remote_id)) std::memcpy(&remote_id, header, sizeof(remote_id));
    if (remote_id == 0 || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0 || length == 0 ||
        length > kMaxWorkerAddressBytes || conn->upgraded() || conn->early_upgrade.has_value()) {
      core->Fail(*conn, Corrupt("ucx: malformed upgrade message"), true);
      return UCS_OK;
    }
    const auto* bytes = static_cast<const uint8_t*>(data);
    conn->early_upgrade.emplace(remote_id, std::vector<uint8_t>(bytes, bytes + length));
    if (conn->established_io()) core->Upgrade(conn);
    return UCS_OK;
  }

  // Both the handshake and the peer's upgrade are in: make the data endpoint, then hand the
  // connection to Connect or Accept.
  void Upgrade(const std::shared_ptr<Conn>& conn) {
    auto [remote_id, address] = std::move(*conn->early_upgrade);
    conn->early_upgrade.reset();
    ucp_ep_params_t ep{};
    // Error mode NONE: UCX 1.13 leaves out every transport without peer-failure support under
    // PEER, which here is all of shared memory. A dead peer still fails the connection through
    // the sockaddr endpoint (PEER mode, kept open beside this one) and the keepalive.
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    ucs_status_t s = ucp_ep_create(worker_, &ep, &conn->data_ep);
    if (s != UCS_OK) {
      conn->data_ep = nullptr;
      Fail(*conn, Unavailable("ucx: data endpoint to " + conn->address + ": " + UcsError(s)), true);
      return;
    }
    conn->remote_id = remote_id;
    by_ep_[conn->data_ep] = conn;
    Surface(conn);
  }

  void Loop() {
    TimePoint next_tick = Clock::Real().Now();
    for (;;) {
      std::vector<std::function<void()>> commands;
      bool stop;
      {
        std::lock_guard lock(cmd_mu_);
        commands.swap(commands_);
        stop = stop_;
      }
      for (auto& c : commands) c();
      if (stop) break;
      while (ucp_worker_progress(worker_) != 0) {
      }
      const TimePoint now = Clock::Real().Now();
      if (now >= next_tick) {
        Tick(now);
        next_tick = now + kTickPeriod;
      }
      ResumePaced(now);
      ReapCloses();
      const ucs_status_t armed = ucp_worker_arm(worker_);
      if (armed == UCS_ERR_BUSY) continue;
      {
        std::lock_guard lock(cmd_mu_);
        if (!commands_.empty() || stop_) continue;
      }
      pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {worker_fd_, POLLIN, 0}};
      TimePoint wake_at = next_tick;
      for (const auto& conn : paced_) wake_at = std::min(wake_at, conn->deliver_after);
      const auto wait =
          std::chrono::duration_cast<std::chrono::milliseconds>(wake_at - Clock::Real().Now());
      ::poll(fds, 2, static_cast<int>(std::clamp<int64_t>(wait.count() + 1, 0, 100)));
      uint64_t drained;
      [[maybe_unused]] ssize_t n = ::read(wake_fd_, &drained, sizeof(drained));
    }
    Shutdown();
  }

  // Stop: every endpoint closes. Healthy ones flush first (a reply just sent must still reach
  // the peer), for at most half a second in all; pending requests go with ucp_worker_destroy.
  void Shutdown() {
    std::vector<std::shared_ptr<Conn>> all;
    for (auto& [ep, conn] : by_ep_) all.push_back(conn);
    for (auto& conn : all) {
      if (conn->FailShared(Unavailable("transport shut down"))) {
        SayGoodbyeAndClose(conn);
      } else {
        Kill(*conn, /*force=*/true);
      }
    }
    for (auto& l : listeners_) {
      if (l->listener != nullptr) ucp_listener_destroy(l->listener);
      l->listener = nullptr;
      std::lock_guard lock(l->mu);
      l->closed = true;
      l->cv.notify_all();
    }
    listeners_.clear();
    const TimePoint give_up = Clock::Real().Now() + std::chrono::milliseconds(500);
    while (!closing_.empty() && Clock::Real().Now() < give_up) {
      ucp_worker_progress(worker_);
      ReapCloses();
    }
    for (void* r : closing_) ucp_request_free(r);
    closing_.clear();
    // Wireup messages UCX still has queued on endpoints it is discarding (a reply to a peer that
    // connected just now) must leave before ucp_worker_destroy: UCX 1.13 aborts the process when
    // it purges a pending wireup reply (an assertion in ucp_request_send_state_ff, removed in
    // later UCX). A worker flush completes once they are out; within the same half second.
    ucp_request_param_t flush{};
    ucs_status_ptr_t flushing = ucp_worker_flush_nbx(worker_, &flush);
    if (UCS_PTR_IS_PTR(flushing)) {
      while (ucp_request_check_status(flushing) == UCS_INPROGRESS &&
             Clock::Real().Now() < give_up) {
        ucp_worker_progress(worker_);
      }
      ucp_request_free(flushing);
    }
  }

  void Tick(TimePoint now) {
    std::vector<std::shared_ptr<Conn>> all;
    all.reserve(by_ep_.size());
    for (auto& [ep, conn] : by_ep_) all.push_back(conn);
    // Certificate mode: a certificate revoked or expired while its connection is open is cut
    // off within about recheck_every, as TCP's TLS connections are.
    const bool recheck = options_.tls.enabled && options_.tls.check_peer &&
                         now - last_recheck_ >= options_.tls.recheck_every;
    if (recheck) last_recheck_ = now;
    for (auto& conn : all) {
      if (conn->dead) continue;
      if (!conn->upgraded()) {
        if (now > conn->handshake_deadline) {
          Fail(*conn, DeadlineExceeded("ucx: handshake with " + conn->address + " timed out"),
               true);
        }
        continue;
      }
      if (recheck && !conn->handshake->peer_certificate().empty()) {
        Status still =
            options_.tls.check_peer(conn->handshake->peer_certificate(), conn->handshake->peer());
        if (!still.ok()) {
          const Status why =
              Unauthenticated("the peer's certificate no longer passes: " + still.message());
          SendNow(conn, Handshake::ErrorFrameFor(why), false);
          if (conn->FailShared(why)) {
            Log("ucx: connection " + conn->peer.address + ": " + why.ToString());
          }
          Kill(*conn, /*force=*/false);
          continue;
        }
      }
      if (now - conn->last_received > options_.keepalive_timeout) {
        Fail(*conn,
             DeadlineExceeded("keepalive: nothing heard from peer for " +
                              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 now - conn->last_received)
                                                 .count()) +
                              " ms"),
             true);
        continue;
      }
      if (now - conn->last_sent >= options_.keepalive_interval) {
        SendNow(conn, OutFrame::Make(FrameType::kPing, {}), /*counted=*/false);
      }
    }
  }

  void Log(const std::string& line) {
    if (options_.log) options_.log(line);
  }

  // Fails the connection from the progress thread and closes its endpoint.
  void Fail(Conn& conn, const Status& why, bool log) {
    if (conn.FailShared(why) && log) {
      Log("ucx: connection " + (conn.peer.address.empty() ? conn.address : conn.peer.address) +
          ": " + why.ToString());
    }
    Kill(conn, /*force=*/true);
  }

  // Ends the endpoint and drops what the connection still holds. Idempotent.
  void Kill(Conn& conn, bool force) {
    if (conn.dead) return;
    conn.dead = true;
    for (auto& [seq, slot] : conn.slots) {
      if (slot.desc != nullptr) ucp_am_data_release(worker_, slot.desc);
      slot.desc = nullptr;
    }
    conn.slots.clear();
    if (conn.listener != nullptr) {
      --conn.listener->pending;
      conn.listener.reset();
    }
    by_id_.erase(conn.local_id);
    for (ucp_ep_h* ep : {&conn.data_ep, &conn.ep}) {
      if (*ep == nullptr) continue;
      ucp_request_param_t cp{};
      cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      cp.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
      ucs_status_ptr_t r = ucp_ep_close_nbx(*ep, &cp);
      if (UCS_PTR_IS_PTR(r)) closing_.push_back(r);
      by_ep_.erase(*ep);
      *ep = nullptr;
    }
  }

  void ReapCloses() {
    for (auto it = closing_.begin(); it != closing_.end();) {
      if (ucp_request_check_status(*it) != UCS_INPROGRESS) {
        ucp_request_free(*it);
        it = closing_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // The fault switch: true (and every connection failed) once the byte budget is spent.
  bool FaultTripped() {
    if (ucx_.fail_after_bytes == 0) return false;
    if (bytes_received_.load() + bytes_sent_.load() < ucx_.fail_after_bytes) return false;
    if (!fault_logged_) {
      fault_logged_ = true;
      Log("ucx: TESTING fault switch: failing every UCX connection after " +
          std::to_string(ucx_.fail_after_bytes) + " bytes");
      // A dead fabric takes no connections either: the UCX ports close, so a peer's Connect
      // finds nothing listening and falls back to TCP before any UCX wireup. (Accepting and then
      // failing a connection in wireup trips UCX 1.13's abort in the connecting peer,
      // docs/transport_ucx.md, "Default".)
      for (auto& l : listeners_) {
        if (l->listener != nullptr) ucp_listener_destroy(l->listener);
        l->listener = nullptr;
      }
    }
    std::vector<std::shared_ptr<Conn>> all;
    for (auto& [ep, conn] : by_ep_) all.push_back(conn);
    for (auto& conn : all) {
      Fail(*conn, Unavailable("ucx: connection failed (fault switch)"), false);
    }
    return true;
  }

  // Posts one AM send of a frame the transport itself makes (handshake, ping, error).
  void SendNow(const std::shared_ptr<Conn>& conn, OutFrame frame, bool counted) {
    auto op = std::make_unique<SendOp>();
    op->conn = conn;
    op->frame = std::move(frame);
    op->control = true;
    op->counted = counted;
    StartSend(std::move(op));
  }

  void StartSend(std::unique_ptr<SendOp> op) {
    Conn& conn = *op->conn;
    if (conn.dead || FaultTripped()) {
      if (op->counted) Release(conn, op->control, op->frame.wire_size());
      return;
    }
    // Before the upgrade the receiver finds the connection by the reply endpoint UCX hands its
    // AM handler; after it, by the id it gave us.
    const bool data = conn.upgraded();
    op->head_size =
        EncodeUcxMessageHead(data ? conn.remote_id : 0, conn.next_send_seq++, op->frame, op->head);
    conn.last_sent = Clock::Real().Now();
    ucp_request_param_t rp{};
    rp.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    rp.cb.send = &Core::OnSendDoneThunk;
    rp.flags = data ? 0 : UCP_AM_SEND_FLAG_REPLY;
    rp.user_data = op.get();
    if (op->frame.payload.size() >= kRegisterMinBytes) {
      op->lease = send_cache_->Acquire(op->frame.keep_alive, op->frame.payload.data(),
                                       op->frame.payload.size());
      PublishCacheCounters();
      if (op->lease.handle != nullptr) {
        rp.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        rp.memh = static_cast<ucp_mem_h>(op->lease.handle);
      }
    }
    ucs_status_ptr_t r =
        ucp_am_send_nbx(data ? conn.data_ep : conn.ep, kAmId, op->head.data(), op->head_size,
                        op->frame.payload.data(), op->frame.payload.size(), &rp);
    if (UCS_PTR_IS_PTR(r)) {
      sending_.insert(op.get());
      (void)op.release();  // owned by the request now; OnSendDoneThunk takes it back
      return;
    }
    SendDone(std::move(op), UCS_PTR_STATUS(r));
  }

  void SendDone(std::unique_ptr<SendOp> op, ucs_status_t status) {
    Conn& conn = *op->conn;
    const size_t size = op->frame.wire_size();
    if (op->lease.handle != nullptr) {
      // Before keep_alive goes: the cache's invariant (a leased entry's owner lives).
      send_cache_->Release(op->lease);
      PublishCacheCounters();
      if (status == UCS_OK) bytes_sent_registered_ += op->frame.payload.size();
    }
    if (status == UCS_OK) {
      bytes_sent_ += size;
    } else if (!conn.dead) {
      Fail(conn, Unavailable("ucx: send to " + conn.address + " failed: " + UcsError(status)),
           status != UCS_ERR_CANCELED);
    }
    if (op->counted) Release(conn, op->control, size);
    op->frame.keep_alive.reset();  // the caller's payload may go now
    FaultTripped();
  }

  void Release(Conn& conn, bool control, size_t size) {
    std::lock_guard lock(conn.mu);
    (control ? conn.control_bytes : conn.data_bytes) -= size;
    conn.cv.notify_all();
  }

  static void OnSendDoneThunk(void* request, ucs_status_t status, void* user_data) {
    auto* op = static_cast<SendOp*>(user_data);
    Core* core = op->conn->core_for_callbacks;
    ucp_request_free(request);
    core->sending_.erase(op);
    core->SendDone(std::unique_ptr<SendOp>(op), status);
  }

  static ucs_status_t OnAmThunk(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param) {
    return static_cast<Core*>(arg)->OnAm(header, header_length, data, length, param);
  }

  ucs_status_t OnAm(const void* header, size_t header_length, void* data, size_t length,
                    const ucp_am_recv_param_t* param) {
    Result<UcxMessageHead> head =
        ParseUcxMessageHead(std::span(static_cast<const uint8_t*>(header), header_length), length,
                            options_.max_frame_bytes);
    std::shared_ptr<Conn> conn;
    if (head.ok() && head->destination != 0) {
      auto it = by_id_.find(head->destination);
      if (it != by_id_.end()) conn = it->second;
    } else if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0) {
      auto it = by_ep_.find(param->reply_ep);
      if (it != by_ep_.end() && it->second->ep == param->reply_ep) conn = it->second;
    }
    if (conn == nullptr || conn->dead) return UCS_OK;  // a connection already closed
    conn->last_received = Clock::Real().Now();
    if (!head.ok()) {
      Fail(*conn, head.status(), true);
      return UCS_OK;
    }
    const uint64_t seq = head->sequence;
    if (seq < conn->next_deliver_seq || seq >= conn->next_deliver_seq + kMaxReorderWindow ||
        conn->slots.count(seq) != 0) {
      Fail(*conn, Corrupt("ucx message sequence " + std::to_string(seq) + " out of place"), true);
      return UCS_OK;
    }
    Conn::Slot& slot = conn->slots[seq];
    slot.type = head->frame.type;
    slot.length = head->frame.length;
    slot.prefix = head->body_prefix.size();
    ucs_status_t result = UCS_OK;
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
      // ParseUcxMessageHead allows a prefix only for a chunk's header.
      std::memcpy(slot.prefix_bytes.data(), head->body_prefix.data(),
                  std::min(slot.prefix, slot.prefix_bytes.size()));
      slot.desc = data;
      result = UCS_INPROGRESS;
      // Handshake frames are never large; data before the handshake is refused in Deliver
      // without being pulled.
      if (conn->established_io()) StartDeferred(*conn);
    } else {
      slot.body.resize(slot.length);
      if (slot.prefix > 0) std::memcpy(slot.body.data(), head->body_prefix.data(), slot.prefix);
      if (length > 0) std::memcpy(slot.body.data() + slot.prefix, data, length);
      slot.ready = true;
      bytes_received_ += kFrameHeaderSize + head->frame.length;
    }
    Deliver(conn);
    FaultTripped();
    return result;
  }

  // Starts the receives of deferred rendezvous messages, in order, while they fit the receive
  // queue (one always may when nothing is queued or being received) and the receives in flight
  // are fewer than kMinReceivesInFlight or under kReceiveAheadBytes. The body is allocated here,
  // not when the message was announced: a receiver that is told of many chunks at once holds
  // buffers only for the ones it is pulling, so the buffers in use stay few and warm
  // (docs/transport_ucx.md).
  void StartDeferred(Conn& conn) {
    if (conn.dead || conn.starting) return;
    conn.starting = true;
    size_t inbox_bytes;
    {
      std::lock_guard lock(conn.mu);
      inbox_bytes = conn.inbox_bytes;
    }
    std::shared_ptr<Conn> self = conn.shared_from_this();
    // By key, not by iterator: a receive that completes at once delivers (erases) slots.
    for (auto it = conn.slots.begin(); it != conn.slots.end() && !conn.dead;) {
      Conn::Slot& slot = it->second;
      const uint64_t seq = it->first;
      if (slot.desc == nullptr) {
        ++it;
        continue;
      }
      const size_t size = slot.length;
      if (conn.receiving >= kMinReceivesInFlight &&
          conn.receiving_bytes + size > kReceiveAheadBytes) {
        break;
      }
      const size_t held = inbox_bytes + conn.receiving_bytes;
      if (held > 0 && held + size > options_.receive_queue_bytes) break;
      void* desc = std::exchange(slot.desc, nullptr);
      conn.receiving_bytes += size;
      ++conn.receiving;
      if (conn.receiving > max_receives_in_flight_.load(std::memory_order_relaxed)) {
        max_receives_in_flight_.store(conn.receiving, std::memory_order_relaxed);
      }
      auto op = std::make_unique<RecvOp>();
      op->conn = self;
      op->seq = seq;
      op->body.resize(size);
      std::memcpy(op->body.data(), slot.prefix_bytes.data(), slot.prefix);
      ucp_request_param_t rp{};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      rp.cb.recv_am = &Core::OnRecvDoneThunk;
      rp.user_data = op.get();
      uint8_t* into = op->body.data() + slot.prefix;
      const size_t length = size - slot.prefix;
      if (length >= kRegisterMinBytes) {
        // Registered for this receive only: the buffer becomes the caller's frame afterwards.
        // UCX's registration cache makes mapping a buffer the pool hands out again cheap.
        op->memh = Map(into, length,
                       UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE |
                           UCP_MEM_MAP_PROT_REMOTE_READ | UCP_MEM_MAP_PROT_REMOTE_WRITE);
        if (op->memh != nullptr) {
          ++receive_registrations_;
          rp.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
          rp.memh = op->memh;
        }
      }
      ucs_status_ptr_t r = ucp_am_recv_data_nbx(worker_, desc, into, length, &rp);
      if (UCS_PTR_IS_PTR(r)) {
        receiving_.insert(op.get());
        (void)op.release();  // owned by the request now; OnRecvDoneThunk takes it back
      } else {
        RecvDone(std::move(op), UCS_PTR_STATUS(r));
      }
      it = conn.slots.upper_bound(seq);
    }
    conn.starting = false;
  }

  static void OnRecvDoneThunk(void* request, ucs_status_t status, size_t /*length*/,
                              void* user_data) {
    auto* op = static_cast<RecvOp*>(user_data);
    Core* core = op->conn->core_for_callbacks;
    ucp_request_free(request);
    core->receiving_.erase(op);
    core->RecvDone(std::unique_ptr<RecvOp>(op), status);
  }

  void RecvDone(std::unique_ptr<RecvOp> op, ucs_status_t status) {
    Conn& conn = *op->conn;
    const bool registered = op->memh != nullptr;
    if (registered) ucp_mem_unmap(context_, std::exchange(op->memh, nullptr));
    if (conn.dead) return;
    auto it = conn.slots.find(op->seq);
    if (it == conn.slots.end()) return;
    it->second.body = std::move(op->body);
    conn.receiving_bytes -= it->second.body.size();
    --conn.receiving;
    if (status != UCS_OK) {
      Fail(conn, Unavailable("ucx: receive from " + conn.address + " failed: " + UcsError(status)),
           true);
      return;
    }
    it->second.ready = true;
    bytes_received_ += kFrameHeaderSize + it->second.body.size();
    if (registered) bytes_received_registered_ += it->second.body.size() - it->second.prefix;
    conn.last_received = Clock::Real().Now();
    Deliver(op->conn);
    StartDeferred(conn);  // the next one, now that one fewer is in flight
    FaultTripped();
  }

  // Hands the ready frames at the head of the sequence to the handshake or the inbox.
  void Deliver(const std::shared_ptr<Conn>& conn) {
    bool delivered = false;
    while (!conn->dead && !conn->slots.empty()) {
      auto it = conn->slots.begin();
      if (it->first != conn->next_deliver_seq) break;
      Conn::Slot& slot = it->second;
      if (!conn->established_io()) {
        if (!slot.ready && slot.desc != nullptr) {
          // A rendezvous message during the handshake: refused unread.
          Fail(*conn, Corrupt("ucx: large message before the handshake finished"), true);
          return;
        }
      }
      if (!slot.ready) break;
      Frame frame;
      frame.type = slot.type;
      frame.body = std::move(slot.body);
      conn->slots.erase(it);
      ++conn->next_deliver_seq;
      Status valid = ValidateFrameBody(frame.type, frame.body);
      if (!valid.ok()) {
        Fail(*conn, valid, true);
        return;
      }
      if (!conn->established_io()) {
        OnHandshakeFrame(conn, frame);
        continue;
      }
      if (frame.type == FrameType::kPing) continue;
      if (frame.type == FrameType::kHello || frame.type == FrameType::kAuth) {
        Fail(*conn, Corrupt("handshake frame after the handshake"), true);
        return;
      }
      if (frame.type == FrameType::kError) {
        if (Handshake::IsGoodbye(frame)) {
          Fail(*conn, Unavailable("peer closed the connection").WithReason(Reason::kPeerClosed),
               false);
        } else {
          Fail(*conn, Handshake::ReportedError(frame), true);
        }
        return;
      }
      {
        std::lock_guard h(conn->handler_mu);
        if (conn->handler) {
          if (!paces_downloads()) {
            conn->handler(std::move(frame));
            continue;
          }
          {
            std::lock_guard lock(conn->mu);
            if (!conn->inbox.empty() || Clock::Real().Now() < conn->deliver_after) {
              // Behind the limit's debt: held, in order, counted against the receive queue
              // (a failure meanwhile hands it over first: EndHandler).
              conn->inbox_bytes += frame.body.size();
              conn->inbox.push_back(std::move(frame));
              continue;
            }
          }
          HandOverPaced(*conn, std::move(frame));
          continue;
        }
        std::lock_guard lock(conn->mu);
        if (!conn->status.ok()) return;
        conn->inbox_bytes += frame.body.size();
        conn->inbox.push_back(std::move(frame));
      }
      delivered = true;
    }
    if (delivered) conn->cv.notify_all();
  }

  // Push delivery under a download limit (handler_mu held): hands `frame` to the handler and,
  // for a chunk, takes its bytes from the limit; a debt holds the next frames back until it is
  // paid (ResumePaced).
  void HandOverPaced(Conn& conn, Frame frame) {
    Duration pace = Duration::zero();
    if (frame.type == FrameType::kChunk) {
      pace = options_.download_limit->Reserve(kFrameHeaderSize + frame.body.size());
    }
    conn.handler(std::move(frame));
    if (pace > Duration::zero()) {
      conn.deliver_after = Clock::Real().Now() + pace;
      if (std::find(paced_.begin(), paced_.end(), conn.shared_from_this()) == paced_.end()) {
        paced_.push_back(conn.shared_from_this());
      }
    }
  }

  // Hands over the frames whose debt is paid, then lets the receive queue pull again.
  void ResumePaced(TimePoint now) {
    if (paced_.empty()) return;
    std::vector<std::shared_ptr<Conn>> due;
    for (auto it = paced_.begin(); it != paced_.end();) {
      if ((*it)->deliver_after <= now || (*it)->dead) {
        due.push_back(std::move(*it));
        it = paced_.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto& conn : due) {
      if (conn->dead) continue;
      {
        std::lock_guard h(conn->handler_mu);
        if (!conn->handler) continue;  // ended: EndHandler gave it the held frames
        for (;;) {
          Frame frame;
          {
            std::lock_guard lock(conn->mu);
            if (conn->inbox.empty() || Clock::Real().Now() < conn->deliver_after) break;
            frame = std::move(conn->inbox.front());
            conn->inbox.pop_front();
            conn->inbox_bytes -= frame.body.size();
          }
          HandOverPaced(*conn, std::move(frame));
        }
      }
      StartDeferred(*conn);
    }
  }

  void OnHandshakeFrame(const std::shared_ptr<Conn>& conn, const Frame& frame) {
    if (frame.type == FrameType::kPing) return;
    Result<std::optional<OutFrame>> reply = conn->handshake->OnFrame(frame);
    if (!reply.ok()) {
      if (frame.type != FrameType::kError) {
        SendNow(conn, Handshake::ErrorFrameFor(reply.status()), false);
      }
      // Closed with a flush, not forced: a forced close could drop the error report just
      // queued, and the refused peer would read a plain hang-up instead of its cause.
      if (conn->FailShared(reply.status())) {
        Log("ucx: connection " + (conn->peer.address.empty() ? conn->address : conn->peer.address) +
            ": " + reply.status().ToString());
      }
      Kill(*conn, /*force=*/false);
      return;
    }
    if (reply->has_value()) SendNow(conn, std::move(**reply), false);
    if (!conn->handshake->established()) return;
    if (FaultTripped()) return;
    SendUpgrade(conn);
    if (!conn->dead && conn->early_upgrade.has_value()) Upgrade(conn);
  }

  void Surface(const std::shared_ptr<Conn>& conn) {
    PeerInfo peer = conn->handshake->peer();
    peer.address = conn->address;
    peer.transport = "ucx";
    std::shared_ptr<ListenerState> listener = std::move(conn->listener);
    if (listener != nullptr) --listener->pending;
    {
      std::lock_guard lock(conn->mu);
      conn->peer = std::move(peer);
      conn->established = true;
    }
    conn->cv.notify_all();
    if (listener != nullptr) {
      std::lock_guard lock(listener->mu);
      if (listener->closed) {
        Fail(*conn, Unavailable("listener closed"), false);
        return;
      }
      listener->ready.push_back(conn);
      listener->cv.notify_all();
    }
    // Rendezvous messages that came right behind the handshake.
    StartDeferred(*conn);
  }

  static void OnConnRequestThunk(ucp_conn_request_h request, void* arg) {
    auto* state = static_cast<ListenerState*>(arg);
    state->core->OnConnRequest(request, state);
  }

  void OnConnRequest(ucp_conn_request_h request, ListenerState* state) {
    std::shared_ptr<ListenerState> listener;
    for (auto& l : listeners_) {
      if (l.get() == state) listener = l;
    }
    if (listener == nullptr || listener->pending >= options_.max_pending_handshakes) {
      if (state->listener != nullptr) ucp_listener_reject(state->listener, request);
      if (listener != nullptr) Log("ucx: refused a connection: too many pending handshakes");
      return;
    }
    auto conn = std::make_shared<Conn>();
    conn->core_for_callbacks = this;
    ucp_conn_request_attr_t attr{};
    attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    conn->address = ucp_conn_request_query(request, &attr) == UCS_OK
                        ? FormatSockaddr(attr.client_address)
                        : "?";
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.conn_request = request;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &Core::OnEpErrorThunk;
    ep.err_handler.arg = conn.get();
    ucs_status_t s = ucp_ep_create(worker_, &ep, &conn->ep);
    if (s != UCS_OK) {
      Log("ucx: accepting " + conn->address + ": " + UcsError(s));
      return;
    }
    conn->listener = listener;
    ++listener->pending;
    Begin(conn, Clock::Real().Now() + options_.handshake_timeout);
  }

  static void OnEpErrorThunk(void* arg, ucp_ep_h ep, ucs_status_t status) {
    auto* conn = static_cast<Conn*>(arg);
    conn->core_for_callbacks->OnEpError(ep, status);
  }

  void OnEpError(ucp_ep_h ep, ucs_status_t status) {
    auto it = by_ep_.find(ep);
    if (it == by_ep_.end()) return;
    std::shared_ptr<Conn> conn = it->second;
    // A peer that hung up is not worth a line here (like a TCP EOF); anything else is. A peer
    // closing on purpose said goodbye first, and that frame already ended the connection, so a
    // hang-up that gets here came without one: a crash, a lost link, or an older peer.
    const bool hung_up = status == UCS_ERR_CONNECTION_RESET || status == UCS_ERR_CANCELED;
    Fail(*conn,
         Unavailable(hung_up
                         ? "peer hung up without a goodbye"
                         : "ucx: connection to " + conn->address + " failed: " + UcsError(status)),
         !hung_up);
  }

  Options options_;
  UcxOptions ucx_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int worker_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::mutex cmd_mu_;
  std::vector<std::function<void()>> commands_;
  bool stop_ = false;
  // Progress thread only.
  std::unordered_map<ucp_ep_h, std::shared_ptr<Conn>> by_ep_;  // both endpoints of each
  // Pushing connections whose frames wait for the download limit (ResumePaced): few, and each
  // once.
  std::vector<std::shared_ptr<Conn>> paced_;
  std::unordered_map<uint64_t, std::shared_ptr<Conn>> by_id_;
  // Operations owned by UCX requests in flight (progress thread only; the destructor frees what
  // the worker's end left).
  std::unordered_set<SendOp*> sending_;
  std::unordered_set<RecvOp*> receiving_;
  std::mt19937 random_{std::random_device{}()};
  TimePoint last_recheck_{};  // certificate mode: when open connections' certificates were
                              // last checked again
  ucp_address_t* worker_address_ = nullptr;
  size_t worker_address_size_ = 0;
  std::vector<std::shared_ptr<ListenerState>> listeners_;
  std::vector<void*> closing_;
  bool fault_logged_ = false;
  std::unique_ptr<UcxRegistrationCache> send_cache_;  // progress thread (and ~Core)
  std::atomic<uint64_t> bytes_received_{0}, bytes_sent_{0};
  std::atomic<uint64_t> bytes_sent_registered_{0}, bytes_received_registered_{0};
  std::atomic<uint64_t> send_registrations_{0}, send_registration_hits_{0};
  std::atomic<uint64_t> receive_registrations_{0}, registration_failures_{0};
  std::atomic<uint64_t> max_receives_in_flight_{0};
  std::atomic<uint64_t> cached_registrations_{0}, cached_registered_bytes_{0};
};

class UcxConnection : public Connection {
 public:
  UcxConnection(std::shared_ptr<Core> core, std::shared_ptr<Conn> conn)
      : core_(std::move(core)), conn_(std::move(conn)) {}
  ~UcxConnection() override { Close(); }
  const PeerInfo& peer() const override { return conn_->peer; }  // set before it surfaced
  Status Send(OutFrame frame, Duration timeout) override {
    return core_->Send(conn_, std::move(frame), timeout);
  }
  Result<Frame> Receive(Duration timeout) override { return core_->Receive(conn_, timeout); }
  Status Flush(Duration timeout) override { return core_->Flush(conn_, timeout); }
  // Push delivery runs the handler on the progress thread; a download limit holds frames back
  // there (Core::ResumePaced).
  bool CanDeliverFrames() const override { return true; }
  // NOLINTNEXTLINE(performance-unnecessary-value-param): the interface takes it by value
  bool DeliverFrames(FrameHandler handler) override {
    return conn_->StartDelivering(std::move(handler));
  }
  void Close() override { core_->Close(conn_); }
  Status status() const override {
    std::lock_guard lock(conn_->mu);
    return conn_->status;
  }

 private:
  std::shared_ptr<Core> core_;
  std::shared_ptr<Conn> conn_;
};

class UcxListener : public Listener {
 public:
  UcxListener(std::shared_ptr<Core> core, std::shared_ptr<ListenerState> state, std::string bound)
      : core_(std::move(core)), state_(std::move(state)), address_(std::move(bound)) {}
  ~UcxListener() override { Close(); }

  Result<std::unique_ptr<Connection>> Accept(Duration timeout) override {
    std::unique_lock lock(state_->mu);
    const bool got = WaitFor(state_->cv, lock, timeout,
                             [&] { return !state_->ready.empty() || state_->closed; });
    if (state_->ready.empty()) {
      if (state_->closed) return Unavailable("listener closed");
      if (!got) return DeadlineExceeded("no connection within the timeout");
    }
    std::shared_ptr<Conn> conn = std::move(state_->ready.front());
    state_->ready.pop_front();
    return std::unique_ptr<Connection>(std::make_unique<UcxConnection>(core_, std::move(conn)));
  }
  std::string address() const override { return address_; }
  void Close() override { core_->CloseListener(state_); }

 private:
  std::shared_ptr<Core> core_;
  std::shared_ptr<ListenerState> state_;
  std::string address_;
};

class UcxTransportImpl : public Transport {
 public:
  explicit UcxTransportImpl(std::shared_ptr<Core> core) : core_(std::move(core)) {}
  ~UcxTransportImpl() override { core_->Stop(); }

  Capabilities capabilities() const override {
    return {.name = "ucx", .zero_copy_send = true, .crosses_hosts = true};
  }
  TransportStats stats() const override { return core_->stats(); }
  UcxMemoryStats memory_stats() const { return core_->memory_stats(); }
  Result<std::unique_ptr<Listener>> Listen(std::string_view address) override {
    std::string bound;
    WC_ASSIGN_OR_RETURN(auto state, core_->Listen(address, &bound));
    return std::unique_ptr<Listener>(
        std::make_unique<UcxListener>(core_, std::move(state), std::move(bound)));
  }
  Result<std::unique_ptr<Connection>> Connect(std::string_view address, Duration timeout) override {
    WC_ASSIGN_OR_RETURN(auto conn, core_->Connect(address, timeout));
    return std::unique_ptr<Connection>(std::make_unique<UcxConnection>(core_, std::move(conn)));
  }

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace

bool UcxTransport::Built() { return true; }

Result<std::unique_ptr<Transport>> UcxTransport::Create(Options options, UcxOptions ucx) {
  if (options.secret.size() < kMinSecretBytes) {
    return InvalidArgument("cluster secret is shorter than " + std::to_string(kMinSecretBytes) +
                           " bytes");
  }
  if (options.tls.enabled && options.tls.key_proof == nullptr) {
    return InvalidArgument(
        "ucx: certificate mode without TLS needs a key proof for the handshake (TlsOptions::"
        "key_proof)");
  }
  auto core = std::make_shared<Core>(std::move(options), ucx);
  WC_RETURN_IF_ERROR(core->Start());
  return std::unique_ptr<Transport>(std::make_unique<UcxTransportImpl>(std::move(core)));
}

std::optional<UcxMemoryStats> UcxTransport::MemoryStats(const Transport& transport) {
  const auto* ucx = dynamic_cast<const UcxTransportImpl*>(&transport);
  if (ucx == nullptr) return std::nullopt;
  return ucx->memory_stats();
}

}  // namespace weightcast::net
