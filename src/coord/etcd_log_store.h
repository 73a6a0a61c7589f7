// The version log in etcd (docs/coordinator_etcd.md): the LogStore of a coordinator
// that leads through an etcd lease (coord/etcd_election.h). Keys, under a prefix P
// ("/weightcast/<cluster>/" by default):
//
//   P leader                                 the leader's address, on its lease (the election)
//   P log/<sequence, 20 digits>              one state.proto LogRecord per key
//   P manifest/<channel>/<version>/<part>    a signed manifest, in parts of at most 1 MiB
//
// Every write is a transaction whose first comparison is the fence: the leader key's create
// revision is still the one this coordinator created. A record is appended only when its key
// does not exist yet. So a decision is logged once, by the leader of the moment, and a
// coordinator with a stale view (one that lost its lease while paused, partitioned or slow)
// cannot write over a newer decision: its transaction fails, the term is lost, and the store
// answers kUnavailable "this coordinator no longer leads" (clients retry with the leader).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "coord/etcd_client.h"
#include "coord/log_store.h"

namespace weightcast::coord {

// The keys of one weightcast cluster in etcd.
struct EtcdKeys {
  std::string prefix;
  std::string leader() const { return prefix + "leader"; }
  std::string log_prefix() const { return prefix + "log/"; }
  std::string log(uint64_t sequence) const;
  std::string manifest_prefix(std::string_view channel, uint64_t version) const;
};

// One term of leadership: shared by the election (which renews it) and the store (which writes
// under it). Thread-safe.
class LeaderTerm {
 public:
  LeaderTerm(int64_t lease, int64_t revision) : lease_(lease), revision_(revision) {}
  int64_t lease() const { return lease_; }
  // The leader key's create revision: the fence of every write in this term.
  int64_t revision() const { return revision_; }
  bool lost() const { return lost_.load(); }
  std::string lost_reason() const;
  // The first reason sticks.
  void Lose(std::string reason);

 private:
  const int64_t lease_;
  const int64_t revision_;
  std::atomic<bool> lost_{false};
  mutable std::mutex mu_;
  std::string reason_;
};

class EtcdLogStore final : public LogStore {
 public:
  // `client` must outlive the store.
  EtcdLogStore(etcd::Client& client, EtcdKeys keys, std::shared_ptr<LeaderTerm> term);

  Result<Loaded> Load() override;
  Status Append(uint64_t sequence, std::string_view record) override;
  Status PutManifest(std::string_view channel, uint64_t version,
                     std::span<const uint8_t> signed_manifest) override;
  Result<std::string> GetManifest(std::string_view channel, uint64_t version) override;
  std::string Health() const override;
  std::string Describe() const override;

 private:
  // A transaction under the fence: `ops` run only while this term still leads. kUnavailable
  // (and the term lost) when it does not.
  Status FencedWrite(std::vector<etcd::Op> ops, std::string_view what);

  etcd::Client& client_;
  const EtcdKeys keys_;
  const std::shared_ptr<LeaderTerm> term_;
};

}  // namespace weightcast::coord
