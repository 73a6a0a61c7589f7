// Certificate mode (docs/security.md) from its files, for every process that joins a cluster:
// the CLI's daemons and the public API's Publisher and Subscriber. The CA (and its revocation
// list), this node's certificate and key, and the mutual TLS its connections then run, with the
// check of each peer's certificate against the id and role the peer claims.
#pragma once

#include <filesystem>
#include <memory>

#include <weightcast/status.h>

#include "net/transport.h"
#include "trust/signing_identity.h"
#include "trust/trust_anchor.h"

namespace weightcast::node {

struct CertificateMode {
  std::shared_ptr<const trust::TrustAnchor> anchor;
  std::shared_ptr<const trust::SigningIdentity> identity;  // signs a publisher's versions
  net::TlsOptions tls;
};

// The cluster CA with its revocation list: `crl`, or when empty crl.pem beside `ca` if there is
// one (where `weightcast ca` writes it).
Result<std::shared_ptr<const trust::TrustAnchor>> LoadTrustAnchor(const std::filesystem::path& ca,
                                                                  const std::filesystem::path& crl);

// `crl` as for LoadTrustAnchor. kInvalidArgument naming the file that is
// missing or wrong (a key file others can read, a key that is not the certificate's, a CA that is
// not one).
Result<CertificateMode> LoadCertificateMode(const std::filesystem::path& ca,
                                            const std::filesystem::path& crl,
                                            const std::filesystem::path& certificate,
                                            const std::filesystem::path& key);

// The peer check of certificate mode's TLS (net::TlsOptions::check_peer): the certificate is
// valid now and not revoked (`anchor`, whose CRL is re-read as it changes), holds the role the
// peer claims (agent, publisher, coordinator; a tool may hold any), and, when it binds a node id,
// it is the id the peer claims. kUnauthenticated naming what does not hold.
std::function<Status(std::span<const uint8_t>, const net::PeerInfo&)> PeerCheck(
    std::shared_ptr<const trust::TrustAnchor> anchor);

// The handshake's key proof for transports without TLS (net::KeyProof): signs with `identity`;
// a peer's signature must verify with its certificate's key, the certificate with `anchor`
// (TrustAnchor::CheckSigned), and it must hold the role and id the peer claims (PeerCheck).
std::shared_ptr<const net::KeyProof> KeyProofOf(
    const std::shared_ptr<const trust::SigningIdentity>& identity,
    const std::shared_ptr<const trust::TrustAnchor>& anchor);

}  // namespace weightcast::node
