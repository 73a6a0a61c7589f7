// The one parser of "host:port" (an address given on the command line, in a file or by a peer):
// "host:port", "1.2.3.4:port" or "[v6]:port". What a caller needs beyond the form (a numeric
// host, a port other than 0, a name resolved) it checks itself on the parsed parts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <weightcast/status.h>

namespace weightcast {

struct HostPort {
  std::string host;              // without the brackets of an IPv6 literal
  std::optional<uint16_t> port;  // absent only where the port is optional and not given
  bool bracketed = false;        // "[v6]:port": the host is an IPv6 literal

  // host:port again, with the brackets an IPv6 host needs ("host" alone without a port).
  std::string ToString() const;
};

enum class PortRule {
  kRequired,  // "host" alone is refused
  kOptional,  // "host" alone parses with no port
};

// kInvalidArgument naming what is wrong ("no port", "no closing ']'", "the port must be a number
// from 0 to 65535", ...) and quoting `text`. An IPv6 literal needs its brackets: "::1:80" is
// refused rather than guessed.
Result<HostPort> ParseHostPort(std::string_view text, PortRule rule = PortRule::kRequired);

}  // namespace weightcast
