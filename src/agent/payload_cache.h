// Delta payloads of one version held in memory, by chunk (contracts.md "Delta rule"). The
// publisher fills one from codec::EncodeVersion and seeds from it; an agent that decoded a
// payload onto its base keeps the payload too, so it can serve other agents that hold the same
// base. Payloads are shared, immutable byte buffers: a reader keeps one alive while it sends it.
//
// Thread-safety: every method is safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include <weightcast/types.h>

namespace weightcast::agent {

using SharedBytes = std::shared_ptr<const std::vector<uint8_t>>;

class PayloadCache {
 public:
  explicit PayloadCache(Version version) : version_(version) {}
  PayloadCache(const PayloadCache&) = delete;
  PayloadCache& operator=(const PayloadCache&) = delete;

  Version version() const { return version_; }

  // Stores the payload of `chunk` (replacing any previous one). The caller has checked it
  // against the manifest's payload hash.
  void Put(ChunkIndex chunk, std::vector<uint8_t> payload);
  void Put(ChunkIndex chunk, SharedBytes payload);
  // The payload of `chunk`, or null.
  SharedBytes Get(ChunkIndex chunk) const;
  bool Contains(ChunkIndex chunk) const;
  // The chunks held, ascending.
  std::vector<ChunkIndex> Chunks() const;
  size_t size() const;
  // Sum of the payload sizes held.
  uint64_t bytes() const;

 private:
  Version version_;
  mutable std::mutex mu_;
  std::map<uint32_t, SharedBytes> payloads_;
  uint64_t bytes_ = 0;
};

}  // namespace weightcast::agent
