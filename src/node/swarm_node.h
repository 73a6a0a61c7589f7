// One node's peer-to-peer side for one channel (docs/agent.md): it fetches a version from many
// peers at once and serves what it holds to them. Used by the agent daemon (Fetch, then
// CommitTarget) and by the publisher (Seed). Every decision about peers (which chunk from which
// peer, which request to serve next, which HAVEs to send, when to fall back from delta payloads
// to whole chunks, whom to drop and ban) is made by one swarm::PeerProtocol, the very object the
// simulator drives; this class carries its effects out over a net::Transport, a Store and the
// clock, and feeds it the events.
//
// Threads, independent of the number of peers: one event thread owns the protocol (under the
// node's lock) and is fed from a queue, which the transport fills from its own threads (every
// transport pushes frames, with or without a download limit; no peer has a thread) and every
// public call that changes the node's state posts its work onto (the waits, and a commit's disk
// work, stay on the caller's thread; queries read under the loop's lock). `workers` threads check,
// decode and write received chunks (they push the check results); two upload workers read the
// chunks the protocol asks to upload (memory or store) and hand them to the transport, whose
// release of each written frame is pushed back as the upload's end. Connections: an accept thread
// takes those of peers with higher node ids; this node connects to lower ones without blocking over
// TCP (Transport::ConnectAsync), or on four connect threads where the transport's connects block
// (UCX); both become events the loop admits.
//
// Peer protocol (swarm/messages.h, swarm/peer_protocol.h; chunk data in kChunk frames): on
// connect each side sends its have-set for its target version (whole chunks and delta payloads
// as two bitsets), then Have announcements, Request(version, chunk, kind), Cancel, Reject. Every
// chunk is checked against the manifest hash before it is stored or served (a payload against
// its payload hash, SHA-256, before it is decoded; the chunk rebuilt from it against the
// manifest's fast hash, XXH3-128, or with verify_result kSha256 against its SHA-256:
// docs/verification.md); a peer that sends a bad one is dropped and the chunk is fetched
// elsewhere.
//
// Thread-safety: every public method is safe from any thread. The Store and Transport must
// outlive the node; Stop (or the destructor) joins every thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "codec/chunk_codec.h"
#include "manifest/manifest.h"
#include "net/transport.h"
#include "node/payload_cache.h"
#include "origin/http_client.h"
#include "store/store.h"
#include "swarm/tuning.h"
#include "trust/trust_anchor.h"

namespace weightcast::metrics {
class Histogram;
}  // namespace weightcast::metrics

