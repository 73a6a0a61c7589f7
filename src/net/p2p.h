// Point-to-point bulk transfer over a Transport: the measuring tool behind `weightcast net
// send/recv` and the p2p benchmarks. The sender announces the byte count in a control frame,
// streams chunk frames (payloads viewed from one reused buffer or from a memory-mapped file, so
// nothing is copied in user space), and stops the clock when the receiver acknowledges the last
// byte. Each side reports its wall time and its process CPU time (getrusage).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include <weightcast/status.h>

#include "net/transport.h"

namespace weightcast::net {

struct P2pStats {
  uint64_t bytes = 0;  // payload bytes moved
  uint64_t chunks = 0;
  double seconds = 0;   // wall time of the transfer (first send to acknowledgement)
  double cpu_user = 0;  // process CPU seconds during the transfer
  double cpu_system = 0;
  std::string transport;  // what carried it: "tcp", "ucx" (PeerInfo::transport)
  double gbit_per_s() const { return seconds > 0 ? bytes * 8 / seconds / 1e9 : 0; }
  std::string ToJson(std::string_view role) const;
};

struct P2pSendOptions {
  uint64_t bytes = 1ull << 30;
  uint32_t chunk_bytes = 4u << 20;
  // When set, payloads are views into this file's mapping (the file must hold >= chunk_bytes;
  // it is sent cyclically until `bytes` went out).
  std::filesystem::path file;
  Duration timeout = std::chrono::seconds(120);  // the whole transfer
};

// Connects to `address` and sends. Blocks until the receiver acknowledged or the timeout.
Result<P2pStats> P2pSend(Transport& transport, std::string_view address,
                         const P2pSendOptions& options);

// Accepts one connection on `listener` and receives one transfer. Blocks. Checks each chunk's
// index sequence and byte count; fails with kCorrupt on a mismatch.
Result<P2pStats> P2pReceive(Listener& listener, Duration timeout = std::chrono::seconds(120));

}  // namespace weightcast::net
