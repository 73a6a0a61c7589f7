#include "metrics/log.h"

#include <spdlog/logger.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <time.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <mutex>

#include "metrics/registry.h"
#include "util/text.h"

namespace weightcast::metrics {
namespace {

// An spdlog logger that writes each line as given: the line is the whole event, time and level
// included, formatted by Logger::FormatLine.
std::shared_ptr<spdlog::logger> LineLogger(spdlog::sink_ptr sink) {
  sink->set_formatter(std::make_unique<spdlog::pattern_formatter>("%v"));
  auto out = std::make_shared<spdlog::logger>("weightcast", std::move(sink));
  out->set_level(spdlog::level::trace);  // each Logger filters by its own level first
  return out;
}

// Every logger of the process that writes to stderr shares this one, and so one lock.
const std::shared_ptr<spdlog::logger>& StderrLogger() {
  static const std::shared_ptr<spdlog::logger> out =
      LineLogger(std::make_shared<spdlog::sinks::stderr_sink_mt>());
  return out;
}

// A sink that hands each line, without its newline, to a function (tests).
class FunctionSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit FunctionSink(LogSink fn) : fn_(std::move(fn)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    fn_(std::string_view(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}

 private:
  LogSink fn_;
};

spdlog::level::level_enum SpdlogLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

// logfmt: bare when the value is a plain token, else double-quoted with \" \\ \n \t escaped and
// other control bytes as \xNN, so one event stays one line whatever the value holds.
bool NeedsQuotes(std::string_view v) {
  if (v.empty()) return true;
  for (unsigned char c : v) {
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) return true;
  }
  return false;
}

void AppendTextValue(std::string& out, std::string_view v) {
  if (!NeedsQuotes(v)) {
    out += v;
    return;
  }
  out += '"';
  for (unsigned char c : v) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += EscapeControlBytes(std::string_view(reinterpret_cast<const char*>(&c), 1));
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// Keys are ours, but keep them tokens: anything outside [A-Za-z0-9_.-] becomes '_'.
std::string SanitizeKey(std::string_view key) {
  std::string out(key.empty() ? "_" : key);
  for (char& c : out) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-';
    if (!ok) c = '_';
  }
  return out;
}

// A JSON string literal (nlohmann's escaping). Bytes that are not UTF-8 (a file name from a
// foreign system) become U+FFFD so that the line stays valid JSON.
void AppendJsonString(std::string& out, std::string_view s) {
  out +=
      nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool ReservedJsonKey(std::string_view key) {
  return key == "ts" || key == "level" || key == "component" || key == "msg";
}

void AppendFieldText(std::string& out, const LogField& f) {
  out += ' ';
  out += SanitizeKey(f.key);
  out += '=';
  AppendTextValue(out, f.text);
}

void AppendFieldJson(std::string& out, const LogField& f) {
  out += ',';
  // A field may not shadow the event's own keys; it keeps its value under "_key".
  std::string key = SanitizeKey(f.key);
  if (ReservedJsonKey(key)) key = "_" + key;
  AppendJsonString(out, key);
  out += ':';
  switch (f.kind) {
    case LogField::Kind::kInt:
    case LogField::Kind::kUint:
    case LogField::Kind::kBool:
      out += f.text;
      break;
    case LogField::Kind::kDouble:
      // JSON has no NaN or infinities; those go as strings.
      if (f.text == "NaN" || f.text == "+Inf" || f.text == "-Inf") {
        AppendJsonString(out, f.text);
      } else {
        out += f.text;
      }
      break;
    case LogField::Kind::kString:
      AppendJsonString(out, f.text);
      break;
  }
}

}  // namespace

Result<LogFormat> ParseLogFormat(std::string_view text) {
  if (text == "text") return LogFormat::kText;
  if (text == "json") return LogFormat::kJson;
  return InvalidArgument("log format '" + EscapeControlBytes(text) + "': want text or json");
}

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "INFO";
}

LogField::LogField(std::string_view k, double v)
    : key(k), kind(Kind::kDouble), text(FormatValue(v)) {}

std::string FormatTimestamp(std::chrono::system_clock::time_point time) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
  time_t seconds = static_cast<time_t>(ms / 1000);
  long millis = static_cast<long>(ms % 1000);
  if (millis < 0) {  // before 1970: floor, not truncate
    millis += 1000;
    --seconds;
  }
  struct tm tm {};
  gmtime_r(&seconds, &tm);
  char buf[96];  // room for any int the format could meet (GCC checks)
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
  return buf;
}

std::string Logger::FormatLine(LogFormat format, std::chrono::system_clock::time_point time,
                               LogLevel level, std::string_view component, std::string_view msg,
                               std::span<const LogField> context,
                               std::span<const LogField> fields) {
  std::string out;
  if (format == LogFormat::kJson) {
    std::string level_name(LogLevelName(level));
    for (char& c : level_name) c = static_cast<char>(c - 'A' + 'a');
    out += "{\"ts\":\"";
    out += FormatTimestamp(time);
    out += "\",\"level\":\"";
    out += level_name;
    out += "\",\"component\":";
    AppendJsonString(out, component);
    out += ",\"msg\":";
    AppendJsonString(out, msg);
    for (const LogField& f : context) AppendFieldJson(out, f);
    for (const LogField& f : fields) AppendFieldJson(out, f);
    out += '}';
    return out;
  }
  out += FormatTimestamp(time);
  out += ' ';
  out += LogLevelName(level);
  out += ' ';
  out += EscapeControlBytes(component);
  out += ' ';
  // The message is free text (spaces allowed) but must stay on one line.
  out += EscapeControlBytes(msg);
  for (const LogField& f : context) AppendFieldText(out, f);
  for (const LogField& f : fields) AppendFieldText(out, f);
  return out;
}

Logger::Logger(std::string component, LogFormat format)
    : Logger(std::move(component), format, StderrLogger()) {}

Logger::Logger(std::string component, LogFormat format, LogSink sink)
    : Logger(std::move(component), format,
             LineLogger(std::make_shared<FunctionSink>(std::move(sink)))) {}

Logger::Logger(std::string component, LogFormat format, std::shared_ptr<spdlog::logger> out)
    : component_(std::move(component)),
      format_(format),
      out_(std::move(out)),
      context_(std::make_shared<const std::vector<LogField>>()) {}

Result<Logger> Logger::ToFile(std::string component, LogFormat format,
                              const std::filesystem::path& file) {
  try {
    std::shared_ptr<spdlog::logger> out =
        LineLogger(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file.string(), false));
    out->flush_on(spdlog::level::trace);  // a crash loses no line already logged
    return Logger(std::move(component), format, std::move(out));
  } catch (const spdlog::spdlog_ex& e) {
    return Unavailable("log file " + file.string() + ": " + e.what());
  }
}

Logger Logger::With(std::initializer_list<LogField> fields) const {
  Logger copy = *this;
  auto context = std::make_shared<std::vector<LogField>>(*context_);
  context->insert(context->end(), fields.begin(), fields.end());
  copy.context_ = std::move(context);
  return copy;
}

void Logger::Log(LogLevel level, std::string_view msg, std::span<const LogField> fields) const {
  if (level < min_level_) return;
  const std::string line = FormatLine(format_, std::chrono::system_clock::now(), level, component_,
                                      msg, *context_, fields);
  out_->log(SpdlogLevel(level), std::string_view(line));
}

std::function<void(std::string_view)> Logger::AsLineFn() const {
  return [logger = *this](std::string_view line) { logger.Info(line); };
}

}  // namespace weightcast::metrics
