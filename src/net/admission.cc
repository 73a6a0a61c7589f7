#include "net/admission.h"

namespace weightcast::net {

std::optional<Displacement> PickDisplaced(std::span<const HandshakeSlot> pending,
                                          std::string_view source, const Options& options) {
  uint32_t silent_from_source = 0;
  std::optional<size_t> oldest_silent_from_source, oldest_silent;
  for (size_t i = 0; i < pending.size(); ++i) {
    const HandshakeSlot& p = pending[i];
    if (!p.silent) continue;
    if (!oldest_silent) oldest_silent = i;
    if (p.source == source) {
      if (!oldest_silent_from_source && p.age >= options.silent_grace) {
        oldest_silent_from_source = i;
      }
      ++silent_from_source;
    }
  }
  const uint32_t per_source = options.max_silent_handshakes_per_source;
  if (per_source > 0 && silent_from_source >= per_source && oldest_silent_from_source) {
    return Displacement{*oldest_silent_from_source,
                        Unavailable("displaced by a newer connection: too many silent "
                                    "connections from " +
                                    std::string(source) + " in the handshake (" +
                                    std::to_string(per_source) + ")")};
  }
  if (pending.empty() || pending.size() < options.max_pending_handshakes) return std::nullopt;
  return Displacement{oldest_silent.value_or(0),
                      Unavailable("displaced by a newer connection: too many connections in the "
                                  "handshake (" +
                                  std::to_string(options.max_pending_handshakes) + ")")};
}

}  // namespace weightcast::net
