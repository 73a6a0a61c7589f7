// Serves the committed versions of one channel of a store to fetching agents (docs/p2p.md):
// signed manifests, chunks whole (raw bytes viewed from the version's memory map, no copy), and
// chunks as delta payloads against a base version the client holds, encoded on the fly against
// the server's own copy of that base. Each payload names its base hash, so the client's decoder
// refuses it on any other base.
//
// Threading: Serve runs an accept loop and one set of worker threads per connection; every
// worker takes requests from the connection and answers them independently (replies may leave
// out of order; each names its chunk). Memory per connection is bounded by the transport's send
// queue plus one encoded payload per worker; versions are read through mmaps.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <weightcast/status.h>

#include "codec/chunk_codec.h"
#include "manifest/manifest.h"
#include "net/transport.h"
#include "store/store.h"
#include "trust/signing_identity.h"

namespace weightcast::agent {

struct VersionServerOptions {
  std::string channel{};
  std::string manifest_secret{};  // the cluster secret; signs every manifest sent
  // Signs manifests with this publisher certificate's key; null: with the cluster secret
  // (development mode).
  std::shared_ptr<const trust::SigningIdentity> signing_identity{};
  size_t workers_per_connection = 2;
  codec::ChunkEncodeOptions encode{};
  net::LogFn log = net::LogToStderr;
};

struct VersionServerStats {
  uint64_t manifests = 0;
  uint64_t raw_chunks = 0;
  uint64_t delta_chunks = 0;  // codec payloads (xor, or full when that was smaller)
  uint64_t payload_bytes = 0;
  uint64_t errors = 0;
};

class VersionServer {
 public:
  // `store` (read-only is enough) must outlive the server.
  VersionServer(const Store& store, VersionServerOptions options);
  ~VersionServer();

  // Accepts connections until the listener is closed, serving each on its own threads; returns
  // once every connection ended.
  void Serve(net::Listener& listener);
  // Serves one connection until it ends (the peer closed it or it failed).
  void ServeConnection(net::Connection& connection);

  VersionServerStats stats() const;

  struct Loaded;  // a committed version: manifest, signed bytes, mapped files

 private:
  Result<std::shared_ptr<const Loaded>> Load(uint64_t version);
  Status Answer(net::Connection& connection, std::span<const uint8_t> body,
                codec::CodecScratch& scratch);
  Status SendChunk(net::Connection& connection, uint64_t version, uint32_t chunk,
                   uint64_t base_version, codec::CodecScratch& scratch);

  const Store& store_;
  VersionServerOptions options_;
  std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<const Loaded>> cache_;
  std::atomic<uint64_t> manifests_{0}, raw_chunks_{0}, delta_chunks_{0}, payload_bytes_{0},
      errors_{0};
};

}  // namespace weightcast::agent
