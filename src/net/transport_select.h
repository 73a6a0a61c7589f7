// Which transport a daemon uses (`--transport auto|ucx|tcp`, docs/transport_ucx.md).
//
// `tcp` is the TCP transport alone (a peer address's ",ucx=" offer is ignored). `auto` and `ucx`
// run TCP and, when this build has UCX and it starts, the UCX transport beside it:
// - Listen("ip:port") listens on both, TCP on ip:port and UCX on ip and a free port, and the
//   listener's address says both: "ip:port,ucx=PORT" (that string is what a node registers with
//   the coordinator, so the offer travels in the peer lists). "ip:port,ucx=PORT" as a listen
//   address picks the UCX port too.
// - Connect to an address that offers UCX goes over UCX when this node has it; otherwise over
//   TCP. Under `auto` a UCX connect that fails falls back to TCP at once, and a UCX connection
//   that fails after it was made (as opposed to being closed by this node) makes the next
//   connects to that address use TCP for `ucx_retry_after`: the swarm reconnects a dropped peer
//   and refetches what was in flight, so a transfer resumes over TCP from its verified chunks.
//   Under `ucx` there is no fallback for peers that offer UCX (their connect fails); peers that
//   offer none (the coordinator, nodes started with `--transport tcp` or built without UCX) are
//   still reached over TCP.
// PeerInfo::transport of each connection says which one carries it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <weightcast/status.h>

#include "net/transport.h"
#include "net/ucx_transport.h"

namespace weightcast::net {

enum class TransportKind { kAuto, kUcx, kTcp };
// "auto", "ucx" or "tcp"; anything else is kInvalidArgument naming the choices.
Result<TransportKind> ParseTransportKind(std::string_view text);
std::string_view TransportKindName(TransportKind kind);

struct TransportSelection {
  TransportKind kind = TransportKind::kAuto;
  int tcp_io_threads = 2;
  // How long a UCX connect may take before `auto` gives up on it and uses TCP.
  Duration ucx_connect_timeout = std::chrono::seconds(3);
  Duration ucx_retry_after = std::chrono::seconds(60);
  UcxOptions ucx{};  // fail_after_bytes also comes from WEIGHTCAST_UCX_FAIL_AFTER_BYTES
};

// The transport for `selection`. `tcp`: TcpTransport. `auto`: TCP plus UCX when UCX is built
// and starts (a UCX that cannot start is logged once and left out). `ucx`: as auto, but a build
// without UCX or a UCX that cannot start is an error (kFailedPrecondition / kUnavailable).
Result<std::unique_ptr<Transport>> CreateTransport(const Options& options,
                                                   TransportSelection selection);

// The TCP part and UCX part of a listen or peer address: "1.2.3.4:7000,ucx=7001" gives
// {"1.2.3.4:7000", "1.2.3.4:7001"}; an address without ",ucx=" gives an empty UCX part.
// kInvalidArgument for a malformed suffix.
Result<std::pair<std::string, std::string>> SplitTransportAddress(std::string_view address);

// Frame bytes by transport name ("tcp", "ucx") for /metrics; one entry for a plain transport.
std::vector<std::pair<std::string, TransportStats>> StatsByTransport(const Transport& transport);

}  // namespace weightcast::net
