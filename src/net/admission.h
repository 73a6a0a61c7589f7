// Listener admission (docs/wire_format.md, "Handshake"): which connection still in the handshake
// a newly accepted one displaces. Pure policy: the TCP listener describes its pending handshakes
// and closes the one this picks; no socket, clock or thread here.
//
// Only silent connections (nothing heard from the peer yet) count against the per-source cap, so
// that peers behind one address that do handshake (a NAT, or loopback in tests) are not held to
// it, while a flood of idle sockets from one address keeps displacing only its own oldest. The
// per-source rule spares connections younger than Options::silent_grace: a real peer's Hello may
// still be unread when many of one address connect at once on a loaded machine.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <weightcast/status.h>

#include "net/transport.h"

namespace weightcast::net {

// One pending handshake as admission sees it.
struct HandshakeSlot {
  std::string_view source;  // the peer's IP address, without the port
  bool silent = true;       // no Hello accepted and no byte waiting
  Duration age{};           // since it was accepted
};

struct Displacement {
  size_t index;  // into the pending list
  Status why;    // logged as the reason the displaced connection was closed
};

// `pending` is in accept order. Returns the one a new connection from `source` displaces, or
// none when there is room for it.
std::optional<Displacement> PickDisplaced(std::span<const HandshakeSlot> pending,
                                          std::string_view source, const Options& options);

}  // namespace weightcast::net
