// Fetches one version of a channel from a version server into the local store (docs/p2p.md):
// the signed manifest first (refused unless it verifies), then every chunk the staging area
// lacks, with a window of requests in flight so the link stays busy. Chunks whose hash equals
// the local base's are copied from the base; the others travel as delta payloads decoded onto
// the local committed base when the server holds that base too, else whole. Every chunk is
// checked against the manifest hash before it is written; one that fails is fetched whole once
// more, and a second failure fails the fetch (nothing is committed). Progress is persisted by
// the store's chunk record, so a killed fetch resumes where it stopped. The version becomes
// current with one atomic switch (Store::Commit) at the end.
//
// Memory: `window` chunks in flight plus one chunk buffer per worker; bases are mmapped.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "codec/chunk_codec.h"
#include "net/transport.h"
#include "store/store.h"
#include "trust/trust_anchor.h"

namespace weightcast::agent {

struct FetchProgress {
  uint64_t done_bytes = 0;   // model bytes staged (including resumed and copied chunks)
  uint64_t total_bytes = 0;  // model bytes of the version
  uint64_t wire_bytes = 0;   // bytes received so far (frame headers included)
};

struct FetchOptions {
  std::string channel{};
  std::optional<Version> version{};  // default: the server's current version
  std::string manifest_secret{};     // the cluster secret; manifests must verify with it
  // The cluster CA: manifests must be signed by a publisher it certifies for their channel.
  // Null: shared-secret development mode (manifests verify with the cluster secret).
  std::shared_ptr<const trust::TrustAnchor> trust_anchor{};
  size_t window = 8;   // chunk requests in flight
  size_t workers = 2;  // threads that receive, decode, verify and write
  bool use_delta = true;
  // What a chunk copied from the local base is checked against (the manifest's fast hash, when it
  // has them, or its chunk hash). Delta payloads from a version server are encoded on the fly,
  // so no signed manifest vouches for them: the chunks rebuilt from them are always checked
  // against the chunk hash (SHA-256), whatever this says (docs/verification.md).
  codec::VerifyResult verify_result = codec::VerifyResult::kFast;
  // No reply for this long fails the fetch (measured on the transport's clock).
  net::Duration receive_timeout = net::kForever;
  std::function<void(const FetchProgress&)> progress{};  // called from worker threads, serialized
  net::LogFn log = net::LogToStderr;                     // refetches and their reasons
};

struct FetchStats {
  Version version;
  bool already_held = false;
  std::optional<Version> base;  // the committed local version deltas were decoded onto
  uint32_t chunks = 0;
  uint32_t chunks_resumed = 0;  // verified in the staging record before this run
  uint32_t chunks_same = 0;     // copied from the local base
  uint32_t chunks_delta = 0;    // decoded from codec payloads
  uint32_t chunks_raw = 0;      // received whole
  uint32_t chunks_refetched = 0;
  uint64_t model_bytes = 0;
  uint64_t wire_bytes = 0;  // every frame received (headers, manifests, payloads)
  double seconds = 0;
  std::string ToJson() const;
};

// Fetches over an established connection. On failure the connection is closed (a reply may be
// half-consumed) and the staging version is left for a later resume, unless it was refused for
// bad content from the server, in which case the failing chunk is simply not recorded.
Result<FetchStats> FetchVersion(net::Connection& connection, Store& store,
                                const FetchOptions& options);

}  // namespace weightcast::agent
