// UCX transport (docs/transport_ucx.md): one UCP worker per transport, driven by one progress
// thread that sleeps on the worker's event fd; connections are UCP endpoints made from a TCP
// sockaddr (ucp_listener_create / ucp_ep_create), so one address form ("ip:port") works over
// every UCX transport the two ends share: InfiniBand/RoCE verbs, shared memory (posix, sysv,
// cma), TCP. Which ones UCX may use is UCX's own setting (UCX_TLS), read at Create.
//
// Frames travel as UCX active messages (net/ucx_message.h). Large ones go by rendezvous: the
// receiver pulls a chunk's payload straight into the received frame's buffer (RDMA read, or one
// process_vm_readv on cma) and the sender's payload is read in place, never copied to a bounce
// buffer. The same HMAC handshake as TCP runs first; no frame other than the handshake's is
// accepted or served before it succeeds.
//
// Built only when CMake found UCX (WEIGHTCAST_UCX); otherwise Create says so and Built() is
// false. UCX types stay inside src/net/ucx/: this header is cheap to include.
#pragma once

#include <cstdint>
#include <memory>

#include "net/transport.h"

namespace weightcast::net {

struct UcxOptions {
  // Test hook (the fault switch of docs/transport_ucx.md): once this transport's connections
  // moved this many frame bytes in all, every UCX connection it has or makes fails, as if the
  // UCX fabric died. 0 = never. WEIGHTCAST_UCX_FAIL_AFTER_BYTES sets it for the daemons.
  uint64_t fail_after_bytes = 0;
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
};

}  // namespace weightcast::net
