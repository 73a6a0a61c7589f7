// JSON parsing for bytes read from files, stricter than nlohmann's defaults. Private to format/.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <weightcast/status.h>
#include <nlohmann/json.hpp>

namespace weightcast::format_internal {

// Offset of the first byte of `text` that is not part of a well-formed UTF-8 sequence (overlong
// forms, surrogates and code points above U+10FFFF are ill-formed), or nullopt if all are.
std::optional<size_t> FirstInvalidUtf8(std::string_view text);

// Parses `text` as one JSON value. Unlike nlohmann::json::parse, which keeps the last of two equal
// keys, a duplicate key in any object is an error: two parsers reading the same file must never
// see different tensors. Nesting deeper than `max_depth` arrays/objects is refused early, which
// bounds the work an adversarial header can cause. Errors are kCorrupt with a message that does
// not name the file (callers add it). Never throws.
Result<nlohmann::json> ParseStrictJson(std::string_view text, int max_depth);

// `text` for an error message, unquoted: control and non-ASCII bytes escaped, long text elided.
std::string EscapeForError(std::string_view text, size_t max_chars = 80);

// `text` quoted for an error message: control and non-ASCII bytes escaped, long text elided.
std::string QuoteForError(std::string_view text, size_t max_chars = 80);

}  // namespace weightcast::format_internal