namespace weightcast::node {

// Reads the bytes of a byte range of a version's flat byte space from where a source keeps them
// outside its store (an HTTP origin). Called on upload workers, several at once; may block.
using ChunkReader = std::function<Result<HeldBytes>(ByteRange range)>;

struct PeerAddress {
  PeerId id;
  std::string address;  // where the peer listens ("127.0.0.1:41234", "mem:b")
  bool source = false;  // a publisher: holds every chunk of what it published
  friend bool operator==(const PeerAddress&, const PeerAddress&) = default;
};

struct SwarmNodeOptions {
  std::string channel{};
  // This node's id: the one its transport's handshake presents (net::Options::self.node_id).
  PeerId node_id;
  std::string manifest_secret{};  // the cluster secret: signed manifests must verify with it
  // The cluster CA: manifests must be signed by a publisher it certifies for their channel.
  // Null: shared-secret development mode (manifests verify with the cluster secret).
  std::shared_ptr<const trust::TrustAnchor> trust_anchor{};
  // Tensors this node wants (globs, manifest.ChunksForTensors); empty: every chunk.
  std::vector<std::string> tensor_patterns{};
  // A seed (publisher): spreads distinct chunks first and takes more upload slots.
  bool source = false;
  // Scheduler settings: the defaults are the ones `weightcast sim` runs and proves
  // (swarm/tuning.h). A source takes the source's slots. Windows, slots and queues count whole
  // chunks; for delta payloads they are scaled to hold as many bytes (RestartScheduler).
  swarm::Tuning tuning{};
  // Threads that check, decode and write received chunks. 0: one per hardware thread, 2 to 8
  // (a delta step is bound by decoding and hashing a whole version).
  size_t workers = 0;
  // Delta payloads are fetched when the node's current version is the delta's base.
  bool use_delta = true;
  // What a chunk rebuilt from a delta payload (and a chunk copied from the local base) is checked
  // against: the signed manifest's XXH3-128 when it has fast hashes (kFast), or its SHA-256
  // chunk hash always (kSha256). Whole chunks from peers are always checked with SHA-256.
  codec::VerifyResult verify_result = codec::VerifyResult::kFast;
  // When positive, logs one line per interval with the target's transfer rates and scheduler
  // state (a debugging aid for benchmarks). Zero: the WEIGHTCAST_SWARM_TRACE environment
  // variable (milliseconds) decides; unset: no trace.
  net::Duration trace_interval = net::Duration::zero();
  // The protocol's time: its ticks, request timeouts, bans and the staging's flushes (tests pass
  // a net::FakeClock and move it themselves). Null: the steady clock. Must outlive the node.
  const net::Clock* clock = nullptr;
  // TESTING ONLY: flip a byte of every chunk this node uploads (integration tests check that
  // peers detect and drop it). Honoured only in builds with WC_TEST_HOOKS.
  bool corrupt_uploads_for_testing = false;
  net::LogFn log = net::LogToStderr;
  // Metrics (optional; must outlive the node). Observed with the seconds from a chunk's request
  // to its verification, once per chunk verified from the peer it was asked of: a relaxed
  // atomic add or two on the event thread.
  metrics::Histogram* chunk_fetch_seconds = nullptr;
  // Called with the peer whose chunk (or delta payload) failed its manifest hash check, on the
  // worker thread that checked it, with no lock of the node held (it may register metrics).
  std::function<void(PeerId)> on_bad_chunk{};
  // Reads from HTTP(S) origins (docs/origin.md): with a share granted (SetOriginShare), a target
  // whose manifest names its origin objects fetches the share's chunks there too. Null: never.
  std::shared_ptr<origin::HttpClient> origin_http{};
};

struct SwarmProgress {
  Version version;            // the target (0: none)
  bool delta = false;         // fetching delta payloads onto the base (false: whole chunks)
  uint32_t chunks_done = 0;   // wanted chunks verified
  uint32_t chunks_total = 0;  // wanted chunks
  uint64_t bytes_done = 0;    // model bytes of those chunks
  uint64_t bytes_total = 0;
  uint64_t bytes_received = 0;  // chunk payload bytes received for the target (wire)
  uint64_t bytes_sent = 0;      // chunk payload bytes uploaded for the target (wire)
  uint32_t chunks_failed = 0;   // received chunks that failed their hash check
  uint32_t peers = 0;           // connected peers
  uint32_t peers_ucx = 0;       // of those, connected over UCX (the others over TCP or memory)
  // Requests kept in flight per peer: whole chunks, or for a delta as many payloads as that
  // many chunks' bytes (small payloads are pipelined deeper, docs/agent.md).
  uint32_t window = 0;
  bool complete = false;  // every wanted chunk verified (and committed once CommitTarget)
  bool committed = false;
  std::string error{};  // why the target cannot complete (empty while fine)

  // A fetch that cannot move because no peer is connected, in words ("no live node holds v6:
  // ..."); empty otherwise. What the agent logs and a Subscriber's status says.
  std::string Starved() const {
    if (version.value() == 0 || complete || peers != 0) return {};
    return "no live node holds v" + std::to_string(version.value()) +
           ": no peer is connected (the publisher and every agent holding it are gone, or not "
           "reached yet)";
  }
};

// Totals over the node's life (for /metrics).
struct SwarmCounters {
  uint64_t bytes_received = 0;
  uint64_t bytes_sent = 0;
  uint64_t chunks_verified = 0;
  uint64_t chunks_failed = 0;
  uint64_t peers_dropped = 0;
  // Chunks rebuilt from delta payloads and verified, by what checked the result: the manifest's
  // XXH3-128 (fast) or its SHA-256 chunk hash.
  uint64_t delta_chunks_fast = 0;
  uint64_t delta_chunks_sha256 = 0;
  // Whole chunks uploaded, by where their bytes came from: the buffer they were received in
  // (RecentChunks), or a read of the store (for a source seeded from an origin, SeedFrom: a read
  // of the origin).
  uint64_t uploads_from_memory = 0;
  uint64_t uploads_from_store = 0;
  // Chunk bytes read from an HTTP(S) origin (for this node's share, docs/origin.md).
  uint64_t origin_bytes = 0;
};

class SwarmNode {
 public:
  SwarmNode(Store& store, net::Transport& transport, SwarmNodeOptions options);
  ~SwarmNode();  // Stop()
  SwarmNode(const SwarmNode&) = delete;
  SwarmNode& operator=(const SwarmNode&) = delete;

  // Listens on `listen_address` (port 0 allowed) and starts the threads. Once.
  Status Start(std::string_view listen_address);
  // The bound listen address (empty before Start).
  std::string address() const;
  PeerId id() const;

