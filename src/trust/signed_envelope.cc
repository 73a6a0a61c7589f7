#include "trust/signed_envelope.h"

#include <algorithm>
#include <string>

#include "trust/certificate.h"
#include "trust/signing_identity.h"

namespace weightcast::trust {

Result<EnvelopeParts> SplitEnvelope(std::span<const uint8_t> bytes, std::string_view magic,
                                    uint8_t format, std::string_view what) {
  const size_t prefix = magic.size() + 1 + 4;
  if (bytes.size() < prefix) {
    return Corrupt(std::string(what) + ": " + std::to_string(bytes.size()) +
                   " bytes is shorter than its header");
  }
  if (!std::equal(magic.begin(), magic.end(), bytes.begin())) {
    return Corrupt(std::string(what) + ": bad magic");
  }
  if (bytes[magic.size()] != format) {
    return Corrupt(std::string(what) + ": unknown format " + std::to_string(bytes[magic.size()]));
  }
  uint32_t certificate_size = 0;
  for (size_t i = 0; i < 4; ++i) {
    certificate_size |= static_cast<uint32_t>(bytes[magic.size() + 1 + i]) << (8 * i);
  }
  if (certificate_size == 0 || certificate_size > kMaxCertificateBytes) {
    return Corrupt(std::string(what) + ": a certificate of " + std::to_string(certificate_size) +
                   " bytes");
  }
  const size_t body = prefix + certificate_size + kSignatureBytes;
  if (bytes.size() < body) {
    return Corrupt(std::string(what) + ": shorter than its certificate and signature");
  }
  return EnvelopeParts{bytes.subspan(prefix, certificate_size),
                       bytes.subspan(prefix + certificate_size, kSignatureBytes),
                       bytes.subspan(body)};
}

std::vector<uint8_t> JoinEnvelope(std::string_view magic, uint8_t format,
                                  std::span<const uint8_t> certificate,
                                  std::span<const uint8_t> signature,
                                  std::span<const uint8_t> body) {
  std::vector<uint8_t> out;
  out.reserve(magic.size() + 5 + certificate.size() + signature.size() + body.size());
  out.insert(out.end(), magic.begin(), magic.end());
  out.push_back(format);
  const auto size = static_cast<uint32_t>(certificate.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(size >> (8 * i)));
  out.insert(out.end(), certificate.begin(), certificate.end());
  out.insert(out.end(), signature.begin(), signature.end());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

}  // namespace weightcast::trust
