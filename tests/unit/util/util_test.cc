#include <gtest/gtest.h>
#include <weightcast/status.h>
#include <weightcast/types.h>

#include <atomic>
#include <filesystem>
#include <type_traits>

#include "util/file.h"
#include "util/text.h"
#include "util/thread_pool.h"

namespace weightcast {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  WC_ASSIGN_OR_RETURN(int h, Half(x));
  WC_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(Status, PropagatesThroughMacros) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().ToString(), "INVALID_ARGUMENT: odd");
  EXPECT_EQ(r.status().WithContext("x").message(), "x: odd");
}

TEST(Status, AReasonIsKeptThroughContextAndNeverRidesOnOk) {
  const Status closed = Unavailable("peer closed the connection").WithReason(Reason::kPeerClosed);
  EXPECT_EQ(closed.reason(), Reason::kPeerClosed);
  EXPECT_EQ(closed.WithContext("fetch").reason(), Reason::kPeerClosed);
  EXPECT_EQ(closed.WithContext("fetch").message(), "fetch: peer closed the connection");
  // The words alone are not the reason: nothing reads a message to classify it.
  EXPECT_EQ(Unavailable("peer closed the connection").reason(), Reason::kNone);
  EXPECT_EQ(Status::Ok().WithReason(Reason::kStandby).reason(), Reason::kNone);
  EXPECT_TRUE(Status::Ok().WithReason(Reason::kStandby).ok());
}

TEST(StrongId, DistinctTypesDoNotMix) {
  static_assert(!std::is_convertible_v<ChunkIndex, Version>);
  static_assert(!std::is_convertible_v<uint64_t, Version>);
  EXPECT_LT(Version(1), Version(2));
}

TEST(ParseSize, AcceptsUnitsAndRejectsGarbage) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("4MiB"), 4u << 20);
  EXPECT_EQ(*ParseSize("1.5GB"), 1500000000u);
  EXPECT_EQ(*ParseSize("10k"), 10240u);
  EXPECT_FALSE(ParseSize("").ok());
  EXPECT_FALSE(ParseSize("-1").ok());
  EXPECT_FALSE(ParseSize("4 parsecs").ok());
  EXPECT_FALSE(ParseSize("99999999999T").ok());
}

TEST(Hex, RoundTrips) {
  std::vector<uint8_t> bytes = {0, 1, 0xab, 0xff};
  EXPECT_EQ(ToHex(bytes), "0001abff");
  EXPECT_EQ(*FromHex("0001abff"), bytes);
  EXPECT_FALSE(FromHex("0g").ok());
}

TEST(Text, FormatsShapesAndEscapesControlBytes) {
  std::vector<uint64_t> shape = {4096, 11008};
  EXPECT_EQ(FormatShape(shape), "[4096, 11008]");
  EXPECT_EQ(FormatShape({}), "[]");
  EXPECT_EQ(EscapeControlBytes("a\x1b[2Jb\n"), "a\\x1b[2Jb\\x0a");
  EXPECT_EQ(EscapeControlBytes("model.layers.0.q_proj"), "model.layers.0.q_proj");
}

TEST(File, AtomicWriteThenMapAndRead) {
  auto dir = std::filesystem::temp_directory_path() / ("wc_util_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / "f";
  ASSERT_TRUE(WriteFileAtomic(path, "hello").ok());
  ASSERT_TRUE(WriteFileAtomic(path, "hello world").ok());
  auto mapped = MappedFile::Open(path);
  ASSERT_TRUE(mapped.ok());
  EXPECT_EQ(mapped->size(), 11u);
  EXPECT_EQ(*ReadFileToString(path), "hello world");
  EXPECT_EQ(ReadFileToString(path, 5).status().code(), Code::kOutOfRange);
  EXPECT_EQ(MappedFile::Open(dir / "missing").status().code(), Code::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(ThreadPool, ParallelForVisitsEveryIndexOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(1000);
  pool.ParallelFor(hits.size(), [&](size_t i) { hits[i].fetch_add(1); });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ParseDuration, AcceptsUnitsAndBareSeconds) {
  using namespace std::chrono;
  EXPECT_EQ(ParseDuration("250ms").value(), milliseconds(250));
  EXPECT_EQ(ParseDuration("3").value(), seconds(3));
  EXPECT_EQ(ParseDuration("1.5s").value(), milliseconds(1500));
  EXPECT_EQ(ParseDuration("2m").value(), minutes(2));
  EXPECT_EQ(ParseDuration("10us").value(), microseconds(10));
}

TEST(ParseDuration, RejectsGarbageNamingTheInput) {
  for (const char* bad : {"", "-1s", "s", "1.2.3s", "5 parsecs", "1e30h"}) {
    auto result = ParseDuration(bad);
    ASSERT_FALSE(result.ok()) << bad;
    EXPECT_EQ(result.status().code(), Code::kInvalidArgument);
    EXPECT_NE(result.status().message().find("duration"), std::string::npos);
  }
}

}  // namespace
}  // namespace weightcast
