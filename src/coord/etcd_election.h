// Electing one leading coordinator through an etcd lease (docs/coordinator_etcd.md).
// A candidate grants itself a lease of `ttl` and, in one transaction, creates the leader key
// on that lease if the key does not exist. The winner's term is the key's create revision (the
// fence of its writes, coord/etcd_log_store.h); it renews the lease a few times per TTL. The
// others watch the key and try again when it is deleted: when the leader resigns (revokes its
// lease on a clean stop) or its lease expires (killed, paused, cut off from etcd).
//
// Blocking calls; one thread uses an Election at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <weightcast/status.h>

#include "coord/etcd_client.h"
#include "coord/etcd_log_store.h"

namespace weightcast::coord {

class Election {
 public:
  // `self`: the address agents are sent to while this candidate leads. `client` outlives it.
  Election(etcd::Client& client, EtcdKeys keys, std::string self, std::chrono::seconds ttl);

  struct Outcome {
    std::shared_ptr<LeaderTerm> term;  // set: this candidate leads now
    std::string leader;                // otherwise: who does ("" when unknown)
    int64_t watch_from = 0;            // the revision to watch the leader key from
  };
  // One attempt. kUnavailable while etcd cannot be reached or has no quorum.
  Result<Outcome> Campaign();
  // Blocks until the leader key changes at or after `from`, or `wait` passes.
  Status WaitForChange(int64_t from, std::chrono::milliseconds wait);
  // Renews the term's lease once. A lease etcd no longer knows loses the term (LeaderTerm::Lose);
  // kUnavailable while etcd cannot answer (the term is then neither renewed nor lost yet).
  Status Renew(LeaderTerm& term);
  // Gives the term up at once (revokes its lease, which deletes the leader key), so that a
  // standby takes over without waiting for the TTL. Best effort.
  void Resign(LeaderTerm& term);

  std::chrono::seconds ttl() const { return ttl_; }

 private:
  etcd::Client& client_;
  const EtcdKeys keys_;
  const std::string self_;
  const std::chrono::seconds ttl_;
};

}  // namespace weightcast::coord
