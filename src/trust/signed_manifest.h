// Authenticated manifests: a manifest as it travels between nodes, with its publisher's
// signature, so a manifest relayed by any peer (or cached on disk) can be checked without
// trusting whoever handed it on. Two envelopes (docs/security.md, docs/p2p.md):
//
//   format 2, certificate mode (the default of a cluster with a CA):
//     "WCSM" | u8 2 | u32 LE certificate size | the publisher's certificate (DER)
//            | 64-byte Ed25519 signature | serialized manifest (SerializeManifest)
//     signature = Ed25519(publisher key, "weightcast signed manifest v2\n" || SHA-256(serialized))
//     (the digest is signed, not the body: Ed25519 hashes its message with SHA-512 once to
//     verify and twice to sign, and SHA-256 with SHA-NI is the faster pass over a manifest of
//     megabytes; docs/BENCHMARKS.md)
//
//   format 3, certificate mode, a sharded version: the ranks' format-2 part manifests, which
//     each reader checks and assembles itself (trust/assembled_manifest.h)
//
//   format 1, shared-secret development mode:
//     "WCSM" | u8 1 | 32-byte tag | serialized manifest
//     tag = HMAC-SHA256(cluster secret, "weightcast signed manifest v1\n" || serialized manifest)
//
// The domain prefixes keep a signature from being valid as any other statement the cluster signs.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

#include "manifest/manifest.h"
#include "trust/signing_identity.h"
#include "trust/trust_anchor.h"

namespace weightcast {

inline constexpr size_t kSignedManifestHeaderSize = 4 + 1 + 32;  // format 1

// How a publisher signs: with its certificate's key when it has an identity, else (development
// mode) with the cluster secret.
struct ManifestSigner {
  std::string_view secret;
  const trust::SigningIdentity* identity = nullptr;
};

// What a node accepts. With an anchor: only format 2, from a certificate the anchor vouches for
// that holds the publisher role for the manifest's channel. Without one (development mode): only
// format 1, with the cluster secret.
struct ManifestTrust {
  std::string_view secret;
  const trust::TrustAnchor* anchor = nullptr;
};

Result<std::vector<uint8_t>> SignManifest(const Manifest& manifest, const ManifestSigner& signer);

// Checks the signature before a byte of the manifest is parsed, then parses and validates it,
// then (format 2) checks the signer's role for its channel. kUnauthenticated naming the reason
// when the signature, the certificate or the role does not hold; kCorrupt when the envelope is
// malformed or the manifest does not parse.
Result<Manifest> VerifySignedManifest(std::span<const uint8_t> bytes, const ManifestTrust& trust);

// Development mode, spelled out: format 1 with the cluster secret (cannot fail), and its check.
std::vector<uint8_t> SignManifestWithSecret(const Manifest& manifest, std::string_view secret);
Result<Manifest> VerifySignedManifestWithSecret(std::span<const uint8_t> bytes,
                                                std::string_view secret);

// Who signed `bytes` (format 2; format 3: rank 0's part): its certificate as it reads, not
// checked. kNotFound for format 1.
Result<trust::CertificateInfo> ManifestSignerOf(std::span<const uint8_t> bytes);

}  // namespace weightcast
