#include "cli/node_flags.h"

#include <arpa/inet.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "net/handshake.h"
#include "node/certificate_mode.h"
#include "util/file.h"
#include "util/host_port.h"

namespace weightcast::cli {

void AddOriginFlags(CLI::App* cmd, OriginFlags& flags, bool agent) {
  const std::string when = agent ? "" : "--from: ";
  cmd->add_option("--origin-token-file", flags.token_file,
                  when + "a file holding a bearer token sent to HTTP(S) origins (never logged)");
  cmd->add_option("--origin-ca", flags.ca_file,
                  when +
                      "CA certificates (PEM) of the origin's TLS certificate (default: the "
                      "system's)");
  if (agent) {
    cmd->add_flag("--no-origin", flags.none,
                  "Never fetch from an HTTP(S) origin; by default the agent fetches the share of "
                  "an origin version's chunks the coordinator grants it (docs/origin.md)");
  }
}

// The token comes from a file: a flag's value would show in `ps` and shell history.
Result<std::shared_ptr<origin::HttpClient>> OriginClient(const OriginFlags& flags) {
  if (flags.none) return std::shared_ptr<origin::HttpClient>();
  origin::HttpOptions http;
  if (!flags.ca_file.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(flags.ca_file, ec)) {
      return InvalidArgument("--origin-ca " + flags.ca_file + ": no such file");
    }
    http.ca_file = flags.ca_file;
  }
  if (!flags.token_file.empty()) {
    WC_ASSIGN_OR_RETURN(std::string token, ReadFileToString(flags.token_file, 64 << 10));
    while (!token.empty() &&
           (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) {
      token.pop_back();
    }
    if (token.empty() || token.find_first_of("\r\n") != std::string::npos) {
      return InvalidArgument("--origin-token-file " + flags.token_file +
                             ": expected one line holding the token");
    }
    http.bearer_token = std::move(token);
  }
  return std::make_shared<origin::HttpClient>(std::move(http));
}

void AddNodeFlags(CLI::App* cmd, NodeFlags& flags) {
  cmd->add_option("--secret-file", flags.secret_file, kSecretFileHelp);
  cmd->add_option("--cluster", flags.cluster, "Cluster id every node must share")
      ->capture_default_str();
  cmd->add_option("--node-id", flags.node_id, "This node's id (default: random)");
  cmd->add_option("--log-format", flags.log_format, "Log lines on stderr: text or json")
      ->capture_default_str();
  cmd->add_option("--ca", flags.ca_file,
                  "The cluster CA's certificate (`weightcast ca init`): accept only versions "
                  "signed by a publisher it certifies for their channel (default: none, "
                  "shared-secret development mode; docs/security.md)");
  cmd->add_option("--crl", flags.crl_file,
                  "The CA's revocation list (default: crl.pem beside --ca, when it exists)");
  cmd->add_option("--cert", flags.cert_file,
                  "This node's certificate (`weightcast ca issue`): a publisher signs its versions "
                  "with it, an operator its rollbacks");
  cmd->add_option("--key", flags.key_file, "This node's private key (mode 0600), with --cert");
}

Result<std::shared_ptr<const trust::TrustAnchor>> LoadTrustAnchor(
    const NodeFlags& flags, const std::function<void(std::string_view)>& warn) {
  if (flags.ca_file.empty()) {
    if (!flags.crl_file.empty()) return InvalidArgument("--crl needs --ca");
    if (warn) {
      warn(
          "development mode: versions are authenticated with the shared cluster secret only, so "
          "any machine holding it can publish or roll back; give every node --ca "
          "(docs/security.md)");
    }
    return std::shared_ptr<const trust::TrustAnchor>();
  }
  Result<std::shared_ptr<const trust::TrustAnchor>> anchor =
      node::LoadTrustAnchor(flags.ca_file, flags.crl_file);
  if (!anchor.ok()) return InvalidArgument("--ca: " + anchor.status().message());
  return anchor;
}

Result<net::TlsOptions> CertificateModeTls(const NodeFlags& flags,
                                           std::shared_ptr<const trust::TrustAnchor> anchor,
                                           net::TransportKind transport,
                                           const std::function<void(std::string_view)>& warn) {
  if (transport != net::TransportKind::kTcp && warn) {
    warn("--transport " + std::string(net::TransportKindName(transport)) +
         " with --ca: UCX connections prove each node's certificate in their handshake but are "
         "not encrypted; TCP connections run TLS (docs/security.md, \"UCX\")");
  }
  if (flags.cert_file.empty() || flags.key_file.empty()) {
    return InvalidArgument(
        "with --ca every node proves who it is with its own certificate: give --cert and --key "
        "(`weightcast ca issue`)");
  }
  // Loaded here so that a bad pair is a flag error now, not a failed TLS handshake later.
  WC_ASSIGN_OR_RETURN(std::shared_ptr<const trust::SigningIdentity> identity,
                      LoadSigningIdentity(flags, true));
  net::TlsOptions tls;
  tls.key_proof = node::KeyProofOf(identity, anchor);
  tls.enabled = true;
  tls.cert_file = flags.cert_file;
  tls.key_file = flags.key_file;
  tls.ca_file = flags.ca_file;
  tls.check_peer = node::PeerCheck(std::move(anchor));
  return tls;
}

Result<PeerId> NodeIdOf(const NodeFlags& flags) {
  if (flags.cert_file.empty() || flags.key_file.empty()) return PeerId(flags.node_id);
  Result<std::shared_ptr<const trust::SigningIdentity>> identity =
      trust::SigningIdentity::Load(flags.cert_file, flags.key_file);
  if (!identity.ok()) return InvalidArgument("--cert/--key: " + identity.status().message());
  const std::optional<uint64_t> bound = (*identity)->info().node_id;
  if (!bound.has_value()) return PeerId(flags.node_id);
  if (flags.node_id != 0 && flags.node_id != *bound) {
    return InvalidArgument("--node-id " + std::to_string(flags.node_id) +
                           ": --cert belongs to node " + std::to_string(*bound));
  }
  return PeerId(*bound);
}

Result<std::shared_ptr<const trust::SigningIdentity>> LoadSigningIdentity(const NodeFlags& flags,
                                                                          bool required) {
  if (flags.cert_file.empty() != flags.key_file.empty()) {
    return InvalidArgument("--cert and --key go together");
  }
  if (!flags.cert_file.empty() && flags.ca_file.empty()) {
    return InvalidArgument(
        "--cert needs --ca: a certified publisher's versions are checked "
        "against the CA by every node");
  }
  if (flags.cert_file.empty()) {
    if (required) {
      return InvalidArgument(
          "with --ca a publisher signs its versions with its own key: give --cert and --key "
          "(`weightcast ca issue --role publisher:CHANNEL`)");
    }
    return std::shared_ptr<const trust::SigningIdentity>();
  }
  Result<std::shared_ptr<const trust::SigningIdentity>> identity =
      trust::SigningIdentity::Load(flags.cert_file, flags.key_file);
  if (!identity.ok()) return InvalidArgument("--cert/--key: " + identity.status().message());
  return identity;
}

void AddVerifyResultFlag(CLI::App* cmd, std::string& value) {
  cmd->add_option("--verify-result", value, kVerifyResultHelp)->capture_default_str();
}

Result<codec::VerifyResult> ParseVerifyResultFlag(std::string_view value) {
  return codec::ParseVerifyResult(value);
}

void AddTransportFlag(CLI::App* cmd, std::string& value) {
  cmd->add_option("--transport", value,
                  "How peer connections travel: tcp (TCP only), auto (UCX with peers that "
                  "offer it, TCP with the others and when UCX fails), ucx (UCX with peers that "
                  "offer it, no fallback). docs/transport_ucx.md")
      ->capture_default_str();
}

Result<net::TransportKind> ParseTransportFlag(std::string_view value) {
  Result<net::TransportKind> kind = net::ParseTransportKind(value);
  if (!kind.ok()) return InvalidArgument("--transport: " + std::string(kind.status().message()));
  return kind;
}

namespace {

bool IsHostName(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  size_t label = 0;
  for (size_t i = 0; i < host.size(); ++i) {
    const char c = host[i];
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    (c == '-' && label > 0 && i + 1 < host.size() && host[i + 1] != '.');
    if (!ok || ++label > 63) return false;
  }
  return true;
}

}  // namespace

Status ValidateAddressFlag(std::string_view flag, std::string_view full, bool allow_port_zero) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument(std::string(flag) + " '" + std::string(full) + "': " + why);
  };
  // "ip:port,ucx=PORT" (a UCX port as well, docs/transport_ucx.md): the TCP part is checked here.
  Result<std::pair<std::string, std::string>> split = net::SplitTransportAddress(full);
  if (!split.ok()) return InvalidArgument(std::string(flag) + ": " + split.status().message());
  Result<HostPort> parsed = ParseHostPort(split->first);
  if (!parsed.ok()) return InvalidArgument(std::string(flag) + ": " + parsed.status().message());
  if (*parsed->port == 0 && !allow_port_zero) return bad("the port must be from 1 to 65535");
  const std::string& host = parsed->host;
  // An IP address, or a host name the transport resolves at every connect (so only its form
  // is checked here: letters, digits, '-' and '.', labels of 1-63).
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1 ||
      ::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    return Status::Ok();
  }
  if (!IsHostName(host)) return bad("'" + host + "' is neither an IP address nor a host name");
  return Status::Ok();
}

