#include "coord/etcd_election.h"

namespace weightcast::coord {

Election::Election(etcd::Client& client, EtcdKeys keys, std::string self, std::chrono::seconds ttl)
    : client_(client), keys_(std::move(keys)), self_(std::move(self)), ttl_(ttl) {}

Result<Election::Outcome> Election::Campaign() {
  WC_ASSIGN_OR_RETURN(etcd::LeaseGrantResult lease, client_.LeaseGrant(ttl_.count()));
  etcd::Txn txn;
  txn.compare.push_back(etcd::CreateRevisionIs(keys_.leader(), 0));
  txn.success.push_back(etcd::PutOp(keys_.leader(), self_, lease.id));
  txn.failure.push_back(etcd::RangeOp(keys_.leader()));
  auto result = client_.Commit(txn);
  if (!result.ok() || !result->succeeded) {
    // Not ours (or unknown): the lease would only keep nothing alive until it expires.
    (void)client_.LeaseRevoke(lease.id);
  }
  if (!result.ok()) return result.status();
  Outcome outcome;
  if (result->succeeded) {
    // The put is the transaction's only write: the key's create revision is the txn's.
    outcome.term = std::make_shared<LeaderTerm>(lease.id, result->revision);
    return outcome;
  }
  outcome.watch_from = result->revision + 1;
  if (!result->ranges.empty() && !result->ranges[0].kvs.empty()) {
    outcome.leader = result->ranges[0].kvs[0].value;
  }
  return outcome;
}

Status Election::WaitForChange(int64_t from, std::chrono::milliseconds wait) {
  return client_.Watch(keys_.leader(), {}, from, wait).status();
}

Status Election::Renew(LeaderTerm& term) {
  WC_ASSIGN_OR_RETURN(int64_t ttl, client_.KeepAlive(term.lease()));
  if (ttl <= 0) term.Lose("its etcd lease expired");
  return Status::Ok();
}

void Election::Resign(LeaderTerm& term) {
  term.Lose("it resigned");
  (void)client_.LeaseRevoke(term.lease());
}

}  // namespace weightcast::coord
