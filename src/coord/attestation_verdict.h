// The coordinator's verdict on what a node attested of its live tensors (docs/live.md,
// "Attestation"): the digest it reported against the one the version log derived from the
// version's signed manifest. Pure: no I/O, the time passed in.
#pragma once

#include <optional>
#include <string>

#include "coord/coord.pb.h"
#include "coord/version_log.h"

namespace weightcast::coord {

// Sets `a`'s verdict and unix_ms. `channel`: the channel's state (null: unknown channel);
// `before`: what the node attested last. A report repeated with every heartbeat keeps its first
// verdict and time. Returns what an operator should read in the log ("with a digest that is not
// the version's: ..."), empty for a match or a repeat.
std::string JudgeAttestation(const ChannelState* channel,
                             const std::optional<wire::Attestation>& before, uint64_t now_unix_ms,
                             wire::Attestation& a);

}  // namespace weightcast::coord
