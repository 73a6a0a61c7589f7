#include "coord/etcd_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace weightcast::coord::etcd {
namespace {

using nlohmann::json;

TEST(EtcdBase64, EncodesRfc4648Vectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode(std::string("\xff\x00\xfe", 3)), "/wD+");
}

TEST(EtcdBase64, RoundTripsEveryByte) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n < all.size(); n += 37) {
    auto decoded = Base64Decode(Base64Encode(all.substr(0, n)));
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, all.substr(0, n));
  }
}

TEST(EtcdBase64, RejectsMalformedText) {
  EXPECT_EQ(Base64Decode("Zg=").status().code(), Code::kCorrupt);       // length
  EXPECT_EQ(Base64Decode("Z!==").status().code(), Code::kCorrupt);      // alphabet
  EXPECT_EQ(Base64Decode("Zg==Zm8=").status().code(), Code::kCorrupt);  // padding inside
  EXPECT_EQ(Base64Decode("Z=g=").status().code(), Code::kCorrupt);      // data after padding
  EXPECT_EQ(Base64Decode("qqq=").status().code(), Code::kCorrupt);      // bits under the padding
  EXPECT_EQ(Base64Decode("Zh==").status().code(), Code::kCorrupt);
}

TEST(EtcdKeys, PrefixEndIsThePrefixPlusOne) {
  EXPECT_EQ(PrefixEnd("/a/"), "/a0");
  EXPECT_EQ(PrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixEnd(""), std::string(1, '\0'));
}

TEST(EtcdRequests, TxnCarriesFenceCreateIfAbsentAndLease) {
  Txn txn;
  txn.compare.push_back(CreateRevisionIs("/p/leader", 42));
  txn.success.push_back(PutOp("/p/log/1", "rec", 7));
  txn.failure.push_back(RangeOp("/p/leader"));
  const json body = json::parse(TxnRequest(txn));
  EXPECT_EQ(body["compare"][0]["key"], Base64Encode("/p/leader"));
  EXPECT_EQ(body["compare"][0]["target"], "CREATE");
  EXPECT_EQ(body["compare"][0]["result"], "EQUAL");
  EXPECT_EQ(body["compare"][0]["create_revision"], "42");
  EXPECT_EQ(body["success"][0]["request_put"]["value"], Base64Encode("rec"));
  EXPECT_EQ(body["success"][0]["request_put"]["lease"], "7");
  EXPECT_EQ(body["failure"][0]["request_range"]["key"], Base64Encode("/p/leader"));
}

TEST(EtcdRequests, RangeAndWatchAndLease) {
  json range = json::parse(RangeRequest("/a/", "/a0", 5, true));
  EXPECT_EQ(range["range_end"], Base64Encode("/a0"));
  EXPECT_EQ(range["limit"], "5");
  EXPECT_EQ(range["serializable"], true);
  EXPECT_FALSE(json::parse(RangeRequest("k")).contains("range_end"));
  json watch = json::parse(WatchCreateRequest("k", {}, 9));
  EXPECT_EQ(watch["create_request"]["start_revision"], "9");
  EXPECT_EQ(json::parse(LeaseGrantRequest(3))["TTL"], "3");
  EXPECT_EQ(json::parse(LeaseIdRequest(-5))["ID"], "-5");
}

// Answers captured from etcd 3.4.23's gateway.
TEST(EtcdResponses, ParsesRange) {
  auto r = ParseRangeResponse(
      R"({"header":{"cluster_id":"1","member_id":"2","revision":"2","raft_term":"2"},)"
      R"("kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"3","version":"1",)"
      R"("value":"YmFy","lease":"77"}],"count":"1"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->revision, 2);
  ASSERT_EQ(r->kvs.size(), 1u);
  EXPECT_EQ(r->kvs[0].key, "foo");
  EXPECT_EQ(r->kvs[0].value, "bar");
  EXPECT_EQ(r->kvs[0].create_revision, 2);
  EXPECT_EQ(r->kvs[0].mod_revision, 3);
  EXPECT_EQ(r->kvs[0].lease, 77);
  EXPECT_FALSE(r->more);
  auto empty = ParseRangeResponse(R"({"header":{"revision":"4"}})");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->kvs.empty());
}

