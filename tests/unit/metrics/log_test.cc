#include "metrics/log.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace weightcast::metrics {
namespace {

using std::chrono::milliseconds;

// 2026-11-29T13:00:00.123Z
const auto kTime = std::chrono::system_clock::time_point(milliseconds(1795957200123));

std::string Line(LogFormat format, std::string_view msg, std::vector<LogField> fields,
                 LogLevel level = LogLevel::kInfo) {
  return Logger::FormatLine(format, kTime, level, "agent", msg, {}, fields);
}

TEST(Logger, FormatsTimestampsInUtcWithMilliseconds) {
  EXPECT_EQ(FormatTimestamp(kTime), "2026-11-29T13:00:00.123Z");
  EXPECT_EQ(FormatTimestamp(std::chrono::system_clock::time_point(milliseconds(5))),
            "1970-01-01T00:00:00.005Z");
}

TEST(Logger, TextLineIsTimestampLevelComponentMessageThenFields) {
  EXPECT_EQ(Line(LogFormat::kText, "committed version",
                 {{"version", 7},
                  {"path", "/srv/a b"},
                  {"ok", true},
                  {"rate", 0.5},
                  {"empty", ""},
                  {"n", uint64_t{18446744073709551615ULL}}}),
            "2026-11-29T13:00:00.123Z INFO agent committed version version=7 "
            "path=\"/srv/a b\" ok=true rate=0.5 empty=\"\" n=18446744073709551615");
}

TEST(Logger, TextQuotesAndEscapesSoOneEventStaysOneLine) {
  EXPECT_EQ(
      Line(LogFormat::kText, "bad\npeer", {{"why", "say \"hi\"\n\\x=1\t\x01"}}, LogLevel::kWarn),
      "2026-11-29T13:00:00.123Z WARN agent bad\\x0apeer "
      "why=\"say \\\"hi\\\"\\n\\\\x=1\\t\\x01\"");
  EXPECT_EQ(Line(LogFormat::kText, "m", {{"a=b c", "v"}}),
            "2026-11-29T13:00:00.123Z INFO agent m a_b_c=v");
}

TEST(Logger, JsonLineIsOneEscapedObject) {
  EXPECT_EQ(Line(LogFormat::kJson, "committed \"v\"",
                 {{"version", 7},
                  {"neg", -3},
                  {"path", "/srv/a b\n"},
                  {"ok", false},
                  {"rate", 1.25},
                  {"msg", "shadow"}},
                 LogLevel::kError),
            "{\"ts\":\"2026-11-29T13:00:00.123Z\",\"level\":\"error\",\"component\":\"agent\","
            "\"msg\":\"committed \\\"v\\\"\",\"version\":7,\"neg\":-3,"
            "\"path\":\"/srv/a b\\n\",\"ok\":false,\"rate\":1.25,\"_msg\":\"shadow\"}");
}

TEST(Logger, JsonReplacesInvalidUtf8AndControlBytes) {
  EXPECT_EQ(Line(LogFormat::kJson, "x", {{"name", "caf\xc3\xa9 \xff\x01 \xe2\x82"}}),
            "{\"ts\":\"2026-11-29T13:00:00.123Z\",\"level\":\"info\",\"component\":\"agent\","
            "\"msg\":\"x\",\"name\":\"caf\xc3\xa9 \xef\xbf\xbd\\u0001 \xef\xbf\xbd\"}");
  // NaN is not a JSON number.
  EXPECT_NE(Line(LogFormat::kJson, "x", {{"v", std::nan("")}}).find("\"v\":\"NaN\""),
            std::string::npos);
}

TEST(Logger, ParsesTheLogFormatFlag) {
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  auto bad = ParseLogFormat("xml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
}

TEST(Logger, WritesToItsSinkWithContextLevelsAndAsALineFunction) {
  std::vector<std::string> lines;
  Logger log("coordinator", LogFormat::kText,
             [&](std::string_view line) { lines.emplace_back(line); });
  Logger node = log.With({{"node", 17}});
  node.Info("hello", {{"k", "v"}});
  node.Debug("dropped");
  node.set_min_level(LogLevel::kDebug);
  node.Debug("kept");
  log.Warn("plain");
  std::function<void(std::string_view)> fn = node.AsLineFn();
  fn("from net: peer 3 refused");
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_NE(lines[0].find(" INFO coordinator hello node=17 k=v"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find(" DEBUG coordinator kept node=17"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find(" WARN coordinator plain"), std::string::npos) << lines[2];
  EXPECT_EQ(lines[2].find("node="), std::string::npos);
  // AsLineFn copied the logger when it was made: min level kInfo then, same context.
  EXPECT_NE(lines[3].find(" INFO coordinator from net: peer 3 refused node=17"), std::string::npos)
      << lines[3];
}

TEST(Logger, ConcurrentEventsNeverInterleave) {
  std::mutex mu;
  std::vector<std::string> lines;
  Logger log("t", LogFormat::kJson, [&](std::string_view line) {
    // The logger serializes calls; the test's lock only guards `lines` against the checker.
    std::lock_guard lock(mu);
    lines.emplace_back(line);
  });
  constexpr int kThreads = 8, kEach = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([log, t] {
      for (int i = 0; i < kEach; ++i) log.Info("event", {{"thread", t}, {"i", i}});
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(lines.size(), size_t{kThreads} * kEach);
  std::set<std::string> seen;
  for (const std::string& line : lines) {
    ASSERT_EQ(line.front(), '{');
    ASSERT_EQ(line.back(), '}');
    auto t = line.find("\"thread\":");
    ASSERT_NE(t, std::string::npos);
    seen.insert(line.substr(t));
  }
  EXPECT_EQ(seen.size(), size_t{kThreads} * kEach);
}

TEST(Logger, AppendsToAFileAndSaysWhyItCannotOpenOne) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("wc_log_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path file = dir / "agent.log";
  { std::ofstream(file) << "an earlier line\n"; }
  Result<Logger> log = Logger::ToFile("agent", LogFormat::kText, file);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  log->Info("committed", {{"version", 7}});
  log->Debug("dropped below the level");
  // Flushed as written: read back while the logger is still open.
  std::ifstream in(file);
  std::string first, second, third;
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_EQ(first, "an earlier line");
  EXPECT_NE(second.find(" INFO agent committed version=7"), std::string::npos) << second;
  EXPECT_FALSE(std::getline(in, third));
  // A missing directory is made (spdlog does); a path under a regular file cannot be.
  const Result<Logger> bad = Logger::ToFile("agent", LogFormat::kText, file / "x.log");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("log file"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weightcast::metrics