  // Makes `manifest` (the verified contents of `signed_manifest`) the target: stages it (or
  // resumes its staging), copies chunks equal to the local base, and fetches the rest from
  // peers. The same version as the target is a no-op (kFailedPrecondition if its root differs);
  // another version, higher or lower (a rollback), replaces the target (a staging of a higher
  // one is aborted, of a lower one kept). A version already committed in the store
  // becomes the target complete at once (served, nothing fetched). Does not block on transfer.
  Status Fetch(const Manifest& manifest, std::vector<uint8_t> signed_manifest);
  // The sampler on this node holds `version` (with `root`) whole in its live tensors, every
  // tensor checked (an attestation that matched). From then on a delta onto it is fetched as
  // payloads that are kept, not decoded and staged: the store commits it partial, holding only
  // the chunks outside every tensor, plus the delta file the sampler patches from (docs/live.md,
  // "Samplers that stage nothing"). Version 0 turns it off.
  void SetLiveBase(Version version, const Digest& root);
  // Makes a version this node holds committed the target, as a source: serves every chunk and,
  // for a delta, every payload in `payloads` (may be null for a full version). With `reader`
  // the version need not be in the store (yet): whole chunks are read through it, checked
  // against the manifest, then sent (a publisher whose store commit runs behind the announce).
  Status Seed(const Manifest& manifest, std::vector<uint8_t> signed_manifest,
              std::shared_ptr<const PayloadCache> payloads, ChunkReader reader = {});
  // Seeds `manifest` as a source that holds no copy of it: every chunk is read through
  // `reader` when a peer asks for it (on an upload worker), checked against its hash, then
  // sent. A chunk that does not match (content changed where the reader reads from) is not
  // sent; the failure is kept (source_failure) for the owner to abort the version with.
  Status SeedFrom(const Manifest& manifest, std::vector<uint8_t> signed_manifest,
                  ChunkReader reader);
  // Why SeedFrom's reader failed for the target (OK: it did not): the first error.
  Status source_failure() const;
  // A rank of a sharded publish (docs/sharded_publish.md): seeds the assembled `manifest` from
  // the part it published, committed in the store as `part` (the same version number, its own
  // files and manifest): chunks [first_chunk, first_chunk + part.chunk_count()) of the version
  // are that part's chunks, served from it; `payloads` are the part's (by part chunk index).
  // This node holds, wants and replicates only those chunks. kFailedPrecondition when the store
  // does not hold `part` committed or its chunk hashes are not those of that range.
  Status SeedPart(const Manifest& manifest, std::vector<uint8_t> signed_manifest,
                  const Manifest& part, uint32_t first_chunk,
                  std::shared_ptr<const PayloadCache> payloads);

  // This node's share of origin versions (HeartbeatReply.origin_stripe): it may fetch the
  // chunks c with c % stripes == stripe of a target whose manifest names its origin, from the
  // origin, as from a peer that seeds just those chunks. stripes 0: none. Any thread.
  void SetOriginShare(uint32_t stripe, uint32_t stripes);
  // The node's whole peer list (from the coordinator). Connects to listed peers with a lower
  // node id, keeps accepting the others, and disconnects peers no longer listed.
  void SetPeers(std::span<const PeerAddress> peers);
  // The ids of the last list SetPeers was given (this node's own id left out): what it names as
  // its held peers when it registers again (coord.proto, Register.held_peers).
  std::vector<PeerId> ListedPeers() const;
  // The peers this node bans now because they sent it bad data (Heartbeat.banned_peers).
  std::vector<PeerId> BannedPeers() const;

  SwarmProgress progress() const;
  SwarmCounters counters() const;
  // Blocks until the target is complete (OK), the node fails or stops (its error), or `timeout`
  // passes (kDeadlineExceeded). `timeout` bounds the caller's own wait, on the steady clock
  // whatever the node's clock: a test on a fake clock still gives up on a node that hangs.
  Status WaitComplete(net::Duration timeout);

  // Commits the complete target in the store (Store::Commit) and serves it from the committed
  // version from then on. kFailedPrecondition while incomplete.
  Status CommitTarget();
  // Drops the target's staging (Store::Abort, recording `reason` for streaming readers); the node
  // has no target afterwards.
  Status AbortTarget(std::string_view reason = {});
  // Fetch `version`'s chunks in `order` first (a streaming reader's, docs/streaming.md), now if
  // it is the target, else when it becomes the target.
  void PreferChunks(Version version, std::vector<ChunkIndex> order);

  // Whether every chunk of the target (and every payload, for a delta) is held by at least one
  // connected peer (a publisher stops seeding once this holds). Exact on a source (Seed): peers
  // send a source every HAVE; others skip HAVEs for chunks a non-source node already holds.
  bool EveryChunkReplicated() const;
  // Blocks until EveryChunkReplicated holds (OK), the node stops (kAborted), or `timeout` passes
  // on the steady clock (kDeadlineExceeded).
  Status WaitReplicated(net::Duration timeout);

  // Closes every connection and joins every thread. Idempotent.
  void Stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightcast::node