TEST(EtcdResponses, ParsesFailedTxnWithItsRanges) {
  auto r = ParseTxnResponse(
      R"({"header":{"revision":"2"},"responses":[{"response_range":{"header":{"revision":"2"},)"
      R"("kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"2","version":"1",)"
      R"("value":"YmFy"}],"count":"1"}}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->succeeded);
  ASSERT_EQ(r->ranges.size(), 1u);
  EXPECT_EQ(r->ranges[0].kvs[0].value, "bar");
  auto ok = ParseTxnResponse(
      R"({"header":{"revision":"9"},"succeeded":true,"responses":[{"response_put":{"header":{}}}]})");
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->succeeded);
  EXPECT_EQ(ok->revision, 9);
  EXPECT_TRUE(ok->ranges.empty());
}

TEST(EtcdResponses, ParsesLeaseGrantAndKeepAlive) {
  auto grant = ParseLeaseGrantResponse(R"({"header":{},"ID":"4111120380387404805","TTL":"5"})");
  ASSERT_TRUE(grant.ok());
  EXPECT_EQ(grant->id, 4111120380387404805);
  EXPECT_EQ(grant->ttl_seconds, 5);
  EXPECT_EQ(ParseLeaseGrantResponse(R"({"header":{}})").status().code(), Code::kCorrupt);
  auto alive = ParseKeepAliveResponse(R"({"result":{"header":{},"ID":"1","TTL":"5"}})"
                                      "\n");
  ASSERT_TRUE(alive.ok());
  EXPECT_EQ(*alive, 5);
  // etcd no longer knows the lease: no TTL in the answer.
  auto gone = ParseKeepAliveResponse(R"({"result":{"header":{},"ID":"12345"}})");
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(*gone, 0);
}

TEST(EtcdResponses, ParsesWatchLines) {
  auto created = ParseWatchMessage(R"({"result":{"header":{"revision":"2"},"created":true}})");
  ASSERT_TRUE(created.ok());
  EXPECT_TRUE(created->created);
  EXPECT_TRUE(created->events.empty());
  auto put = ParseWatchMessage(
      R"({"result":{"header":{"revision":"3"},"events":[{"kv":{"key":"Zm9v","mod_revision":"3",)"
      R"("value":"cXV4"}}]}})");
  ASSERT_TRUE(put.ok());
  ASSERT_EQ(put->events.size(), 1u);
  EXPECT_FALSE(put->events[0].deleted);
  EXPECT_EQ(put->events[0].kv.value, "qux");
  auto del = ParseWatchMessage(
      R"({"result":{"header":{"revision":"4"},"events":[{"type":"DELETE","kv":{"key":"Zm9v"}}]}})");
  ASSERT_TRUE(del.ok());
  EXPECT_TRUE(del->events[0].deleted);
  EXPECT_EQ(ParseWatchMessage(R"({"result":{"events":[{"type":"NOPE"}]}})").status().code(),
            Code::kCorrupt);
}

TEST(EtcdResponses, GatewayErrorsBecomeStatuses) {
  auto unavailable = ParseRangeResponse(
      R"({"error":"etcdserver: request timed out","code":14,"message":"etcdserver: request timed out"})");
  EXPECT_EQ(unavailable.status().code(), Code::kUnavailable);
  EXPECT_NE(unavailable.status().message().find("request timed out"), std::string::npos);
  auto stream = ParseKeepAliveResponse(
      R"({"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader"}})");
  EXPECT_EQ(stream.status().code(), Code::kUnavailable);
  EXPECT_NE(stream.status().message().find("no leader"), std::string::npos);
  auto permanent = ParseTxnResponse(R"({"error":"bad","code":3,"message":"invalid"})");
  EXPECT_EQ(permanent.status().code(), Code::kFailedPrecondition);
}

TEST(EtcdResponses, RejectsWhatIsNotEtcd) {
  for (const char* body :
       {"", "[]", "nul", "{\"kvs\":5}", "{\"kvs\":[1]}", "{\"kvs\":[{\"key\":\"@@@@\"}]}",
        "{\"header\":{\"revision\":\"x\"}}",
        "{\"header\":{\"revision\":\"12345678901234567890123\"}}", "{\"header\":[]}"}) {
    EXPECT_EQ(ParseRangeResponse(body).status().code(), Code::kCorrupt) << body;
  }
  EXPECT_EQ(ParseTxnResponse("{\"responses\":[{\"response_range\":7}]}").status().code(),
            Code::kCorrupt);
}

TEST(EtcdResponses, AcceptsNumbersWhereStringsAreUsual) {
  auto r = ParseRangeResponse(R"({"header":{"revision":12},"kvs":[{"key":"","mod_revision":3}]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->revision, 12);
  EXPECT_EQ(r->kvs[0].mod_revision, 3);
}

}  // namespace
}  // namespace weightcast::coord::etcd
