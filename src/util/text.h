// Small text helpers: hex, human-readable sizes and durations, size parsing for flags.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

namespace weightcast {

std::string ToHex(std::span<const uint8_t> bytes);
Result<std::vector<uint8_t>> FromHex(std::string_view hex);

// "1.50 GiB", "512 B".
std::string FormatBytes(uint64_t bytes);

// "[4096, 11008]": a tensor shape (or any list of sizes) for messages and tables.
std::string FormatShape(std::span<const uint64_t> shape);

// Control bytes (below 0x20, and 0x7f) as \xNN, so a name read from a file cannot move the
// terminal's cursor or forge a line of output.
std::string EscapeControlBytes(std::string_view text);

// Parses "4194304", "4MiB", "4M" (binary), "1.5GB" (decimal), "10k". Rejects negatives,
// garbage and overflow with a message naming the input.
Result<uint64_t> ParseSize(std::string_view text);

// Parses a duration for flags: "250ms", "3s", "1.5s", "2m", "1h", "10us"; a bare number is
// seconds. Rejects negatives, garbage and overflow with a message naming the input.
Result<std::chrono::nanoseconds> ParseDuration(std::string_view text);

}  // namespace weightcast
