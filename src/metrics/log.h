// A small structured logger: one line per event on stderr, in text or JSON.
//
//   text: 2026-11-29T13:00:00.123Z INFO agent committed version version=7 path="/srv/a b"
//   json: {"ts":"2026-11-29T13:00:00.123Z","level":"info","component":"agent",
//          "msg":"committed version","version":7,"path":"/srv/a b"}     (one line)
//
//   metrics::Logger log("agent", metrics::LogFormat::kJson);
//   log.Info("listening", {{"address", listener->address()}, {"peers", 6}});
//   net_options.log = log.AsLineFn();   // transport lines become Info events
//
// A Logger is a cheap value (copy it into threads); every copy writes to the same sink. Logging
// is thread-safe: a line is formatted first, then handed whole to an spdlog sink (stderr, a file
// or a callback), which writes it under the sink's lock, so lines from different threads never
// interleave. Every logger writing to stderr shares one sink.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

namespace spdlog {
class logger;
}  // namespace spdlog

namespace weightcast::metrics {

enum class LogFormat { kText, kJson };
// "text" or "json" (the --log-format flag).
Result<LogFormat> ParseLogFormat(std::string_view text);

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
std::string_view LogLevelName(LogLevel level);  // "DEBUG", "INFO", "WARN", "ERROR"

// One key=value of an event. Numbers and booleans stay numbers in JSON; everything else is a
// string.
struct LogField {
  enum class Kind { kString, kInt, kUint, kDouble, kBool };

  LogField(std::string_view k, std::string_view v) : key(k), kind(Kind::kString), text(v) {}
  LogField(std::string_view k, const char* v) : LogField(k, std::string_view(v)) {}
  LogField(std::string_view k, const std::string& v) : LogField(k, std::string_view(v)) {}
  LogField(std::string_view k, bool v) : key(k), kind(Kind::kBool), text(v ? "true" : "false") {}
  template <std::signed_integral T>
  LogField(std::string_view k, T v) : key(k), kind(Kind::kInt), text(std::to_string(v)) {}
  template <std::unsigned_integral T>
  requires(!std::same_as<T, bool>) LogField(std::string_view k, T v)
      : key(k), kind(Kind::kUint), text(std::to_string(v)) {}
  LogField(std::string_view k, double v);

  std::string key;
  Kind kind;
  std::string text;  // the value as text (numbers already formatted)
};

// Where formatted lines go (without the trailing newline). Called under its sink's lock.
using LogSink = std::function<void(std::string_view line)>;

class Logger {
 public:
  // Writes to stderr. `component` names the daemon or subsystem ("agent", "coordinator").
  explicit Logger(std::string component, LogFormat format = LogFormat::kText);
  // Writes to `sink` instead (tests).
  Logger(std::string component, LogFormat format, LogSink sink);
  // Appends to `file` (created when missing), each line flushed as it is written.
  static Result<Logger> ToFile(std::string component, LogFormat format,
                               const std::filesystem::path& file);

  // A logger that adds `fields` to every event (e.g. {{"node", 17}}), same sink and level.
  Logger With(std::initializer_list<LogField> fields) const;
  // Events below `level` are dropped (default kInfo).
  void set_min_level(LogLevel level) { min_level_ = level; }
  LogLevel min_level() const { return min_level_; }

  void Debug(std::string_view msg, std::initializer_list<LogField> fields = {}) const {
    Log(LogLevel::kDebug, msg, fields);
  }
  void Info(std::string_view msg, std::initializer_list<LogField> fields = {}) const {
    Log(LogLevel::kInfo, msg, fields);
  }
  void Warn(std::string_view msg, std::initializer_list<LogField> fields = {}) const {
    Log(LogLevel::kWarn, msg, fields);
  }
  void Error(std::string_view msg, std::initializer_list<LogField> fields = {}) const {
    Log(LogLevel::kError, msg, fields);
  }
  void Log(LogLevel level, std::string_view msg, std::span<const LogField> fields) const;
  void Log(LogLevel level, std::string_view msg, std::initializer_list<LogField> fields) const {
    Log(level, msg, std::span<const LogField>(fields.begin(), fields.size()));
  }

  // A free-form line from a library that logs plain text (net::LogFn) becomes an Info event
  // with that line as its message.
  void operator()(std::string_view line) const { Info(line); }
  // The same as a std::function, to assign to net::Options::log and the like.
  std::function<void(std::string_view)> AsLineFn() const;

  const std::string& component() const { return component_; }
  LogFormat format() const { return format_; }

  // The line for one event (no trailing newline), for tests and other writers.
  static std::string FormatLine(LogFormat format, std::chrono::system_clock::time_point time,
                                LogLevel level, std::string_view component, std::string_view msg,
                                std::span<const LogField> context,
                                std::span<const LogField> fields);

 private:
  std::string component_;
  LogFormat format_;
  LogLevel min_level_ = LogLevel::kInfo;
  Logger(std::string component, LogFormat format, std::shared_ptr<spdlog::logger> out);

  std::shared_ptr<spdlog::logger> out_;
  std::shared_ptr<const std::vector<LogField>> context_;
};

// "2026-11-29T13:00:00.123Z": UTC, milliseconds.
std::string FormatTimestamp(std::chrono::system_clock::time_point time);

}  // namespace weightcast::metrics
