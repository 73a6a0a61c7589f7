#include "trust/decision_statement.h"

#include <algorithm>
#include <charconv>

#include "manifest/builder.h"
#include "trust/signed_envelope.h"
#include "util/text.h"

namespace weightcast::trust {
namespace {

constexpr std::string_view kMagic = "WCDC";
constexpr uint8_t kFormat = 1;
constexpr std::string_view kFirstLine = "weightcast decision v1";

std::string Body(const DecisionStatement& d) {
  return std::string(kFirstLine) + "\nchannel " + d.channel + "\nversion " +
         std::to_string(d.version) + "\nroot " + ToHex(d.root) + "\ndecision " +
         (d.commit ? "commit" : "abort") + "\nsequence " + std::to_string(d.sequence) +
         "\nreason " + DecisionReason(d.reason) + "\n";
}

// The value of line `key` ("key value\n", the value possibly empty) at `text`'s front; advances
// past it.
Result<std::string_view> TakeLine(std::string_view& text, std::string_view key) {
  const size_t end = text.find('\n');
  if (end == std::string_view::npos) return Corrupt("decision: a line without its end");
  std::string_view line = text.substr(0, end);
  text.remove_prefix(end + 1);
  if (!line.starts_with(key) || line.size() <= key.size() || line[key.size()] != ' ') {
    return Corrupt("decision: expected '" + std::string(key) + " ...'");
  }
  return line.substr(key.size() + 1);
}

Result<uint64_t> ParseNumber(std::string_view text, std::string_view what) {
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    return Corrupt("decision: " + std::string(what) + " is not a number");
  }
  return value;
}

}  // namespace

Result<DecisionStatement> ParseDecisionBody(std::span<const uint8_t> bytes) {
  if (bytes.size() > kMaxDecisionBody) return Corrupt("decision: too long");
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const size_t first = text.find('\n');
  if (first == std::string_view::npos || text.substr(0, first) != kFirstLine) {
    return Corrupt("decision: not a weightcast decision v1");
  }
  text.remove_prefix(first + 1);
  DecisionStatement d;
  WC_ASSIGN_OR_RETURN(std::string_view channel, TakeLine(text, "channel"));
  d.channel = std::string(channel);
  if (!ValidateChannelName(d.channel).ok()) return Corrupt("decision: bad channel");
  WC_ASSIGN_OR_RETURN(std::string_view version, TakeLine(text, "version"));
  WC_ASSIGN_OR_RETURN(d.version, ParseNumber(version, "version"));
  if (d.version == 0) return Corrupt("decision: version 0");
  WC_ASSIGN_OR_RETURN(std::string_view root, TakeLine(text, "root"));
  Result<std::vector<uint8_t>> root_bytes = FromHex(root);
  if (!root_bytes.ok() || root_bytes->size() != d.root.size()) {
    return Corrupt("decision: the root is not 64 hex digits");
  }
  std::copy(root_bytes->begin(), root_bytes->end(), d.root.begin());
  WC_ASSIGN_OR_RETURN(std::string_view kind, TakeLine(text, "decision"));
  if (kind != "commit" && kind != "abort") {
    return Corrupt("decision: neither commit nor abort");
  }
  d.commit = kind == "commit";
  WC_ASSIGN_OR_RETURN(std::string_view sequence, TakeLine(text, "sequence"));
  WC_ASSIGN_OR_RETURN(d.sequence, ParseNumber(sequence, "sequence"));
  // The reason may be empty: "reason \n".
  if (!text.starts_with("reason ") || !text.ends_with('\n')) {
    return Corrupt("decision: expected 'reason ...' last");
  }
  d.reason = std::string(text.substr(7, text.size() - 8));
  if (d.reason.find('\n') != std::string::npos || d.reason.size() > kMaxDecisionReason) {
    return Corrupt("decision: bytes after the reason");
  }
  return d;
}

Result<std::vector<uint8_t>> SignDecision(const DecisionStatement& decision,
                                          const SigningIdentity& coordinator_identity) {
  WC_RETURN_IF_ERROR(ValidateChannelName(decision.channel));
  if (decision.version == 0) return InvalidArgument("decision: version 0");
  const std::string body = Body(decision);
  WC_ASSIGN_OR_RETURN(std::vector<uint8_t> signature, coordinator_identity.Sign(AsBytes(body)));
  return JoinEnvelope(kMagic, kFormat, coordinator_identity.certificate_der(), signature,
                      AsBytes(body));
}

Result<CheckedDecision> VerifyDecision(std::span<const uint8_t> bytes, const TrustAnchor& anchor) {
  WC_ASSIGN_OR_RETURN(EnvelopeParts parts, SplitEnvelope(bytes, kMagic, kFormat, "decision"));
  if (parts.body.size() > kMaxDecisionBody) return Corrupt("decision: too long");
  Result<CertificateInfo> signer =
      anchor.CheckSigned(parts.certificate, parts.body, parts.signature);
  if (!signer.ok()) return signer.status().WithContext("decision");
  if (!signer->roles.coordinator) {
    return Unauthenticated("decision: '" + signer->name + "' (serial " + signer->serial +
                           ", roles: " + signer->roles.ToString() +
                           ") is not a coordinator; decisions are signed by a coordinator");
  }
  WC_ASSIGN_OR_RETURN(DecisionStatement decision, ParseDecisionBody(parts.body));
  return CheckedDecision{std::move(decision), std::move(*signer)};
}

Result<CheckedDecision> DecisionAuthorized(std::span<const uint8_t> statement,
                                           const TrustAnchor& anchor, std::string_view channel,
                                           uint64_t version, bool commit, const Digest* staged_root,
                                           uint64_t taken_sequence) {
  if (statement.empty()) return Unauthenticated("it comes without the coordinator's signature");
  Result<CheckedDecision> checked = VerifyDecision(statement, anchor);
  if (!checked.ok()) return Unauthenticated(checked.status().message());
  const DecisionStatement& d = checked->decision;
  if (d.channel != channel || d.version != version || d.commit != commit) {
    return Unauthenticated("the signed statement is the " + DecisionName(d));
  }
  if (staged_root != nullptr && *staged_root != d.root) {
    return Unauthenticated(
        "the signed statement is about other bytes than the manifest staged (root " +
        ToHex(d.root).substr(0, 16) + ")");
  }
  if (d.sequence < taken_sequence) {
    return Unauthenticated("the signed statement (record " + std::to_string(d.sequence) +
                           ") is older than a decision this node took (record " +
                           std::to_string(taken_sequence) + "): a replay");
  }
  return checked;
}

std::string DecisionReason(std::string_view reason) {
  std::string line(reason.substr(0, kMaxDecisionReason));
  std::replace(line.begin(), line.end(), '\n', ' ');
  return line;
}

std::string DecisionName(const DecisionStatement& decision) {
  return std::string(decision.commit ? "commit" : "abort") + " of " + decision.channel + " v" +
         std::to_string(decision.version);
}

}  // namespace weightcast::trust
