#include "trust/rollback_order.h"

#include <openssl/rand.h>

#include <charconv>

#include "hash/digest.h"
#include "manifest/builder.h"
#include "trust/signed_envelope.h"
#include "util/text.h"

namespace weightcast::trust {
namespace {

constexpr std::string_view kMagic = "WCRB";
constexpr uint8_t kFormat = 2;
constexpr std::string_view kFirstLine = "weightcast rollback v2";

std::string Body(const RollbackOrder& order) {
  return std::string(kFirstLine) + "\nchannel " + order.channel + "\nfrom " +
         std::to_string(order.from) + "\nversion " + std::to_string(order.version) + "\nissued " +
         std::to_string(order.issued_unix_ms) + "\nnonce " + order.nonce + "\n";
}

// The value of line `key` ("key value\n") at `text`'s front; advances past it.
Result<std::string_view> TakeLine(std::string_view& text, std::string_view key) {
  const size_t end = text.find('\n');
  if (end == std::string_view::npos) return Corrupt("rollback order: a line without its end");
  std::string_view line = text.substr(0, end);
  text.remove_prefix(end + 1);
  if (!line.starts_with(key) || line.size() <= key.size() || line[key.size()] != ' ') {
    return Corrupt("rollback order: expected '" + std::string(key) + " ...'");
  }
  return line.substr(key.size() + 1);
}

template <typename T>
Result<T> ParseNumber(std::string_view text, std::string_view what) {
  T value{};
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    return Corrupt("rollback order: " + std::string(what) + " is not a number");
  }
  return value;
}

Result<RollbackOrder> ParseBody(std::span<const uint8_t> bytes) {
  if (bytes.size() > kMaxRollbackOrderBody) return Corrupt("rollback order: too long");
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const size_t first = text.find('\n');
  if (first == std::string_view::npos || text.substr(0, first) != kFirstLine) {
    return Corrupt("rollback order: not a weightcast rollback v2");
  }
  text.remove_prefix(first + 1);
  RollbackOrder order;
  WC_ASSIGN_OR_RETURN(std::string_view channel, TakeLine(text, "channel"));
  order.channel = std::string(channel);
  if (!ValidateChannelName(order.channel).ok()) return Corrupt("rollback order: bad channel");
  WC_ASSIGN_OR_RETURN(std::string_view from, TakeLine(text, "from"));
  WC_ASSIGN_OR_RETURN(order.from, ParseNumber<uint64_t>(from, "from"));
  WC_ASSIGN_OR_RETURN(std::string_view version, TakeLine(text, "version"));
  WC_ASSIGN_OR_RETURN(order.version, ParseNumber<uint64_t>(version, "version"));
  if (order.version == 0 || order.version >= order.from) {
    return Corrupt("rollback order: version " + std::to_string(order.version) +
                   " is not a version below from " + std::to_string(order.from));
  }
  WC_ASSIGN_OR_RETURN(std::string_view issued, TakeLine(text, "issued"));
  WC_ASSIGN_OR_RETURN(order.issued_unix_ms, ParseNumber<int64_t>(issued, "issued"));
  WC_ASSIGN_OR_RETURN(std::string_view nonce, TakeLine(text, "nonce"));
  if (nonce.size() != 32 || !FromHex(nonce).ok()) {
    return Corrupt("rollback order: the nonce is not 32 hex digits");
  }
  order.nonce = std::string(nonce);
  if (!text.empty()) return Corrupt("rollback order: bytes after the nonce");
  return order;
}

}  // namespace

Result<RollbackOrder> NewRollbackOrder(std::string_view channel, uint64_t from, uint64_t version) {
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  if (version == 0 || version >= from) {
    return InvalidArgument("rollback order: v" + std::to_string(version) +
                           " is not a version below the current v" + std::to_string(from));
  }
  uint8_t nonce[16];
  if (RAND_bytes(nonce, sizeof(nonce)) != 1) return Internal("rollback order: RAND_bytes");
  RollbackOrder order;
  order.channel = std::string(channel);
  order.from = from;
  order.version = version;
  order.issued_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  order.nonce = ToHex(nonce);
  return order;
}

Result<std::vector<uint8_t>> SignRollbackOrder(const RollbackOrder& order,
                                               const SigningIdentity& operator_identity) {
  const std::string body = Body(order);
  WC_ASSIGN_OR_RETURN(std::vector<uint8_t> signature, operator_identity.Sign(AsBytes(body)));
  return JoinEnvelope(kMagic, kFormat, operator_identity.certificate_der(), signature,
                      AsBytes(body));
}

Result<CheckedRollbackOrder> VerifyRollbackOrder(std::span<const uint8_t> bytes,
                                                 const TrustAnchor& anchor) {
  WC_ASSIGN_OR_RETURN(EnvelopeParts parts, SplitEnvelope(bytes, kMagic, kFormat, "rollback order"));
  if (parts.body.size() > kMaxRollbackOrderBody) return Corrupt("rollback order: too long");
  Result<CertificateInfo> signer =
      anchor.CheckSigned(parts.certificate, parts.body, parts.signature);
  if (!signer.ok()) return signer.status().WithContext("rollback order");
  if (!signer->roles.operator_role) {
    return Unauthenticated("rollback order: '" + signer->name + "' (serial " + signer->serial +
                           ", roles: " + signer->roles.ToString() +
                           ") is not an operator; a rollback needs an operator's certificate");
  }
  WC_ASSIGN_OR_RETURN(RollbackOrder order, ParseBody(parts.body));
  return CheckedRollbackOrder{std::move(order), std::move(*signer)};
}

Result<CertificateInfo> RollbackAuthorized(std::span<const uint8_t> order,
                                           const TrustAnchor& anchor, std::string_view channel,
                                           uint64_t target, uint64_t current) {
  const std::string what = "a rollback of " + std::string(channel) + " from v" +
                           std::to_string(current) + " to v" + std::to_string(target);
  if (order.empty()) {
    return Unauthenticated(what + " comes without an operator's order; staying on v" +
                           std::to_string(current));
  }
  Result<CheckedRollbackOrder> checked = VerifyRollbackOrder(order, anchor);
  if (!checked.ok()) {
    return Unauthenticated(what + ": " + checked.status().message());
  }
  const RollbackOrder& o = checked->order;
  if (o.channel != channel || o.version != target || o.from < current) {
    return Unauthenticated(what + ": the operator's order takes " + o.channel + " from v" +
                           std::to_string(o.from) + " to v" + std::to_string(o.version));
  }
  return std::move(checked->signer);
}

}  // namespace weightcast::trust
