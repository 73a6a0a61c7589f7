#include "coord/etcd_json.h"

#include <array>
#include <charconv>

#include <nlohmann/json.hpp>

namespace weightcast::coord::etcd {
namespace {

using nlohmann::json;

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Bounds what a hostile or broken answer can make us allocate: far above the 1.5 MiB request
// limit etcd enforces on values by default.
constexpr size_t kMaxBodyBytes = 64u << 20;

// gRPC status codes that waiting may fix: CANCELLED, UNKNOWN (etcd reports "leader changed"
// this way), DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, INTERNAL, UNAVAILABLE.
bool Retryable(int64_t grpc_code) {
  switch (grpc_code) {
    case 1:
    case 2:
    case 4:
    case 8:
    case 10:
    case 13:
    case 14:
      return true;
    default:
      return false;
  }
}

Result<json> ParseObject(std::string_view body, std::string_view what) {
  if (body.size() > kMaxBodyBytes) {
    return Corrupt("etcd " + std::string(what) + ": answer of " + std::to_string(body.size()) +
                   " bytes");
  }
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return Corrupt("etcd " + std::string(what) + ": the answer is not a JSON object");
  }
  // The gateway's error shape: {"error": "...", "code": 14, "message": "..."}.
  if (parsed.contains("error") || (parsed.contains("code") && parsed.contains("message"))) {
    // A stream endpoint nests it: {"error": {"grpc_code": 14, "message": "..."}}.
    const json& error =
        parsed.contains("error") && parsed["error"].is_object() ? parsed["error"] : parsed;
    int64_t code = 2;
    for (const char* field : {"code", "grpc_code"}) {
      if (auto c = error.find(field); c != error.end() && c->is_number_integer()) {
        code = c->get<int64_t>();
      }
    }
    std::string message = "etcd " + std::string(what) + " failed";
    for (const char* field : {"message", "error"}) {
      if (auto m = error.find(field); m != error.end() && m->is_string()) {
        message += ": " + m->get<std::string>().substr(0, 512);
        break;
      }
    }
    message += " (gRPC code " + std::to_string(code) + ")";
    return Retryable(code) ? Unavailable(std::move(message))
                           : FailedPrecondition(std::move(message));
  }
  return parsed;
}

// A 64-bit integer field: the gateway writes them as strings, but numbers are accepted too.
// Absent means 0 (proto3 leaves defaults out).
Result<int64_t> Int(const json& object, std::string_view field) {
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return int64_t{0};
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& text = it->get_ref<const std::string&>();
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec == std::errc() && end == text.data() + text.size() && !text.empty()) return value;
  }
  return Corrupt("etcd: field " + std::string(field) + " is not an integer");
}

bool Bool(const json& object, std::string_view field) {
  auto it = object.find(field);
  return it != object.end() && it->is_boolean() && it->get<bool>();
}

Result<std::string> Bytes(const json& object, std::string_view field) {
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return std::string();
  if (!it->is_string()) return Corrupt("etcd: field " + std::string(field) + " is not a string");
  return Base64Decode(it->get_ref<const std::string&>());
}

// The object at `field`, or an empty one when absent; kCorrupt when it is something else.
Result<const json*> Object(const json& object, std::string_view field) {
  static const json kEmpty = json::object();
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return &kEmpty;
  if (!it->is_object()) return Corrupt("etcd: field " + std::string(field) + " is not an object");
  return &*it;
}

Result<const json*> Array(const json& object, std::string_view field) {
  static const json kEmpty = json::array();
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return &kEmpty;
  if (!it->is_array()) return Corrupt("etcd: field " + std::string(field) + " is not an array");
  return &*it;
}

Result<int64_t> HeaderRevision(const json& object) {
  WC_ASSIGN_OR_RETURN(const json* header, Object(object, "header"));
  return Int(*header, "revision");
}

Result<KeyValue> ParseKeyValue(const json& kv) {
  if (!kv.is_object()) return Corrupt("etcd: a key-value is not an object");
  KeyValue out;
  WC_ASSIGN_OR_RETURN(out.key, Bytes(kv, "key"));
  WC_ASSIGN_OR_RETURN(out.value, Bytes(kv, "value"));
  WC_ASSIGN_OR_RETURN(out.create_revision, Int(kv, "create_revision"));
  WC_ASSIGN_OR_RETURN(out.mod_revision, Int(kv, "mod_revision"));
  WC_ASSIGN_OR_RETURN(out.version, Int(kv, "version"));
  WC_ASSIGN_OR_RETURN(out.lease, Int(kv, "lease"));
  return out;
}

Result<RangeResult> ParseRange(const json& object) {
  RangeResult out;
  WC_ASSIGN_OR_RETURN(out.revision, HeaderRevision(object));
  WC_ASSIGN_OR_RETURN(const json* kvs, Array(object, "kvs"));
  for (const json& kv : *kvs) {
    WC_ASSIGN_OR_RETURN(KeyValue parsed, ParseKeyValue(kv));
    out.kvs.push_back(std::move(parsed));
  }
  out.more = Bool(object, "more");
  return out;
}

