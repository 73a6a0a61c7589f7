// ParseHostPort (util/host_port.h) on arbitrary bytes: an address from a flag, a file or a peer's
// advertisement. What parses must print back to text that parses to the same parts.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "util/host_port.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const auto rule : {weightcast::PortRule::kRequired, weightcast::PortRule::kOptional}) {
    auto parsed = weightcast::ParseHostPort(text, rule);
    if (!parsed.ok()) continue;
    auto again = weightcast::ParseHostPort(parsed->ToString(), rule);
    if (!again.ok() || again->host != parsed->host || again->port != parsed->port ||
        again->bracketed != parsed->bracketed) {
      std::abort();
    }
  }
  return 0;
}
