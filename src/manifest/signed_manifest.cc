#include "manifest/signed_manifest.h"

#include <algorithm>
#include <string>

#include "hash/digest.h"
#include "manifest/builder.h"

namespace weightcast {
namespace {

constexpr uint8_t kMagic[4] = {'W', 'C', 'S', 'M'};
constexpr uint8_t kFormat = 1;
constexpr std::string_view kDomain = "weightcast signed manifest v1\n";

Digest Tag(std::span<const uint8_t> serialized, std::string_view secret) {
  std::vector<uint8_t> message;
  message.reserve(kDomain.size() + serialized.size());
  message.insert(message.end(), kDomain.begin(), kDomain.end());
  message.insert(message.end(), serialized.begin(), serialized.end());
  return HmacSha256(AsBytes(secret), message);
}

}  // namespace

std::vector<uint8_t> SignManifest(const Manifest& manifest, std::string_view secret) {
  const std::string serialized = SerializeManifest(manifest);
  const Digest tag = Tag(AsBytes(serialized), secret);
  std::vector<uint8_t> out;
  out.reserve(kSignedManifestHeaderSize + serialized.size());
  out.insert(out.end(), std::begin(kMagic), std::end(kMagic));
  out.push_back(kFormat);
  out.insert(out.end(), tag.begin(), tag.end());
  out.insert(out.end(), serialized.begin(), serialized.end());
  return out;
}

Result<Manifest> VerifySignedManifest(std::span<const uint8_t> bytes, std::string_view secret) {
  if (bytes.size() < kSignedManifestHeaderSize) {
    return Corrupt("signed manifest: " + std::to_string(bytes.size()) +
                   " bytes is shorter than its header");
  }
  if (!std::equal(std::begin(kMagic), std::end(kMagic), bytes.begin())) {
    return Corrupt("signed manifest: bad magic");
  }
  if (bytes[4] != kFormat) {
    return Corrupt("signed manifest: unknown format " + std::to_string(bytes[4]));
  }
  const auto tag = bytes.subspan(5, 32);
  const auto serialized = bytes.subspan(kSignedManifestHeaderSize);
  if (serialized.size() > kMaxManifestBytes) {
    return Corrupt("signed manifest: body above the manifest size limit");
  }
  const Digest expected = Tag(serialized, secret);
  if (!ConstantTimeEqual(tag, expected)) {
    return Unauthenticated("signed manifest: tag does not verify with the cluster secret");
  }
  Result<Manifest> manifest = ParseManifest(serialized);
  if (!manifest.ok()) return manifest.status().WithContext("signed manifest");
  return manifest;
}

}  // namespace weightcast