// Integers go out as decimal strings, as the gateway writes them itself.
std::string Dec(int64_t n) { return std::to_string(n); }

json OpJson(const Op& op) {
  json body = json::object();
  body["key"] = Base64Encode(op.key);
  switch (op.kind) {
    case Op::Kind::kPut:
      body["value"] = Base64Encode(op.value);
      if (op.lease != 0) body["lease"] = Dec(op.lease);
      return {{"request_put", body}};
    case Op::Kind::kRange:
      if (!op.range_end.empty()) body["range_end"] = Base64Encode(op.range_end);
      return {{"request_range", body}};
    case Op::Kind::kDeleteRange:
      if (!op.range_end.empty()) body["range_end"] = Base64Encode(op.range_end);
      return {{"request_delete_range", body}};
  }
  return json::object();
}

json CompareJson(const Compare& c) {
  json body = json::object();
  body["key"] = Base64Encode(c.key);
  switch (c.result) {
    case Compare::Result::kEqual:
      body["result"] = "EQUAL";
      break;
    case Compare::Result::kGreater:
      body["result"] = "GREATER";
      break;
    case Compare::Result::kLess:
      body["result"] = "LESS";
      break;
    case Compare::Result::kNotEqual:
      body["result"] = "NOT_EQUAL";
      break;
  }
  switch (c.target) {
    case Compare::Target::kCreateRevision:
      body["target"] = "CREATE";
      body["create_revision"] = Dec(c.number);
      break;
    case Compare::Target::kModRevision:
      body["target"] = "MOD";
      body["mod_revision"] = Dec(c.number);
      break;
    case Compare::Target::kVersion:
      body["target"] = "VERSION";
      body["version"] = Dec(c.number);
      break;
    case Compare::Target::kLease:
      body["target"] = "LEASE";
      body["lease"] = Dec(c.number);
      break;
    case Compare::Target::kValue:
      body["target"] = "VALUE";
      body["value"] = Base64Encode(c.value);
      break;
  }
  return body;
}

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t n = static_cast<uint8_t>(bytes[i]) << 16 |
                       static_cast<uint8_t>(bytes[i + 1]) << 8 | static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[n >> 18 & 63];
    out += kAlphabet[n >> 12 & 63];
    out += kAlphabet[n >> 6 & 63];
    out += kAlphabet[n & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest != 0) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (rest == 2) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += kAlphabet[n >> 18 & 63];
    out += kAlphabet[n >> 12 & 63];
    out += rest == 2 ? kAlphabet[n >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

Result<std::string> Base64Decode(std::string_view text) {
  static const std::array<int8_t, 256> kValue = [] {
    std::array<int8_t, 256> table{};
    table.fill(-1);
    for (size_t i = 0; i < kAlphabet.size(); ++i) {
      table[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
    }
    return table;
  }();
  if (text.size() % 4 != 0) return Corrupt("etcd: base64 of length " + std::to_string(text.size()));
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int pad = 0;
    uint32_t n = 0;
    for (size_t j = 0; j < 4; ++j) {
      const char c = text[i + j];
      if (c == '=' && last && j >= 2) {
        ++pad;
        n <<= 6;
        continue;
      }
      const int8_t v = kValue[static_cast<uint8_t>(c)];
      if (v < 0 || pad != 0) return Corrupt("etcd: bad base64");
      n = n << 6 | static_cast<uint32_t>(v);
    }
    // Canonical only: the bits under the padding are zero (what every encoder, etcd's
    // included, writes), so that a value has exactly one text.
    if ((pad == 1 && (n & 0xff) != 0) || (pad == 2 && (n & 0xffff) != 0)) {
      return Corrupt("etcd: bad base64 padding");
    }
    out += static_cast<char>(n >> 16 & 0xff);
    if (pad < 2) out += static_cast<char>(n >> 8 & 0xff);
    if (pad < 1) out += static_cast<char>(n & 0xff);
  }
  return out;
}

std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<uint8_t>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<uint8_t>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key (etcd's convention for "no end")
}

Compare CreateRevisionIs(std::string key, int64_t revision) {
  Compare c;
  c.key = std::move(key);
  c.target = Compare::Target::kCreateRevision;
  c.result = Compare::Result::kEqual;
  c.number = revision;
  return c;
}

Op PutOp(std::string key, std::string value, int64_t lease) {
  Op op;
  op.kind = Op::Kind::kPut;
  op.key = std::move(key);
  op.value = std::move(value);
  op.lease = lease;
  return op;
}

Op RangeOp(std::string key, std::string range_end) {
  Op op;
  op.kind = Op::Kind::kRange;
  op.key = std::move(key);
  op.range_end = std::move(range_end);
  return op;
}

Op DeleteRangeOp(std::string key, std::string range_end) {
  Op op = RangeOp(std::move(key), std::move(range_end));
  op.kind = Op::Kind::kDeleteRange;
  return op;
}

std::string RangeRequest(std::string_view key, std::string_view range_end, int64_t limit,
                         bool serializable) {
  json body = {{"key", Base64Encode(key)}};
  if (serializable) body["serializable"] = true;
  if (!range_end.empty()) body["range_end"] = Base64Encode(range_end);
  if (limit != 0) body["limit"] = Dec(limit);
  return body.dump();
}

std::string TxnRequest(const Txn& txn) {
  json body = json::object();
  json& compare = body["compare"] = json::array();
  for (const Compare& c : txn.compare) compare.push_back(CompareJson(c));
  json& success = body["success"] = json::array();
  for (const Op& op : txn.success) success.push_back(OpJson(op));
  json& failure = body["failure"] = json::array();
  for (const Op& op : txn.failure) failure.push_back(OpJson(op));
  return body.dump();
}

std::string LeaseGrantRequest(int64_t ttl_seconds) {
  return json({{"TTL", Dec(ttl_seconds)}}).dump();
}

std::string LeaseIdRequest(int64_t id) { return json({{"ID", Dec(id)}}).dump(); }

std::string WatchCreateRequest(std::string_view key, std::string_view range_end,
                               int64_t start_revision) {
  json create = {{"key", Base64Encode(key)}};
  if (!range_end.empty()) create["range_end"] = Base64Encode(range_end);
  if (start_revision != 0) create["start_revision"] = Dec(start_revision);
  return json({{"create_request", create}}).dump();
}

Result<RangeResult> ParseRangeResponse(std::string_view body) {
  WC_ASSIGN_OR_RETURN(json parsed, ParseObject(body, "range"));
  return ParseRange(parsed);
}

Result<TxnResult> ParseTxnResponse(std::string_view body) {
  WC_ASSIGN_OR_RETURN(json parsed, ParseObject(body, "txn"));
  TxnResult out;
  WC_ASSIGN_OR_RETURN(out.revision, HeaderRevision(parsed));
  out.succeeded = Bool(parsed, "succeeded");
  WC_ASSIGN_OR_RETURN(const json* responses, Array(parsed, "responses"));
  for (const json& response : *responses) {
    if (!response.is_object()) return Corrupt("etcd txn: a response is not an object");
    auto range = response.find("response_range");
    if (range == response.end()) continue;
    if (!range->is_object()) return Corrupt("etcd txn: response_range is not an object");
    WC_ASSIGN_OR_RETURN(RangeResult parsed_range, ParseRange(*range));
    out.ranges.push_back(std::move(parsed_range));
  }
  return out;
}

Result<LeaseGrantResult> ParseLeaseGrantResponse(std::string_view body) {
  WC_ASSIGN_OR_RETURN(json parsed, ParseObject(body, "lease grant"));
  LeaseGrantResult out;
  WC_ASSIGN_OR_RETURN(out.id, Int(parsed, "ID"));
  WC_ASSIGN_OR_RETURN(out.ttl_seconds, Int(parsed, "TTL"));
  if (out.id == 0 || out.ttl_seconds <= 0) {
    return Corrupt("etcd lease grant: no lease in the answer");
  }
  return out;
}

Result<int64_t> ParseKeepAliveResponse(std::string_view body) {
  // A stream endpoint: the gateway wraps each message as {"result": {...}}; the first is ours.
  const size_t end = body.find('\n');
  WC_ASSIGN_OR_RETURN(
      json parsed,
      ParseObject(end == std::string_view::npos ? body : body.substr(0, end), "lease keepalive"));
  WC_ASSIGN_OR_RETURN(const json* result, Object(parsed, "result"));
  WC_ASSIGN_OR_RETURN(int64_t ttl, Int(*result, "TTL"));
  return ttl < 0 ? 0 : ttl;
}

Result<WatchMessage> ParseWatchMessage(std::string_view line) {
  WC_ASSIGN_OR_RETURN(json parsed, ParseObject(line, "watch"));
  WC_ASSIGN_OR_RETURN(const json* result, Object(parsed, "result"));
  WatchMessage out;
  WC_ASSIGN_OR_RETURN(out.revision, HeaderRevision(*result));
  out.created = Bool(*result, "created");
  out.canceled = Bool(*result, "canceled");
  WC_ASSIGN_OR_RETURN(out.compact_revision, Int(*result, "compact_revision"));
  WC_ASSIGN_OR_RETURN(const json* events, Array(*result, "events"));
  for (const json& event : *events) {
    if (!event.is_object()) return Corrupt("etcd watch: an event is not an object");
    WatchEvent parsed_event;
    if (auto type = event.find("type"); type != event.end()) {
      if (!type->is_string()) return Corrupt("etcd watch: event type is not a string");
      const std::string& name = type->get_ref<const std::string&>();
      if (name == "DELETE") {
        parsed_event.deleted = true;
      } else if (name != "PUT") {
        return Corrupt("etcd watch: unknown event type " + name.substr(0, 32));
      }
    }
    WC_ASSIGN_OR_RETURN(const json* kv, Object(event, "kv"));
    WC_ASSIGN_OR_RETURN(parsed_event.kv, ParseKeyValue(*kv));
    out.events.push_back(std::move(parsed_event));
  }
  return out;
}

Status ParseEmptyResponse(std::string_view body) { return ParseObject(body, "request").status(); }

}  // namespace weightcast::coord::etcd
