#include "util/text.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace weightcast {

std::string ToHex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

Result<std::vector<uint8_t>> FromHex(std::string_view hex) {
  if (hex.size() % 2 != 0) return InvalidArgument("hex string has odd length");
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return InvalidArgument("not a hex digit in '" + std::string(hex) + "'");
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return out;
}

std::string FormatShape(std::span<const uint64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string EscapeControlBytes(std::string_view text) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      out += "\\x";
      out += kDigits[byte >> 4];
      out += kDigits[byte & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 5) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[unit]);
  return buf;
}

namespace {

// A flag value's leading decimal number and the unit text after it, for ParseSize and
// ParseDuration; the error names the input and `examples`.
struct NumberAndUnit {
  double value = 0;
  std::string_view unit;
};
Result<NumberAndUnit> SplitNumberAndUnit(std::string_view text, std::string_view kind,
                                         std::string_view examples) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument(std::string(kind) + " '" + std::string(text) + "': " + std::string(why) +
                           " (examples: " + std::string(examples) + ")");
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0) return bad("does not start with a number");
  std::string number(text.substr(0, i));
  if (number.find('.') != number.rfind('.')) return bad("more than one decimal point");
  try {
    return NumberAndUnit{std::stod(number), text.substr(i)};
  } catch (...) {
    return bad("not a number");
  }
}

}  // namespace

Result<uint64_t> ParseSize(std::string_view text) {
  constexpr std::string_view kExamples = "4096, 4MiB, 1.5GB, 10k";
  auto bad = [&](std::string_view why) {
    return InvalidArgument("size '" + std::string(text) + "': " + std::string(why) +
                           " (examples: " + std::string(kExamples) + ")");
  };
  WC_ASSIGN_OR_RETURN(NumberAndUnit split, SplitNumberAndUnit(text, "size", kExamples));
  const double value = split.value;
  std::string unit;
  for (char c : split.unit) {
    if (c != ' ') unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  double mult = 1;
  if (unit.empty() || unit == "b")
    mult = 1;
  else if (unit == "k" || unit == "kib")
    mult = 1024.0;
  else if (unit == "m" || unit == "mib")
    mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb")
    mult = 1e3;
  else if (unit == "mb")
    mult = 1e6;
  else if (unit == "gb")
    mult = 1e9;
  else if (unit == "tb")
    mult = 1e12;
  else
    return bad("unknown unit '" + unit + "'");
  double bytes = value * mult;
  if (!std::isfinite(bytes) || bytes >= 1.8e19) return bad("too large");
  return static_cast<uint64_t>(std::llround(bytes));
}

Result<std::chrono::nanoseconds> ParseDuration(std::string_view text) {
  constexpr std::string_view kExamples = "250ms, 3s, 1.5s, 2m";
  auto bad = [&](std::string_view why) {
    return InvalidArgument("duration '" + std::string(text) + "': " + std::string(why) +
                           " (examples: " + std::string(kExamples) + ")");
  };
  WC_ASSIGN_OR_RETURN(NumberAndUnit split, SplitNumberAndUnit(text, "duration", kExamples));
  const double value = split.value;
  std::string_view unit = split.unit;
  double ns_per_unit = 0;
  if (unit.empty() || unit == "s")
    ns_per_unit = 1e9;
  else if (unit == "ms")
    ns_per_unit = 1e6;
  else if (unit == "us")
    ns_per_unit = 1e3;
  else if (unit == "ns")
    ns_per_unit = 1;
  else if (unit == "m")
    ns_per_unit = 60e9;
  else if (unit == "h")
    ns_per_unit = 3600e9;
  else
    return bad("unknown unit '" + std::string(unit) + "'");
  double ns = value * ns_per_unit;
  // 2^62 ns is about 146 years: far beyond any sensible flag, well inside int64.
  if (!(ns < 4.6e18)) return bad("too large");
  return std::chrono::nanoseconds(static_cast<int64_t>(ns));
}

}  // namespace weightcast
