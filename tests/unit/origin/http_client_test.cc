#include "origin/http_client.h"

#include <gtest/gtest.h>

#include <thread>

#include "fake_origin.h"

namespace weightcast::origin {
namespace {

using testing::FakeOrigin;

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i * 131 + (i >> 8));
  return out;
}

HttpOptions Fast() {
  HttpOptions o;
  o.first_backoff = std::chrono::milliseconds(1);
  o.max_backoff = std::chrono::milliseconds(5);
  o.max_attempts = 4;
  return o;
}

ByteSink Into(std::vector<uint8_t>& out) {
  return [&out](std::span<const uint8_t> b) {
    out.insert(out.end(), b.begin(), b.end());
    return Status::Ok();
  };
}

TEST(HttpClient, ProbeLearnsSizeAndValidatorsWithTheFirstBytes) {
  FakeOrigin origin;
  const auto data = Pattern(300'000);
  origin.Put("m.safetensors", data);
  HttpClient http(Fast());
  std::vector<uint8_t> prefix;
  auto info = http.Probe(origin.url("m.safetensors"), 1000, Into(prefix));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, data.size());
  EXPECT_EQ(info->etag, "\"e1\"");
  EXPECT_EQ(prefix, std::vector<uint8_t>(data.begin(), data.begin() + 1000));
}

TEST(HttpClient, ProbeOfAnObjectShorterThanThePrefixGetsAllOfIt) {
  FakeOrigin origin;
  origin.Put("small", std::string("tiny"));
  origin.Put("empty", std::string());
  HttpClient http(Fast());
  std::vector<uint8_t> got;
  auto info = http.Probe(origin.url("small"), 1 << 20, Into(got));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, 4u);
  EXPECT_EQ(std::string(got.begin(), got.end()), "tiny");
  got.clear();
  auto empty = http.Probe(origin.url("empty"), 1 << 20, Into(got));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty->size, 0u);
}

TEST(HttpClient, RangesAreReadExactly) {
  FakeOrigin origin;
  const auto data = Pattern(1 << 20);
  origin.Put("f", data);
  HttpClient http(Fast());
  const ObjectInfo info{data.size(), "\"e1\"", ""};
  std::vector<uint8_t> got;
  ASSERT_TRUE(http.GetRange(origin.url("f"), 12345, 70000, info, Into(got)).ok());
  EXPECT_EQ(got, std::vector<uint8_t>(data.begin() + 12345, data.begin() + 12345 + 70000));
  EXPECT_EQ(http.GetRange(origin.url("f"), data.size() - 1, 2, info, Into(got)).code(),
            Code::kOutOfRange);
}

TEST(HttpClient, RetriesFiveHundredsWithBackoff) {
  FakeOrigin origin;
  const auto data = Pattern(5000);
  origin.Put("f", data);
  origin.FailNext(2, 503);
  HttpClient http(Fast());
  std::vector<uint8_t> got;
  ASSERT_TRUE(
      http.GetRange(origin.url("f"), 0, data.size(), {data.size(), "\"e1\"", ""}, Into(got)).ok());
  EXPECT_EQ(got, data);
  EXPECT_EQ(http.retries(), 2u);
}

TEST(HttpClient, GivesUpAfterItsAttemptsNamingTheStatus) {
  FakeOrigin origin;
  origin.Put("f", Pattern(10));
  origin.FailNext(100, 502);
  HttpClient http(Fast());
  std::vector<uint8_t> got;
  Status s = http.GetRange(origin.url("f"), 0, 10, {10, "", ""}, Into(got));
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find("HTTP 502"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("4 attempts"), std::string::npos) << s.ToString();
  EXPECT_TRUE(got.empty()) << "an error page is never taken as content";
}

TEST(HttpClient, AResetMidBodyResumesWhereItStopped) {
  FakeOrigin origin;
  const auto data = Pattern(200'000);
  origin.Put("f", data);
  origin.ResetNextAfter(50'000);
  HttpClient http(Fast());
  std::vector<uint8_t> got;
  Status s = http.GetRange(origin.url("f"), 1000, 150'000, {data.size(), "\"e1\"", ""}, Into(got));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, std::vector<uint8_t>(data.begin() + 1000, data.begin() + 151'000));
  // The second request asks only for what the first did not deliver.
  const auto requests = origin.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_NE(requests[1].find("Range: bytes=51000-150999"), std::string::npos) << requests[1];
}

TEST(HttpClient, ContentChangedUnderTheUrlIsRefusedAndNotRetried) {
  FakeOrigin origin;
  const auto data = Pattern(1000);
  origin.Put("f", data);
  HttpClient http(Fast());
  std::vector<uint8_t> prefix;
  auto info = http.Probe(origin.url("f"), 10, Into(prefix));
  ASSERT_TRUE(info.ok());
  origin.Put("f", Pattern(1000));  // same size, new ETag
  std::vector<uint8_t> got;
  Status s = http.GetRange(origin.url("f"), 0, 100, *info, Into(got));
  EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("changed at the origin"), std::string::npos) << s.ToString();
  EXPECT_TRUE(got.empty());
  // A size change is caught without an ETag too.
  Status size = http.GetRange(origin.url("f"), 0, 100, {999, "", ""}, Into(got));
  EXPECT_EQ(size.code(), Code::kFailedPrecondition) << size.ToString();
}

