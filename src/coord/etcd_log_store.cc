#include "coord/etcd_log_store.h"

#include <cstdio>

namespace weightcast::coord {
namespace {

// etcd refuses requests above 1.5 MiB by default (--max-request-bytes); a part and its
// transaction stay well below it.
constexpr size_t kManifestPartBytes = 1u << 20;
// Records per range request while loading the log: bounds one answer.
constexpr int64_t kLoadBatch = 512;

std::string Padded(uint64_t n, int width) {
  char text[32];
  std::snprintf(text, sizeof(text), "%0*llu", width, static_cast<unsigned long long>(n));
  return text;
}

etcd::Compare Fence(const EtcdKeys& keys, const LeaderTerm& term) {
  return etcd::CreateRevisionIs(keys.leader(), term.revision());
}

etcd::Op RangeOf(std::string key) { return etcd::RangeOp(std::move(key)); }

}  // namespace

std::string EtcdKeys::log(uint64_t sequence) const { return log_prefix() + Padded(sequence, 20); }

std::string EtcdKeys::manifest_prefix(std::string_view channel, uint64_t version) const {
  return prefix + "manifest/" + std::string(channel) + "/" + Padded(version, 20) + "/";
}

std::string LeaderTerm::lost_reason() const {
  std::lock_guard lock(mu_);
  return reason_;
}

void LeaderTerm::Lose(std::string reason) {
  std::lock_guard lock(mu_);
  if (lost_.load()) return;
  reason_ = std::move(reason);
  lost_.store(true);
}

EtcdLogStore::EtcdLogStore(etcd::Client& client, EtcdKeys keys, std::shared_ptr<LeaderTerm> term)
    : client_(client), keys_(std::move(keys)), term_(std::move(term)) {}

std::string EtcdLogStore::Describe() const {
  return "etcd " + client_.endpoints() + ", prefix " + keys_.prefix;
}

std::string EtcdLogStore::Health() const {
  if (term_->lost()) {
    return "this coordinator no longer leads (" + term_->lost_reason() +
           "): it writes nothing; ask the leader";
  }
  std::string problem = client_.Health();
  if (!problem.empty()) problem += "; nothing commits until etcd has a quorum again";
  return problem;
}

Result<LogStore::Loaded> EtcdLogStore::Load() {
  Loaded loaded;
  const std::string end = etcd::PrefixEnd(keys_.log_prefix());
  std::string from = keys_.log_prefix();
  while (true) {
    WC_ASSIGN_OR_RETURN(etcd::RangeResult batch, client_.Range(from, end, kLoadBatch));
    for (etcd::KeyValue& kv : batch.kvs) {
      const uint64_t sequence = loaded.records.size() + 1;
      if (kv.key != keys_.log(sequence)) {
        return Corrupt(Describe() + ": expected log record " + std::to_string(sequence) +
                       ", found key " + kv.key.substr(0, 128));
      }
      loaded.records.push_back(std::move(kv.value));
    }
    if (!batch.more || batch.kvs.empty()) break;
    from = keys_.log(loaded.records.size() + 1);
  }
  return loaded;
}

// A refusal for the caller to retry: the leader of the moment serves it (a client that reconnects
// is sent there), so kUnavailable, not an error that ends a publisher.
Status NoLongerLeading(const LeaderTerm& term) {
  return Unavailable("etcd: this coordinator no longer leads (" + term.lost_reason() +
                     "); a newer decision stands, retry with the leader");
}

Status EtcdLogStore::FencedWrite(std::vector<etcd::Op> ops, std::string_view what) {
  if (term_->lost()) return NoLongerLeading(*term_);
  etcd::Txn txn;
  txn.compare.push_back(Fence(keys_, *term_));
  txn.success = std::move(ops);
  txn.failure.push_back(RangeOf(keys_.leader()));
  WC_ASSIGN_OR_RETURN(etcd::TxnResult result, client_.Commit(txn));
  if (result.succeeded) return Status::Ok();
  std::string holder = "nobody";
  if (!result.ranges.empty() && !result.ranges[0].kvs.empty()) {
    holder = result.ranges[0].kvs[0].value;
  }
  term_->Lose("fenced while writing " + std::string(what) + ": the leader key is held by " +
              holder.substr(0, 256));
  return NoLongerLeading(*term_);
}

Status EtcdLogStore::Append(uint64_t sequence, std::string_view record) {
  if (term_->lost()) return NoLongerLeading(*term_);
  const std::string key = keys_.log(sequence);
  etcd::Txn txn;
  txn.compare.push_back(Fence(keys_, *term_));
  txn.compare.push_back(etcd::CreateRevisionIs(key, 0));
  txn.success.push_back(etcd::PutOp(key, std::string(record)));
  txn.failure.push_back(RangeOf(keys_.leader()));
  txn.failure.push_back(RangeOf(key));
  WC_ASSIGN_OR_RETURN(etcd::TxnResult result, client_.Commit(txn));
  if (result.succeeded) return Status::Ok();
  if (result.ranges.size() != 2) return Corrupt("etcd txn: expected 2 answers on failure");
  const auto& leader = result.ranges[0].kvs;
  const auto& existing = result.ranges[1].kvs;
  const bool still_leading = !leader.empty() && leader[0].create_revision == term_->revision();
  if (still_leading && !existing.empty() && existing[0].value == record) {
    return Status::Ok();  // an earlier attempt whose answer was lost did store it
  }
  // Under our fence only this term writes: other bytes there are an earlier write of ours whose
  // answer was lost (etcd applied it after our timeout), which our state does not hold. The
  // term ends and the next one replays the log, that record included.
  term_->Lose(still_leading
                  ? "log record " + std::to_string(sequence) +
                        " holds an earlier write of this term whose answer was lost; the log "
                        "must be replayed"
                  : "the leader key is held by " +
                        (leader.empty() ? std::string("nobody") : leader[0].value.substr(0, 256)));
  return NoLongerLeading(*term_);
}

Status EtcdLogStore::PutManifest(std::string_view channel, uint64_t version,
                                 std::span<const uint8_t> signed_manifest) {
  const std::string prefix = keys_.manifest_prefix(channel, version);
  const std::string what = std::string(channel) + " v" + std::to_string(version) + "'s manifest";
  // An orphan from a publish that never got its record may have more parts: clear it first.
  WC_RETURN_IF_ERROR(FencedWrite({etcd::DeleteRangeOp(prefix, etcd::PrefixEnd(prefix))}, what));
  const std::string_view bytes(reinterpret_cast<const char*>(signed_manifest.data()),
                               signed_manifest.size());
  for (size_t at = 0, part = 0; at < bytes.size() || part == 0; at += kManifestPartBytes, ++part) {
    WC_RETURN_IF_ERROR(FencedWrite(
        {etcd::PutOp(prefix + Padded(part, 6), std::string(bytes.substr(at, kManifestPartBytes)))},
        what));
  }
  return Status::Ok();
}

Result<std::string> EtcdLogStore::GetManifest(std::string_view channel, uint64_t version) {
  const std::string prefix = keys_.manifest_prefix(channel, version);
  // A recorded version's manifest never changes: any member's copy will do, quorum or not.
  WC_ASSIGN_OR_RETURN(etcd::RangeResult range,
                      client_.Range(prefix, etcd::PrefixEnd(prefix), 0, /*serializable=*/true));
  if (range.kvs.empty()) {
    return NotFound(std::string(channel) + " v" + std::to_string(version) +
                    " has no manifest in etcd");
  }
  std::string bytes;
  for (size_t i = 0; i < range.kvs.size(); ++i) {
    if (range.kvs[i].key != prefix + Padded(i, 6)) {
      return Corrupt(std::string(channel) + " v" + std::to_string(version) + ": manifest part " +
                     std::to_string(i) + " is missing in etcd");
    }
    bytes += range.kvs[i].value;
  }
  return bytes;
}

}  // namespace weightcast::coord
