// A sharded version in certificate mode (docs/sharded_publish.md, docs/security.md "Sharded
// publishes"): nobody signs the assembled manifest. The envelope carries every rank's own signed
// part manifest, and each node that reads it (the coordinator, every agent, the publishers)
// checks each part's signature and publisher role for the channel, then assembles the parts
// itself (manifest/part_assembly.h). So the coordinator, which collects the parts, cannot invent
// a byte: every chunk hash comes from a rank's signature. Its one contribution is the delta base
// it paired the parts' deltas with, which only says what to decode onto; a wrong one makes
// payloads decode to bytes that fail the ranks' chunk checks, and the node fetches those chunks
// whole.
//
//   format 3 of the signed manifest (trust/signed_manifest.h):
//     "WCSM" | u8 3 | u32 LE parts W | W x (u32 LE size | the rank's format-2 signed manifest)
//            | u64 LE base version (0: a full version) | 32-byte base root
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <weightcast/status.h>

#include "hash/digest.h"
#include "manifest/manifest.h"
#include "trust/trust_anchor.h"

namespace weightcast {

inline constexpr uint8_t kAssembledManifestFormat = 3;

// The envelope of `parts` (the ranks' signed manifests, rank 0 first) assembled as a delta on
// `base_version` with `base_root` (0: a full version). Nothing is checked here.
std::vector<uint8_t> JoinAssembledManifest(std::span<const std::vector<uint8_t>> parts,
                                           uint64_t base_version, const Digest& base_root);

// Checks every part (VerifySignedManifest's format 2 with `anchor`: signature, certificate,
// publisher role for the channel), that part i is rank i of W parts of one version, then
// assembles them; with a base, every part must be a delta and the assembled version is a delta
// on it. kUnauthenticated when a part's signature or signer does not hold; kCorrupt when the
// envelope or a part is malformed or the parts do not make one version.
Result<Manifest> VerifyAssembledManifest(std::span<const uint8_t> bytes,
                                         const trust::TrustAnchor& anchor);

}  // namespace weightcast
