#include "format/strict_json.h"

#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

namespace weightcast::format_internal {

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

namespace {

using Json = nlohmann::json;

// A SAX handler that builds the document like nlohmann's own DOM parser, but stops at a duplicate
// key or at excessive nesting. (nlohmann's callback parser can detect duplicates too, but it
// rescans the parent object at every object end, which is quadratic in the tensor count.)
//
// Invariant: open_ holds the containers being filled, innermost last. Each is stored in its parent
// (or is the root) and nothing is added to a parent while a child is open, so the pointers stay
// valid.
class StrictDomBuilder {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  StrictDomBuilder(Json& root, int max_depth) : root_(root), max_depth_(max_depth) {}

  bool null() { return Add(nullptr) != nullptr; }
  bool boolean(bool v) { return Add(v) != nullptr; }
  bool number_integer(number_integer_t v) { return Add(v) != nullptr; }
  bool number_unsigned(number_unsigned_t v) { return Add(v) != nullptr; }
  bool number_float(number_float_t v, const string_t& /*text*/) { return Add(v) != nullptr; }
  bool string(string_t& v) { return Add(std::move(v)) != nullptr; }
  bool binary(binary_t& v) { return Add(Json::binary(std::move(v))) != nullptr; }

  bool start_object(std::size_t /*size*/) { return Open(Json::object()); }
  bool start_array(std::size_t /*size*/) { return Open(Json::array()); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool key(string_t& key) {
    pending_key_ = std::move(key);
    return true;
  }

  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& e) {
    // e.what() quotes the bytes last read, which may be anything; keep nlohmann's description
    // with its prefix and the quoted token dropped.
    std::string what = e.what();
    const size_t colon = what.find(": ");
    std::string detail = colon == std::string::npos ? std::string() : what.substr(colon + 2);
    const size_t last_read = detail.find("; last read");
    if (last_read != std::string::npos) detail.resize(last_read);
    error_ = "invalid JSON at byte " + std::to_string(position) +
             (detail.empty() ? "" : ": " + EscapeForError(detail, 160));
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  template <typename Value>
  Json* Add(Value&& value) {
    if (open_.empty()) {
      root_ = Json(std::forward<Value>(value));
      return &root_;
    }
    Json& parent = *open_.back();
    if (parent.is_array()) {
      parent.emplace_back(std::forward<Value>(value));
      return &parent.back();
    }
    // One std::map insertion both stores the value and finds a duplicate key: O(n log n) overall.
    auto [it, inserted] = parent.emplace(std::move(pending_key_), std::forward<Value>(value));
    if (!inserted) {
      error_ = "duplicate key " + QuoteForError(it.key());
      return nullptr;
    }
    return &it.value();
  }

  bool Open(Json container) {
    if (static_cast<int>(open_.size()) >= max_depth_) {
      error_ = "JSON nests deeper than " + std::to_string(max_depth_) + " levels";
      return false;
    }
    Json* added = Add(std::move(container));
    if (added == nullptr) return false;
    open_.push_back(added);
    return true;
  }

  bool Close() {
    open_.pop_back();
    return true;
  }

  Json& root_;
  const int max_depth_;
  std::vector<Json*> open_;
  std::string pending_key_;
  std::string error_;
};

}  // namespace

Result<nlohmann::json> ParseStrictJson(std::string_view text, int max_depth) {
  // nlohmann stops at a NUL byte as if the input ended there, which would let bytes after it pass
  // unread. JSON never allows a raw NUL (inside strings it must be escaped), so refuse it here.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return Corrupt("invalid JSON: NUL byte at byte " + std::to_string(nul));
  }
  Json root;
  StrictDomBuilder builder(root, max_depth);
  try {
    const bool ok = Json::sax_parse(text.begin(), text.end(), &builder, Json::input_format_t::json,
                                    /*strict=*/true,
                                    /*ignore_comments=*/false);
    if (!ok) {
      return Corrupt(builder.error().empty() ? std::string("invalid JSON") : builder.error());
    }
  } catch (const Json::exception& e) {
    return Corrupt(std::string("invalid JSON: ") + EscapeForError(e.what(), 160));
  }
  return root;
}

}  // namespace weightcast::format_internal
