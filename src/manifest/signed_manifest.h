// Authenticated manifests: a manifest as it travels between nodes, with an HMAC-SHA256 tag made
// with the cluster secret. The transport's handshake already authenticates the connection; the
// tag authenticates the manifest itself, so a manifest relayed by any peer (or cached on disk)
// can be checked without trusting whoever handed it on.
//
//   "WCSM" | u8 format (1) | 32-byte tag | serialized manifest (SerializeManifest)
//
// tag = HMAC-SHA256(secret, "weightcast signed manifest v1\n" || serialized manifest).
// The prefix keeps the tag from being valid as any other HMAC the cluster computes.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

#include "manifest/manifest.h"

namespace weightcast {

inline constexpr size_t kSignedManifestHeaderSize = 4 + 1 + 32;

std::vector<uint8_t> SignManifest(const Manifest& manifest, std::string_view secret);

// Checks the tag (constant-time compare) before a single byte of the manifest is parsed, then
// parses and validates it. kUnauthenticated when the tag does not verify, kCorrupt when the
// envelope is malformed or the manifest does not parse.
Result<Manifest> VerifySignedManifest(std::span<const uint8_t> bytes, std::string_view secret);

}  // namespace weightcast
