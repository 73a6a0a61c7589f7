#include "format/strict_json.h"

#include <cstdint>
#include <cstdio>
#include <set>
#include <vector>

namespace weightcast::format_internal {
namespace {

// Thrown from the parser callback to stop parsing; caught in ParseStrictJson and never escapes.
struct StopParsing {
  std::string message;
};

}  // namespace

std::optional<size_t> FirstInvalidUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = s[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    uint8_t lo = 0x80;  // bounds of the second byte, narrowed to exclude overlongs and surrogates
    uint8_t hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      length = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      length = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      length = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (n - i < length) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < length; ++k) {
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    }
    i += length;
  }
  return std::nullopt;
}

std::string EscapeForError(std::string_view text, size_t max_chars) {
  std::string out;
  size_t shown = 0;
  for (char c : text) {
    if (shown == max_chars) {
      out += "...";
      break;
    }
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7F || c == '"' || c == '\\') {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\x%02x", byte);
        out += buf;
      }
    } else {
      out += c;
    }
    ++shown;
  }
  return out;
}

std::string QuoteForError(std::string_view text, size_t max_chars) {
  return "\"" + EscapeForError(text, max_chars) + "\"";
}

Result<nlohmann::json> ParseStrictJson(std::string_view text, int max_depth) {
  using Json = nlohmann::json;
  // One key set per open object, innermost last.
  std::vector<std::set<std::string>> open_objects;
  int depth = 0;
  Json::parser_callback_t callback = [&](int /*nlohmann_depth*/, Json::parse_event_t event,
                                         Json& parsed) -> bool {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (++depth > max_depth) {
          throw StopParsing{"JSON nests deeper than " + std::to_string(max_depth) + " levels"};
        }
        if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        --depth;
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::array_end:
        --depth;
        break;
      case Json::parse_event_t::key:
        if (!open_objects.empty() && parsed.is_string()) {
          const auto& key = parsed.get_ref<const std::string&>();
          if (!open_objects.back().insert(key).second) {
            throw StopParsing{"duplicate key " + QuoteForError(key)};
          }
        }
        break;
      case Json::parse_event_t::value:
        break;
    }
    return true;
  };
  // nlohmann stops at a NUL byte as if the input ended there, which would let bytes after it pass
  // unread. JSON never allows a raw NUL (inside strings it must be escaped), so refuse it here.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return Corrupt("invalid JSON: NUL byte at byte " + std::to_string(nul));
  }
  try {
    return Json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                       /*ignore_comments=*/false);
  } catch (const StopParsing& stop) {
    return Corrupt(stop.message);
  } catch (const Json::parse_error& e) {
    // e.what() quotes the bytes it last read, which may be anything; report the position only,
    // plus nlohmann's description with its prefix dropped.
    std::string what = e.what();
    const size_t colon = what.find(": ");
    std::string detail = colon == std::string::npos ? std::string() : what.substr(colon + 2);
    const size_t last_read = detail.find("; last read");
    if (last_read != std::string::npos) detail.resize(last_read);
    return Corrupt("invalid JSON at byte " + std::to_string(e.byte) +
                   (detail.empty() ? "" : ": " + EscapeForError(detail, 160)));
  } catch (const Json::exception& e) {
    return Corrupt(std::string("invalid JSON: ") + EscapeForError(e.what(), 160));
  }
}

}  // namespace weightcast::format_internal
