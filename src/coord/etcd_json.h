// etcd v3's JSON gateway, as bytes: the request bodies we send and the parsers of what etcd
// answers (docs/coordinator_etcd.md). etcd 3.4 serves its gRPC API as JSON over HTTP/1.1 at
// /v3/kv/range, /v3/kv/txn, /v3/lease/grant, /v3/lease/keepalive and /v3/watch: keys and values
// are base64, 64-bit integers are decimal strings, and fields at their default (0, false, empty)
// are left out. Pure functions, no I/O: the parsers read bytes from outside (a fuzz target
// covers them) and turn anything unexpected into kCorrupt, never a crash.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

namespace weightcast::coord::etcd {

std::string Base64Encode(std::string_view bytes);
// kCorrupt on a character outside the standard alphabet or bad padding.
Result<std::string> Base64Decode(std::string_view text);

// The end of the range of every key that starts with `prefix` (etcd's "prefix + 1").
std::string PrefixEnd(std::string_view prefix);

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

struct RangeResult {
  int64_t revision = 0;  // the store's revision when it answered
  std::vector<KeyValue> kvs;
  bool more = false;  // a limit cut the answer short
};

// One comparison of a transaction; every one must hold for the success branch to run.
struct Compare {
  enum class Target { kCreateRevision, kModRevision, kVersion, kLease, kValue };
  enum class Result { kEqual, kGreater, kLess, kNotEqual };
  std::string key;
  Target target = Target::kCreateRevision;
  Result result = Result::kEqual;
  int64_t number = 0;  // for the revision, version and lease targets
  std::string value;   // for kValue
};

struct Op {
  enum class Kind { kPut, kRange, kDeleteRange };
  Kind kind = Kind::kPut;
  std::string key;
  std::string value;      // kPut
  std::string range_end;  // kRange, kDeleteRange: empty means the key alone
  int64_t lease = 0;      // kPut: attach the key to this lease (0: none)
};

// The comparisons and operations we use, spelled out once.
Compare CreateRevisionIs(std::string key, int64_t revision);  // 0: the key does not exist
Op PutOp(std::string key, std::string value, int64_t lease = 0);
Op RangeOp(std::string key, std::string range_end = {});
Op DeleteRangeOp(std::string key, std::string range_end = {});

struct Txn {
  std::vector<Compare> compare;
  std::vector<Op> success;
  std::vector<Op> failure;
};

struct TxnResult {
  int64_t revision = 0;
  bool succeeded = false;
  // The answers of the branch that ran, in order; only range operations carry key-values.
  std::vector<RangeResult> ranges;
};

struct LeaseGrantResult {
  int64_t id = 0;
  int64_t ttl_seconds = 0;
};

struct WatchEvent {
  bool deleted = false;  // a DELETE; otherwise a PUT
  KeyValue kv;
};

// One line of a /v3/watch stream.
struct WatchMessage {
  int64_t revision = 0;
  bool created = false;   // the answer to the create request
  bool canceled = false;  // etcd ended the watch (e.g. compacted: see compact_revision)
  int64_t compact_revision = 0;
  std::vector<WatchEvent> events;
};

// `serializable`: any member answers from its own copy, without a quorum (may be stale: only
// for keys that never change once written).
std::string RangeRequest(std::string_view key, std::string_view range_end = {}, int64_t limit = 0,
                         bool serializable = false);
std::string TxnRequest(const Txn& txn);
std::string LeaseGrantRequest(int64_t ttl_seconds);
std::string LeaseIdRequest(int64_t id);  // keepalive, revoke, timetolive
std::string WatchCreateRequest(std::string_view key, std::string_view range_end,
                               int64_t start_revision);

// Every parser first checks for the gateway's error object ({"error": ..., "code": N,
// "message": ...}) and turns it into kUnavailable (etcd could not serve it now: no leader, no
// quorum, timed out), or kFailedPrecondition for errors retrying will not fix.
Result<RangeResult> ParseRangeResponse(std::string_view body);
Result<TxnResult> ParseTxnResponse(std::string_view body);
Result<LeaseGrantResult> ParseLeaseGrantResponse(std::string_view body);
// The lease's remaining TTL in seconds; 0 when etcd no longer knows the lease (it expired).
Result<int64_t> ParseKeepAliveResponse(std::string_view body);
Result<WatchMessage> ParseWatchMessage(std::string_view line);
// Any response whose content we do not need (put, delete, revoke): only its error, if any.
Status ParseEmptyResponse(std::string_view body);

}  // namespace weightcast::coord::etcd
