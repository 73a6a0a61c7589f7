#include "store/abort_log.h"

#include <deque>

#include "util/file.h"

namespace weightcast::store {
namespace {

constexpr uint64_t kMaxLogBytes = 64 << 10;
constexpr size_t kMaxReasonBytes = 1024;

std::deque<std::string_view> Lines(std::string_view log) {
  std::deque<std::string_view> lines;
  while (!log.empty()) {
    const size_t nl = log.find('\n');
    std::string_view line = log.substr(0, nl);
    if (!line.empty()) lines.push_back(line);
    if (nl == std::string_view::npos) break;
    log.remove_prefix(nl + 1);
  }
  return lines;
}

}  // namespace

std::optional<std::string> FindAbortReasonIn(std::string_view log, Version version) {
  const std::string prefix = VersionName(version) + " ";
  std::optional<std::string> found;
  for (std::string_view line : Lines(log)) {
    if (line.substr(0, prefix.size()) == prefix) found = std::string(line.substr(prefix.size()));
  }
  return found;
}

std::optional<std::string> FindAbortReason(const ChannelLayout& layout, Version version) {
  Result<std::string> log = ReadFileToString(layout.aborted_file(), kMaxLogBytes);
  if (!log.ok()) return std::nullopt;
  return FindAbortReasonIn(*log, version);
}

Status RecordAbort(const ChannelLayout& layout, Version version, std::string_view reason) {
  std::string clean(reason.substr(0, kMaxReasonBytes));
  for (char& c : clean) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  if (clean.empty()) clean = "dropped";
  Result<std::string> old = ReadFileToString(layout.aborted_file(), kMaxLogBytes);
  std::deque<std::string_view> lines = Lines(old.ok() ? std::string_view(*old) : "");
  while (lines.size() >= kAbortLogLines) lines.pop_front();
  std::string out;
  for (std::string_view line : lines) out.append(line).push_back('\n');
  out += VersionName(version) + " " + clean + "\n";
  return WriteFileAtomic(layout.aborted_file(), out);
}

}  // namespace weightcast::store
