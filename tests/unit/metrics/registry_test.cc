#include "metrics/registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

namespace weightcast::metrics {
namespace {

TEST(Registry, RendersExactExpositionText) {
  Registry registry;
  registry.Counter("wc_chunks_total", "Chunks verified", {{"channel", "b"}}).Add(3);
  registry.Counter("wc_chunks_total", "ignored: the first help wins", {{"channel", "a"}}).Add(7);
  registry.Gauge("wc_peers", "Live peers").Set(2.5);
  registry.Counter("wc_bytes_total", "Bytes\\sent\nto peers", {}).Add(12345678901234ULL);
  EXPECT_EQ(registry.Render(),
            "# HELP wc_bytes_total Bytes\\\\sent\\nto peers\n"
            "# TYPE wc_bytes_total counter\n"
            "wc_bytes_total 12345678901234\n"
            "# HELP wc_chunks_total Chunks verified\n"
            "# TYPE wc_chunks_total counter\n"
            "wc_chunks_total{channel=\"a\"} 7\n"
            "wc_chunks_total{channel=\"b\"} 3\n"
            "# HELP wc_peers Live peers\n"
            "# TYPE wc_peers gauge\n"
            "wc_peers 2.5\n");
  EXPECT_TRUE(registry.errors().empty());
}

TEST(Registry, SameNameAndLabelsGiveTheSameMetricWhateverTheLabelOrder) {
  Registry registry;
  Counter& a = registry.Counter("x_total", "h", {{"a", "1"}, {"b", "2"}});
  Counter& b = registry.Counter("x_total", "h", {{"b", "2"}, {"a", "1"}});
  Counter& c = registry.Counter("x_total", "h", {{"a", "1"}, {"b", "3"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &c);
  a.Add();
  b.Add(2);
  EXPECT_EQ(a.value(), 3u);
  EXPECT_EQ(registry.Render(),
            "# HELP x_total h\n# TYPE x_total counter\n"
            "x_total{a=\"1\",b=\"2\"} 3\n"
            "x_total{a=\"1\",b=\"3\"} 0\n");
}

TEST(Registry, EscapesLabelValues) {
  Registry registry;
  registry.Gauge("g", "h", {{"path", "C:\\dir \"x\"\nnext"}}).Set(-1);
  EXPECT_EQ(registry.Render(),
            "# HELP g h\n# TYPE g gauge\n"
            "g{path=\"C:\\\\dir \\\"x\\\"\\nnext\"} -1\n");
  EXPECT_EQ(EscapeHelp("a\\b\"c\nd"), "a\\\\b\"c\\nd");
}

TEST(Registry, FormatsSpecialValues) {
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(1e21), "1e+21");
}

TEST(Registry, HistogramIsCumulativeWithSumAndCount) {
  Registry registry;
  Histogram& h = registry.Histogram("lat_seconds", "Latency", {0.5, 1}, {{"op", "get"}});
  h.Observe(0.25);
  h.Observe(0.5);  // le is inclusive
  h.Observe(0.75);
  h.Observe(7);
  EXPECT_EQ(registry.Render(),
            "# HELP lat_seconds Latency\n# TYPE lat_seconds histogram\n"
            "lat_seconds_count{op=\"get\"} 4\n"
            "lat_seconds_sum{op=\"get\"} 8.5\n"
            "lat_seconds_bucket{op=\"get\",le=\"0.5\"} 2\n"
            "lat_seconds_bucket{op=\"get\",le=\"1\"} 3\n"
            "lat_seconds_bucket{op=\"get\",le=\"+Inf\"} 4\n");
  EXPECT_EQ(h.bucket_count(0), 2u);
  EXPECT_EQ(h.bucket_count(1), 1u);
  EXPECT_EQ(h.bucket_count(2), 1u);
  EXPECT_DOUBLE_EQ(h.sum(), 8.5);
  EXPECT_EQ(h.count(), 4u);
}

TEST(Registry, ExponentialBuckets) {
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
}

TEST(Registry, RejectsBadNamesAndTypeConflictsWithoutBreakingTheCaller) {
  Registry registry;
  registry.Counter("ok_total", "h").Add();
  Counter& bad_name = registry.Counter("9bad", "h");
  bad_name.Add(5);  // usable, not exported
  EXPECT_EQ(bad_name.value(), 5u);
  registry.Counter("x_total", "h", {{"__reserved", "v"}});
  registry.Counter("x_total", "h", {{"a-b", "v"}});
  registry.Counter("x_total", "h", {{"a", "1"}, {"a", "2"}});
  registry.Histogram("h_seconds", "h", {1}, {{"le", "1"}});
  registry.Histogram("h2_seconds", "h", {2, 1});
  registry.Gauge("ok_total", "h").Set(1);  // type conflict with the counter
  std::vector<std::string> errors = registry.errors();
  ASSERT_EQ(errors.size(), 7u);
  EXPECT_NE(errors[0].find("9bad"), std::string::npos);
  EXPECT_NE(errors[6].find("is a counter, asked for as a gauge"), std::string::npos);
  std::string page = registry.Render();
  EXPECT_NE(page.find("# weightcast: rejected registration: "), std::string::npos);
  EXPECT_NE(page.find("ok_total 1\n"), std::string::npos);
  EXPECT_EQ(page.find("9bad 5"), std::string::npos);
  EXPECT_EQ(page.find("# TYPE ok_total gauge"), std::string::npos);
}

TEST(Registry, CallbackMetricsAreReadAtRenderAndRemovable) {
  Registry registry;
  int peers = 4;
  registry.GaugeFunc("peers", "Live peers", {{"channel", "c"}}, [&] { return peers * 1.0; });
  registry.CounterFunc("events_total", "Events", {}, [] { return uint64_t{9}; });
  EXPECT_NE(registry.Render().find("peers{channel=\"c\"} 4\n"), std::string::npos);
  peers = 6;
  EXPECT_NE(registry.Render().find("peers{channel=\"c\"} 6\n"), std::string::npos);
  EXPECT_NE(registry.Render().find("events_total 9\n"), std::string::npos);
  registry.Remove("peers", {{"channel", "c"}});
  EXPECT_EQ(registry.Render().find("peers"), std::string::npos);
  // A plain counter cannot be removed (references to it are out there).
  registry.Counter("kept_total", "h").Add();
  registry.Remove("kept_total", {});
  EXPECT_NE(registry.Render().find("kept_total 1\n"), std::string::npos);
  // A value series and a callback series under the same name+labels conflict.
  registry.Gauge("peers", "Live peers", {{"channel", "d"}});
  registry.GaugeFunc("peers", "Live peers", {{"channel", "d"}}, [] { return 1.0; });
  EXPECT_EQ(registry.errors().size(), 1u);
}

TEST(Registry, ConcurrentUpdatesAndRegistrationsLoseNothing) {
  Registry registry;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&registry, t] {
      // Every thread registers the same shared metrics itself (races on creation) plus its own.
      Counter& shared = registry.Counter("shared_total", "h", {{"kind", "x"}});
      Gauge& gauge = registry.Gauge("level", "h");
      Histogram& hist = registry.Histogram("sizes", "h", {10, 100});
      Counter& own = registry.Counter("own_total", "h", {{"thread", std::to_string(t)}});
      for (int i = 0; i < kPerThread; ++i) {
        shared.Add();
        own.Add(2);
        gauge.Add(1);
        gauge.Sub(0.5);
        hist.Observe(i % 200);
        if (i % 5000 == 0) (void)registry.Render();  // scrapes race with updates
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(registry.Counter("shared_total", "h", {{"kind", "x"}}).value(),
            uint64_t{kThreads} * kPerThread);
  EXPECT_DOUBLE_EQ(registry.Gauge("level", "h").value(), kThreads * kPerThread * 0.5);
  Histogram& hist = registry.Histogram("sizes", "h", {10, 100});
  EXPECT_EQ(hist.count(), uint64_t{kThreads} * kPerThread);
  EXPECT_EQ(hist.bucket_count(0), uint64_t{kThreads} * (kPerThread / 200) * 11);
  std::string page = registry.Render();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_NE(page.find("own_total{thread=\"" + std::to_string(t) + "\"} 40000\n"),
              std::string::npos);
  }
  EXPECT_TRUE(registry.errors().empty());
}

}  // namespace
}  // namespace weightcast::metrics
