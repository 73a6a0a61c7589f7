#include "manifest/attestation.h"

namespace weightcast {

HashAlgorithm AttestationCheckAlgorithm(const Manifest& manifest) {
  if (manifest.has_device_checks()) return HashAlgorithm::kWeightedSum128;
  return manifest.has_fast_hashes() ? HashAlgorithm::kXxh3_128 : manifest.hash_algorithm;
}

const std::vector<Digest>& AttestationChecks(const Manifest& manifest) {
  if (manifest.has_device_checks()) return manifest.device_checks;
  return manifest.has_fast_hashes() ? manifest.fast_hashes : manifest.chunk_hashes;
}

Digest CombineChunkChecks(std::span<const Digest> checks) {
  Hasher hasher(HashAlgorithm::kXxh3_128);
  for (const Digest& check : checks) hasher.Update(check);
  return hasher.Finish();
}

Digest ExpectedAttestation(const Manifest& manifest) {
  return CombineChunkChecks(AttestationChecks(manifest));
}

}  // namespace weightcast
