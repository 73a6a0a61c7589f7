#include "trust/signed_manifest.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "hash/digest.h"
#include "manifest/builder.h"
#include "trust/assembled_manifest.h"
#include "trust/signed_envelope.h"

namespace weightcast {
namespace {

constexpr uint8_t kMagic[4] = {'W', 'C', 'S', 'M'};
constexpr uint8_t kSecretFormat = 1;
constexpr uint8_t kCertificateFormat = 2;
constexpr std::string_view kSecretDomain = "weightcast signed manifest v1\n";
constexpr std::string_view kCertificateDomain = "weightcast signed manifest v2\n";
constexpr std::string_view kMagicText = "WCSM";

std::vector<uint8_t> Message(std::string_view domain, std::span<const uint8_t> serialized) {
  std::vector<uint8_t> message;
  message.reserve(domain.size() + serialized.size());
  message.insert(message.end(), domain.begin(), domain.end());
  message.insert(message.end(), serialized.begin(), serialized.end());
  return message;
}

// What the publisher's key signs: the domain, then the body's SHA-256.
std::vector<uint8_t> CertificateMessage(std::span<const uint8_t> serialized) {
  const Digest digest = Sha256(serialized);
  std::vector<uint8_t> message(kCertificateDomain.size() + digest.size());
  std::memcpy(message.data(), kCertificateDomain.data(), kCertificateDomain.size());
  std::memcpy(message.data() + kCertificateDomain.size(), digest.data(), digest.size());
  return message;
}

Result<Manifest> ParseBody(std::span<const uint8_t> serialized) {
  if (serialized.size() > kMaxManifestBytes) {
    return Corrupt("signed manifest: body above the manifest size limit");
  }
  Result<Manifest> manifest = ParseManifest(serialized);
  if (!manifest.ok()) return manifest.status().WithContext("signed manifest");
  return manifest;
}

Result<Manifest> VerifySecretFormat(std::span<const uint8_t> bytes, std::string_view secret) {
  if (bytes.size() < kSignedManifestHeaderSize) {
    return Corrupt("signed manifest: " + std::to_string(bytes.size()) +
                   " bytes is shorter than its header");
  }
  const auto tag = bytes.subspan(5, 32);
  const auto serialized = bytes.subspan(kSignedManifestHeaderSize);
  if (serialized.size() > kMaxManifestBytes) {
    return Corrupt("signed manifest: body above the manifest size limit");
  }
  const Digest expected = HmacSha256(AsBytes(secret), Message(kSecretDomain, serialized));
  if (!ConstantTimeEqual(tag, expected)) {
    return Unauthenticated("signed manifest: tag does not verify with the cluster secret");
  }
  return ParseBody(serialized);
}

Result<Manifest> VerifyCertificateFormat(std::span<const uint8_t> bytes,
                                         const trust::TrustAnchor& anchor) {
  WC_ASSIGN_OR_RETURN(
      trust::EnvelopeParts envelope,
      trust::SplitEnvelope(bytes, kMagicText, kCertificateFormat, "signed manifest"));
  if (envelope.body.size() > kMaxManifestBytes) {
    return Corrupt("signed manifest: body above the manifest size limit");
  }
  Result<trust::CertificateInfo> signer = anchor.CheckSigned(
      envelope.certificate, CertificateMessage(envelope.body), envelope.signature);
  if (!signer.ok()) return signer.status().WithContext("signed manifest");
  WC_ASSIGN_OR_RETURN(Manifest manifest, ParseBody(envelope.body));
  if (!signer->roles.MayPublish(manifest.channel)) {
    return Unauthenticated("signed manifest: '" + signer->name + "' (serial " + signer->serial +
                           ", roles: " + signer->roles.ToString() + ") may not publish on '" +
                           manifest.channel + "'");
  }
  return manifest;
}

}  // namespace

Result<std::vector<uint8_t>> SignManifest(const Manifest& manifest, const ManifestSigner& signer) {
  const std::string serialized = SerializeManifest(manifest);
  if (signer.identity != nullptr) {
    WC_ASSIGN_OR_RETURN(std::vector<uint8_t> signature,
                        signer.identity->Sign(CertificateMessage(AsBytes(serialized))));
    return trust::JoinEnvelope(kMagicText, kCertificateFormat, signer.identity->certificate_der(),
                               signature, AsBytes(serialized));
  }
  const Digest tag =
      HmacSha256(AsBytes(signer.secret), Message(kSecretDomain, AsBytes(serialized)));
  std::vector<uint8_t> out;
  out.reserve(kSignedManifestHeaderSize + serialized.size());
  out.insert(out.end(), std::begin(kMagic), std::end(kMagic));
  out.push_back(kSecretFormat);
  out.insert(out.end(), tag.begin(), tag.end());
  out.insert(out.end(), serialized.begin(), serialized.end());
  return out;
}

Result<Manifest> VerifySignedManifest(std::span<const uint8_t> bytes, const ManifestTrust& trust) {
  if (bytes.size() < 5) {
    return Corrupt("signed manifest: " + std::to_string(bytes.size()) +
                   " bytes is shorter than its header");
  }
  if (!std::equal(std::begin(kMagic), std::end(kMagic), bytes.begin())) {
    return Corrupt("signed manifest: bad magic");
  }
  switch (bytes[4]) {
    case kSecretFormat:
      if (trust.anchor != nullptr) {
        return Unauthenticated(
            "signed manifest: signed with the shared cluster secret, but this node trusts only "
            "publishers certified by the CA '" +
            trust.anchor->ca_name() + "'");
      }
      return VerifySecretFormat(bytes, trust.secret);
    case kCertificateFormat:
      if (trust.anchor == nullptr) {
        return Unauthenticated(
            "signed manifest: signed by a certified publisher, but this node has no CA to check "
            "it against (give it --ca)");
      }
      return VerifyCertificateFormat(bytes, *trust.anchor);
    case kAssembledManifestFormat:
      if (trust.anchor == nullptr) {
        return Unauthenticated(
            "signed manifest: a sharded version of certified parts, but this node has no CA to "
            "check them against (give it --ca)");
      }
      return VerifyAssembledManifest(bytes, *trust.anchor);
    default:
      return Corrupt("signed manifest: unknown format " + std::to_string(bytes[4]));
  }
}

std::vector<uint8_t> SignManifestWithSecret(const Manifest& manifest, std::string_view secret) {
  // Without an identity nothing in SignManifest can fail.
  return SignManifest(manifest, ManifestSigner{secret}).value();
}

Result<Manifest> VerifySignedManifestWithSecret(std::span<const uint8_t> bytes,
                                                std::string_view secret) {
  return VerifySignedManifest(bytes, ManifestTrust{secret});
}

Result<trust::CertificateInfo> ManifestSignerOf(std::span<const uint8_t> bytes) {
  if (bytes.size() < 5 || !std::equal(std::begin(kMagic), std::end(kMagic), bytes.begin())) {
    return Corrupt("signed manifest: bad header");
  }
  if (bytes[4] == kAssembledManifestFormat && bytes.size() > 13) {
    return ManifestSignerOf(bytes.subspan(13));  // rank 0's part (after the part count and size)
  }
  if (bytes[4] != kCertificateFormat) return NotFound("signed with the cluster secret");
  WC_ASSIGN_OR_RETURN(
      trust::EnvelopeParts envelope,
      trust::SplitEnvelope(bytes, kMagicText, kCertificateFormat, "signed manifest"));
  return trust::ReadCertificate(envelope.certificate);
}

}  // namespace weightcast