Status ValidateCoordinatorFlag(std::string_view flag, std::string_view value) {
  if (value.empty() || value.front() == ',' || value.back() == ',' ||
      value.find(",,") != std::string_view::npos) {
    return InvalidArgument(std::string(flag) + " '" + std::string(value) +
                           "': expected ip:port or ip:port,ip:port,...");
  }
  std::string_view rest = value;
  while (true) {
    const size_t comma = rest.find(',');
    WC_RETURN_IF_ERROR(ValidateAddressFlag(flag, rest.substr(0, comma)));
    if (comma == std::string_view::npos) return Status::Ok();
    rest.remove_prefix(comma + 1);
  }
}

Result<net::Options> ToolTransportOptions(const NodeFlags& flags) {
  net::Options options;
  WC_ASSIGN_OR_RETURN(options.secret, net::LoadClusterSecret(flags.secret_file));
  if (!flags.ca_file.empty()) {
    WC_ASSIGN_OR_RETURN(std::shared_ptr<const trust::TrustAnchor> anchor,
                        LoadTrustAnchor(flags, nullptr));
    WC_ASSIGN_OR_RETURN(options.tls, CertificateModeTls(flags, std::move(anchor)));
  }
  options.self.cluster_id = flags.cluster;
  options.self.node_id = PeerId(flags.node_id != 0 ? flags.node_id : std::random_device{}());
  options.self.role = net::Role::kTool;
  return options;
}

}  // namespace weightcast::cli
