// The attestation digest of a version: what a sampler reports of the bytes it serves, so that the
// coordinator can say which nodes serve exactly the committed version (docs/live.md,
// "Attestation").
//
// The digest is XXH3-128 over the version's chunk checks, in chunk order, each as its 32-byte
// Digest: the manifest's device checks when it has them (so that tensors in GPU memory attest
// where they lie), else its XXH3-128 fast hashes, else its chunk hashes. A sampler
// computes each check from its live tensors (and, for bytes no live tensor holds, from the
// version's files), the coordinator from the signed manifest; equal digests mean every chunk
// check matched. Pure: no I/O.
#pragma once

#include <span>

#include "hash/digest.h"
#include "manifest/manifest.h"

namespace weightcast {

// The algorithm of a chunk check of `manifest`, and the checks it signs.
HashAlgorithm AttestationCheckAlgorithm(const Manifest& manifest);
const std::vector<Digest>& AttestationChecks(const Manifest& manifest);

// XXH3-128 over `checks` in order (16 digest bytes, then 16 zero bytes, like any XXH3-128 Digest).
Digest CombineChunkChecks(std::span<const Digest> checks);

// The digest a sampler holding exactly `manifest`'s bytes reports.
Digest ExpectedAttestation(const Manifest& manifest);

}  // namespace weightcast