TEST(HttpClient, AServerThatIgnoresRangesServesOnlyFromTheStart) {
  FakeOrigin origin;
  const auto data = Pattern(10'000);
  origin.Put("f", data);
  origin.IgnoreRanges(true);
  HttpClient http(Fast());
  std::vector<uint8_t> got;
  ASSERT_TRUE(http.GetRange(origin.url("f"), 0, 100, {data.size(), "\"e1\"", ""}, Into(got)).ok());
  EXPECT_EQ(got, std::vector<uint8_t>(data.begin(), data.begin() + 100));
  Status s = http.GetRange(origin.url("f"), 500, 100, {data.size(), "\"e1\"", ""}, Into(got));
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("ignores HTTP Range"), std::string::npos) << s.ToString();
}

TEST(HttpClient, TheTokenReachesTheOriginAndNoMessage) {
  FakeOrigin origin;
  origin.Put("f", Pattern(100));
  origin.RequireToken("s3cr3t-token");
  HttpOptions without = Fast();
  HttpClient anonymous(without);
  std::vector<uint8_t> got;
  Status refused = anonymous.Probe(origin.url("f?sig=abc"), 10, Into(got)).status();
  EXPECT_EQ(refused.code(), Code::kUnauthenticated) << refused.ToString();
  EXPECT_EQ(refused.message().find("sig=abc"), std::string::npos) << refused.ToString();

  HttpOptions with = Fast();
  with.bearer_token = "s3cr3t-token";
  HttpClient http(with);
  auto info = http.Probe(origin.url("f"), 10, Into(got));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  origin.FailNext(100, 500);
  Status failed = http.GetRange(origin.url("f"), 0, 10, *info, Into(got));
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(failed.ToString().find("s3cr3t"), std::string::npos) << failed.ToString();
}

TEST(HttpClient, ASlowOriginIsWaitedForAndAStalledOneResumed) {
  FakeOrigin origin;
  const auto data = Pattern(30'000);
  origin.Put("f", data);
  origin.SlowTo(20'000);  // 1.5 s for the object, never below the low-speed limit
  HttpOptions o = Fast();
  o.low_speed_bytes = 1000;
  o.low_speed_window = std::chrono::seconds(1);
  HttpClient http(o);
  std::vector<uint8_t> got;
  ASSERT_TRUE(
      http.GetRange(origin.url("f"), 0, data.size(), {data.size(), "\"e1\"", ""}, Into(got)).ok());
  EXPECT_EQ(got, data);
  EXPECT_EQ(http.retries(), 0u) << "slow is not stalled";

  // Stalled mid-body past the window: dropped, then resumed after the bytes that came.
  origin.SlowTo(0);
  origin.StallNextAfter(1000, std::chrono::milliseconds(4000));
  got.clear();
  Status s = http.GetRange(origin.url("f"), 0, data.size(), {data.size(), "\"e1\"", ""}, Into(got));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, data);
  EXPECT_EQ(http.retries(), 1u);
  EXPECT_NE(origin.requests().back().find("Range: bytes=1000-29999"), std::string::npos)
      << origin.requests().back();
}

TEST(HttpClient, CancelEndsAWaitBetweenRetriesAtOnce) {
  FakeOrigin origin;
  origin.Put("f", Pattern(10));
  origin.FailNext(1000, 503);
  HttpOptions slow = Fast();
  slow.first_backoff = std::chrono::seconds(30);
  slow.max_backoff = std::chrono::seconds(30);
  slow.max_attempts = 5;
  HttpClient http(slow);
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    http.Cancel();
  });
  const auto start = std::chrono::steady_clock::now();
  std::vector<uint8_t> got;
  Status s = http.GetRange(origin.url("f"), 0, 10, {10, "", ""}, Into(got));
  canceller.join();
  EXPECT_EQ(s.code(), Code::kAborted) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(http.Probe(origin.url("f"), 1, Into(got)).status().code(), Code::kAborted);
}

TEST(HttpClient, MissingObjectsAndRefusedConnectionsNameTheirCause) {
  FakeOrigin origin;
  HttpClient http(Fast());
  std::vector<uint8_t> got;
  EXPECT_EQ(http.Probe(origin.url("absent"), 10, Into(got)).status().code(), Code::kNotFound);
  // A port nothing listens on (the fake origin's listener closed).
  std::string dead;
  {
    FakeOrigin gone;
    dead = gone.url("f");
  }
  Status s = http.Probe(dead, 10, Into(got)).status();
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
}

}  // namespace
}  // namespace weightcast::origin
