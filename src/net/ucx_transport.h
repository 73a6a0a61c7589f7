// UCX transport (docs/transport_ucx.md): one UCP worker per transport, driven by one progress
// thread that sleeps on the worker's event fd; connections are UCP endpoints made from a TCP
// sockaddr (ucp_listener_create / ucp_ep_create), so one address form ("ip:port") works over
// every UCX transport the two ends share: InfiniBand/RoCE verbs, shared memory (posix, sysv,
// cma), TCP. Which ones UCX may use is UCX's own setting (UCX_TLS), read at Create.
//
// Frames travel as UCX active messages (net/ucx_message.h). Large ones go by rendezvous: the
// receiver pulls a chunk's payload straight into the received frame's buffer (RDMA read, or one
// process_vm_readv on cma) and the sender's payload is read in place, never copied to a bounce
// buffer. Both buffers are registered with ucp_mem_map and their handles passed to UCX: the
// frame's buffer for the time of its receive, the sender's region in a bounded cache keyed by
// the frame's keep_alive (net/ucx_registration_cache.h), so a chunk sent to many peers is
// registered once. The same HMAC handshake as TCP runs first; no frame other than the
// handshake's is accepted or served before it succeeds.

//
// Built only when CMake found UCX (WEIGHTCAST_UCX); otherwise Create says so and Built() is
// false. UCX types stay inside src/net/ucx/: this header is cheap to include.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "net/transport.h"

namespace weightcast::net {

struct UcxOptions {
  // Test hook (the fault switch of docs/transport_ucx.md): once this transport's connections
  // moved this many frame bytes in all, every UCX connection it has or makes fails, as if the
  // UCX fabric died. 0 = never. WEIGHTCAST_UCX_FAIL_AFTER_BYTES sets it for the daemons.
  uint64_t fail_after_bytes = 0;
};

// Registered-memory counters of one UCX transport (docs/transport_ucx.md, "Registered memory").
struct UcxMemoryStats {
  uint64_t bytes_sent_registered = 0;      // frame payload bytes sent with a ucp_mem_map handle
  uint64_t bytes_received_registered = 0;  // received into a frame buffer under a handle
  uint64_t send_registrations = 0;         // ucp_mem_map calls for send regions
  uint64_t send_registration_hits = 0;     // sends that reused a cached registration
  uint64_t receive_registrations = 0;      // ucp_mem_map calls for receive buffers
  uint64_t registration_failures = 0;      // ucp_mem_map calls that failed (sent/received without)
  uint64_t cached_registrations = 0;       // send registrations cached now
  uint64_t cached_registered_bytes = 0;    // bytes they cover
  uint64_t max_receives_in_flight = 0;     // most rendezvous receives one connection ran at once
};

class UcxTransport {
 public:
  // Whether this build has UCX at all.
  static bool Built();
  // Starts UCX (ucp_init, one worker) and its progress thread. kFailedPrecondition when the
  // build has no UCX; kUnavailable when UCX cannot start (no usable transport). Addresses are
  // "ip:port" or "[ipv6]:port"; Listen on port 0 picks a free port. Connections must be
  // destroyed before the transport.
  static Result<std::unique_ptr<Transport>> Create(Options options, UcxOptions ucx = {});
  // The registered-memory counters of a transport Create made; nullopt for any other transport
  // (and in a build without UCX). Never blocks; any thread.
  static std::optional<UcxMemoryStats> MemoryStats(const Transport& transport);
};

}  // namespace weightcast::net
