#include "node/certificate_mode.h"

#include <string>

#include "trust/authority.h"

namespace weightcast::node {

Result<std::shared_ptr<const trust::TrustAnchor>> LoadTrustAnchor(
    const std::filesystem::path& ca, const std::filesystem::path& crl) {
  std::filesystem::path revocations = crl;
  if (revocations.empty()) {
    const std::filesystem::path beside = ca.parent_path() / trust::kCaCrlFile;
    if (std::filesystem::exists(beside)) revocations = beside;
  }
  return trust::TrustAnchor::Load(ca, revocations);
}

Result<CertificateMode> LoadCertificateMode(const std::filesystem::path& ca,
                                            const std::filesystem::path& crl,
                                            const std::filesystem::path& certificate,
                                            const std::filesystem::path& key) {
  if (certificate.empty() || key.empty()) {
    return InvalidArgument(
        "with a CA every node proves who it is with its own certificate and key "
        "(`weightcast ca issue`)");
  }
  CertificateMode mode;
  WC_ASSIGN_OR_RETURN(mode.anchor, LoadTrustAnchor(ca, crl));
  WC_ASSIGN_OR_RETURN(mode.identity, trust::SigningIdentity::Load(certificate, key));
  mode.tls.enabled = true;
  mode.tls.cert_file = certificate.string();
  mode.tls.key_file = key.string();
  mode.tls.ca_file = ca.string();
  mode.tls.check_peer = PeerCheck(mode.anchor);
  mode.tls.key_proof = KeyProofOf(mode.identity, mode.anchor);
  return mode;
}

std::shared_ptr<const net::KeyProof> KeyProofOf(
    const std::shared_ptr<const trust::SigningIdentity>& identity,
    const std::shared_ptr<const trust::TrustAnchor>& anchor) {
  auto proof = std::make_shared<net::KeyProof>();
  proof->certificate_der.assign(identity->certificate_der().begin(),
                                identity->certificate_der().end());
  proof->sign = [identity](std::span<const uint8_t> message) { return identity->Sign(message); };
  proof->verify = [anchor, check = PeerCheck(anchor)](
                      std::span<const uint8_t> certificate, std::span<const uint8_t> message,
                      std::span<const uint8_t> signature, const net::PeerInfo& claimed) -> Status {
    WC_RETURN_IF_ERROR(anchor->CheckSigned(certificate, message, signature).status());
    return check(certificate, claimed);
  };
  return proof;
}

std::function<Status(std::span<const uint8_t>, const net::PeerInfo&)> PeerCheck(
    std::shared_ptr<const trust::TrustAnchor> anchor) {
  return [anchor = std::move(anchor)](std::span<const uint8_t> der,
                                      const net::PeerInfo& node) -> Status {
    WC_ASSIGN_OR_RETURN(trust::CertificateInfo peer, anchor->Check(der));
    if (peer.node_id.has_value() && *peer.node_id != node.node_id.value()) {
      return Unauthenticated("certificate '" + peer.name + "' (serial " + peer.serial +
                             ") belongs to node " + std::to_string(*peer.node_id) +
                             ", not to node " + std::to_string(node.node_id.value()));
    }
    bool holds = false;
    std::string_view needs;
    switch (node.role) {
      case net::Role::kAgent:
        holds = peer.roles.agent;
        needs = "agent";
        break;
      case net::Role::kPublisher:
        holds = !peer.roles.publisher_channels.empty();
        needs = "publisher";
        break;
      case net::Role::kCoordinator:
        holds = peer.roles.coordinator;
        needs = "coordinator";
        break;
      case net::Role::kTool:
        holds = !peer.roles.empty();
        needs = "any";
        break;
    }
    if (holds) return Status::Ok();
    return Unauthenticated("certificate '" + peer.name + "' (serial " + peer.serial +
                           ", roles: " + peer.roles.ToString() + ") does not hold the " +
                           std::string(needs) + " role its node claims");
  };
}

}  // namespace weightcast::node
