// The parsers of etcd's answers (coord/etcd_json.h) on arbitrary bytes: they read what an etcd
// endpoint, or whatever listens at its address, sends. They must never crash, over-read or
// allocate without bound; whatever they accept must have decoded its base64 consistently.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "coord/etcd_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast::coord::etcd;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  if (auto range = ParseRangeResponse(body); range.ok()) {
    for (const KeyValue& kv : range->kvs) {
      auto again = Base64Decode(Base64Encode(kv.value));
      if (!again.ok() || *again != kv.value) std::abort();
    }
  }
  (void)ParseTxnResponse(body);
  (void)ParseLeaseGrantResponse(body);
  if (auto ttl = ParseKeepAliveResponse(body); ttl.ok() && *ttl < 0) std::abort();
  (void)ParseWatchMessage(body);
  (void)ParseEmptyResponse(body);
  if (auto decoded = Base64Decode(body); decoded.ok()) {
    if (Base64Encode(*decoded) != body) std::abort();
  }
  return 0;
}
