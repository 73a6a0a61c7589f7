#include "util/host_port.h"

#include <charconv>

#include "util/text.h"

namespace weightcast {

std::string HostPort::ToString() const {
  std::string out = bracketed ? "[" + host + "]" : host;
  if (port) out += ":" + std::to_string(*port);
  return out;
}

Result<HostPort> ParseHostPort(std::string_view text, PortRule rule) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("address '" + EscapeControlBytes(text) + "': " + std::string(why));
  };
  HostPort out;
  std::string_view host = text;
  std::optional<std::string_view> port;
  if (text.starts_with('[')) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("no closing ']'");
    host = text.substr(1, close - 1);
    out.bracketed = true;
    const std::string_view after = text.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return bad("only ':port' may follow ']'");
      port = after.substr(1);
    }
    if (!host.empty() && host.find(':') == std::string_view::npos) {
      return bad("brackets hold an IPv6 address");
    }
  } else if (const size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return bad("an IPv6 address needs brackets: [address]:port");
    }
  }
  if (host.empty()) return bad("no host");
  if (!port) {
    if (rule == PortRule::kRequired) return bad("no port (host:port)");
  } else {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port->data(), port->data() + port->size(), value);
    if (port->empty() || ec != std::errc() || end != port->data() + port->size() || value > 65535) {
      return bad("the port must be a number from 0 to 65535");
    }
    out.port = static_cast<uint16_t>(value);
  }
  out.host = std::string(host);
  return out;
}

}  // namespace weightcast
