// Delta payloads of one version, by chunk (docs/agent.md "Delta rule"). The publisher fills one
// from codec::EncodeVersion and seeds from it; an agent that decoded a payload onto its base
// keeps the payload too, so it can serve other agents that hold the same base, and writes the
// version's delta file from it at the commit. Payloads are shared, immutable byte buffers: a
// reader keeps one alive while it sends it. A payload is held by its owner (util/held_bytes.h):
// an agent keeps the very frame it arrived in, so a received payload is never copied.
//
// Every payload put is kept until the cache goes: the publisher must serve each one, and a
// node's delta file needs all of them. Memory is bounded all the same (options.memory_bytes):
// payloads past the bound go to a spill file, an unlinked temporary file that vanishes with the
// cache (or its process), and Get reads them back. A spill that fails (no space, no directory)
// keeps the payload in memory: over the bound, never lost. docs/agent.md, "Payload memory".
//
// Lifetime of what Get returns: the bytes live while its owner is held. Payloads in memory also
// live as long as the cache (until replaced); one read back from the spill file, when the caller
// drops the owner, lives until the same thread's next read-back (so a caller that
// keeps only a span, like live::WriteDeltaFile's PayloadOf, may use it until its next Get).
//
// Thread-safety: every method is safe from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include <weightcast/types.h>

#include "util/held_bytes.h"

namespace weightcast::node {

using SharedBytes = std::shared_ptr<const std::vector<uint8_t>>;

struct PayloadCacheOptions {
  // 1 GiB: a delta 20-100x smaller than the model fits whole for models up to 20-100 GB.
  static constexpr uint64_t kDefaultMemoryBytes = 1ull << 30;
  // Payload bytes kept in memory; the rest are spilled.
  uint64_t memory_bytes = kDefaultMemoryBytes;
  // Where the spill file is made (created on the first spill). Empty: the system's temporary
  // directory (TMPDIR). A tmpfs there spills to memory again: give a disk's directory.
  std::filesystem::path spill_dir;
};

class PayloadCache {
 public:
  explicit PayloadCache(Version version, PayloadCacheOptions options = {});
  ~PayloadCache();
  PayloadCache(const PayloadCache&) = delete;
  PayloadCache& operator=(const PayloadCache&) = delete;

  Version version() const { return version_; }

  // Stores the payload of `chunk` (replacing any previous one). The caller has checked it
  // against the manifest's payload hash. Blocks on the spill file's write when over the bound.
  void Put(ChunkIndex chunk, std::vector<uint8_t> payload);
  void Put(ChunkIndex chunk, HeldBytes payload);
  // The payload of `chunk`, if held. A spilled one is read back (a pread, usually from the page
  // cache) into a buffer of its own.
  std::optional<HeldBytes> Get(ChunkIndex chunk) const;
  bool Contains(ChunkIndex chunk) const;
  // The chunks held, ascending.
  std::vector<ChunkIndex> Chunks() const;
  size_t size() const;
  // Sum of the payload sizes held, in memory and spilled.
  uint64_t bytes() const;
  // Of those, the bytes held in memory (at most options.memory_bytes unless a spill failed).
  uint64_t memory_bytes() const;

 private:
  struct Spilled {
    uint64_t offset = 0;
    uint64_t size = 0;
  };
  // Appends `payload` to the spill file (mu_ held); false when it cannot.
  bool SpillLocked(uint32_t chunk, std::span<const uint8_t> payload);
  // Forgets the payload of `chunk`, wherever it is (mu_ held).
  void DropLocked(uint32_t chunk);

  Version version_;
  const PayloadCacheOptions options_;
  mutable std::mutex mu_;
  std::map<uint32_t, HeldBytes> payloads_;  // in memory
  std::map<uint32_t, Spilled> spilled_;
  uint64_t memory_bytes_ = 0;
  uint64_t spilled_bytes_ = 0;
  // The spill file: append-only (a replaced payload's old bytes stay), unlinked from the start.
  // Set once, before the first entry of spilled_; read without mu_ after that.
  int spill_fd_ = -1;
  uint64_t spill_end_ = 0;
  bool spill_failed_ = false;  // once failed, not retried: the rest stays in memory
};

}  // namespace weightcast::node
