// The flags every process of a cluster takes (coordinator, agent, publish, status, rollback):
// where the cluster secret comes from, which cluster, this node's id, and how it logs. One
// definition keeps their names, defaults and help identical across the subcommands.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include <weightcast/status.h>

#include "codec/chunk_codec.h"
#include "net/transport.h"
#include "net/transport_select.h"
#include "origin/http_client.h"
#include "trust/signing_identity.h"
#include "trust/trust_anchor.h"

namespace weightcast::cli {

struct NodeFlags {
  std::string secret_file;  // empty: $WEIGHTCAST_SECRET (never the secret itself on argv)
  std::string cluster = "default";
  uint64_t node_id = 0;  // 0: random
  std::string log_format = "text";
  // Certificate mode (docs/security.md): the cluster CA, its revocation list, and this node's
  // own certificate and key. Without --ca the cluster runs in shared-secret development mode.
  std::string ca_file;
  std::string crl_file;  // empty: crl.pem beside --ca, when there is one
  std::string cert_file;
  std::string key_file;
};

// Reading HTTP(S) origins (docs/origin.md): `publish --from` and agents take the same flags.
struct OriginFlags {
  std::string token_file;  // a bearer token, one line (never the token itself on argv)
  std::string ca_file;     // the origin's CA certificates; empty: the system's
  bool none = false;       // agents: never fetch from an origin
};
// Adds --origin-token-file and --origin-ca (and, for an agent, --no-origin) to `cmd`.
void AddOriginFlags(CLI::App* cmd, OriginFlags& flags, bool agent);
// The origin client the flags describe; null with --no-origin. kInvalidArgument naming a missing
// CA file or a token file that is not one line.
Result<std::shared_ptr<origin::HttpClient>> OriginClient(const OriginFlags& flags);

// The help of every --secret-file flag: the format and minimum are the ones LoadClusterSecret
// enforces, so a user learns them before the error does.
inline constexpr char kSecretFileHelp[] =
    "File holding the cluster secret on its first line, at least 16 bytes; make one with "
    "`weightcast keygen --out FILE` (default: $WEIGHTCAST_SECRET)";

// Adds --secret-file, --cluster, --node-id, --log-format, --ca, --crl, --cert and --key to
// `cmd`, bound to `flags` (which must outlive the parse).
void AddNodeFlags(CLI::App* cmd, NodeFlags& flags);

// The CA this node checks signatures against (--ca, --crl); null without --ca (development
// mode: `warn` is told what that allows). kInvalidArgument naming the file that is wrong.
Result<std::shared_ptr<const trust::TrustAnchor>> LoadTrustAnchor(
    const NodeFlags& flags, const std::function<void(std::string_view)>& warn);
// Certificate mode's mutual TLS for every connection of this process: its own certificate and
// key (--cert, --key: required), the CA (--ca), and a check that each peer's certificate is
// valid now, not revoked, and holds the role the peer claims (agent, publisher, coordinator; a
// tool may hold any). kInvalidArgument naming what is missing.
// `transport`: what --transport asked; UCX connections prove each node's key in their
// handshake instead of TLS (net::KeyProof) and carry no encryption, which `warn` is told.
Result<net::TlsOptions> CertificateModeTls(const NodeFlags& flags,
                                           std::shared_ptr<const trust::TrustAnchor> anchor,
                                           net::TransportKind transport = net::TransportKind::kTcp,
                                           const std::function<void(std::string_view)>& warn = {});

// This node's id: --node-id, or the id --cert binds it to (`ca issue --node-id`); 0 (random)
// when neither names one. kInvalidArgument when the two disagree.
Result<PeerId> NodeIdOf(const NodeFlags& flags);

// This node's certificate and key (--cert, --key) when `required` or given; null otherwise.
// kInvalidArgument when only one of the two is given, or when required and both are missing.
Result<std::shared_ptr<const trust::SigningIdentity>> LoadSigningIdentity(const NodeFlags& flags,
                                                                          bool required);

// --verify-result for every process that receives versions (agent): what a chunk rebuilt from a
// delta payload is checked against (docs/verification.md). `value` starts as the default.
inline constexpr char kVerifyResultHelp[] =
    "What a chunk rebuilt from a delta payload is checked against, after the payload matched its "
    "SHA-256 in the signed manifest: fast (the manifest's XXH3-128 of the chunk, when it has "
    "fast hashes; else sha256) or sha256 (the chunk's SHA-256, always). Whole chunks from peers "
    "are always checked with SHA-256";
void AddVerifyResultFlag(CLI::App* cmd, std::string& value);
// The flag's value as the codec's setting; kInvalidArgument (a flag error) naming the flag.
Result<codec::VerifyResult> ParseVerifyResultFlag(std::string_view value);

// --transport for every process that talks to peers (agent, publish, serve, fetch):
// docs/transport_ucx.md. `value` starts as the default ("tcp").
void AddTransportFlag(CLI::App* cmd, std::string& value);
// The flag's value; kInvalidArgument (a flag error) naming the flag and the choices.
Result<net::TransportKind> ParseTransportFlag(std::string_view value);

// Checks the ip:port in flag `flag` before anything starts: a typo (no port, a port above
// 65535, a host name where an IP address is needed) is a flag error (kInvalidArgument, exit 2)
// naming the flag, not a connection retried forever. Port 0 only when `allow_port_zero` (a
// listen address: any free port).
Status ValidateAddressFlag(std::string_view flag, std::string_view value,
                           bool allow_port_zero = false);
// --coordinator: one ip:port, or several separated by commas (coordinators on etcd:
// the client follows the one that leads). Each is checked as above.
Status ValidateCoordinatorFlag(std::string_view flag, std::string_view value);

// Transport options of a short-lived tool (status, rollback) talking to the coordinator: the
// cluster secret loaded, the cluster id, the node id (random when 0) and the tool role.
Result<net::Options> ToolTransportOptions(const NodeFlags& flags);

}  // namespace weightcast::cli
