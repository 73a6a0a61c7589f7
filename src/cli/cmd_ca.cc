// weightcast ca   the cluster CA (docs/security.md): make it, issue node certificates that name
// their roles, revoke them, and show what a certificate says. OpenSSL underneath; keys are
// Ed25519 and their files mode 0600.
//
//   weightcast ca init   --dir DIR [--name NAME] [--days N]
//   weightcast ca issue  --dir DIR --name NAME --role ROLES --out PREFIX [--days N] [--force]
//   weightcast ca revoke --dir DIR CERT.pem
//   weightcast ca show   CERT.pem
#include <ctime>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "trust/authority.h"
#include "trust/certificate.h"
#include "util/file.h"

namespace weightcast::cli {
namespace {

struct CaFlags {
  std::string dir;
  std::string name;
  std::string roles;
  std::string out;
  std::string certificate;
  int64_t days = 0;
  uint64_t node_id = 0;
  std::vector<std::string> hosts;
  bool force = false;
};

std::string FormatTime(int64_t unix_seconds) {
  const time_t t = static_cast<time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%SZ", &tm);
  return text;
}

Status RunInit(const CaFlags& flags) {
  const int64_t days = flags.days > 0 ? flags.days : 3650;
  WC_ASSIGN_OR_RETURN(
      trust::Authority ca,
      trust::Authority::Create(flags.name.empty() ? "weightcast cluster CA" : flags.name,
                               days * trust::kDay));
  WC_RETURN_IF_ERROR(ca.WriteNew(flags.dir));
  std::cerr << "made a CA in " << flags.dir << ": " << trust::kCaCertificateFile
            << " (give it to every node as --ca), " << trust::kCaKeyFile
            << " (mode 0600; keep it off the fleet), " << trust::kCaCrlFile
            << " (the revocation list, beside ca.pem on every node)\n";
  return Status::Ok();
}

Status RunIssue(const CaFlags& flags) {
  if (flags.days < 0) return InvalidArgument("--days must be positive");
  trust::Roles roles;
  if (!flags.roles.empty() || flags.hosts.empty()) {
    WC_ASSIGN_OR_RETURN(roles, trust::ParseRolesFlag(flags.roles));
  }
  WC_ASSIGN_OR_RETURN(trust::Authority ca, trust::Authority::Open(flags.dir));
  trust::IssueRequest request{.name = flags.name, .roles = roles};
  if (flags.node_id != 0) request.node_id = flags.node_id;
  request.hosts = flags.hosts;
  if (flags.days > 0) request.valid_seconds = flags.days * trust::kDay;
  WC_ASSIGN_OR_RETURN(trust::IssuedCertificate issued, ca.Issue(request));
  const std::string cert_path = flags.out + ".pem";
  const std::string key_path = flags.out + ".key";
  if (!flags.force && std::filesystem::exists(cert_path)) {
    return AlreadyExists(cert_path + " exists; pass --force to replace it");
  }
  WC_RETURN_IF_ERROR(WritePrivateFile(key_path, issued.key_pem, flags.force));
  WC_RETURN_IF_ERROR(WriteFileAtomic(cert_path, issued.certificate_pem));
  std::cout << "issued " << cert_path << " and " << key_path << " (mode 0600) to '" << flags.name
            << "': " << roles.ToString()
            << (flags.node_id != 0 ? ", node " + std::to_string(flags.node_id) : "") << ", serial "
            << issued.serial << "\n";
  return Status::Ok();
}

Status RunRevoke(const CaFlags& flags) {
  WC_ASSIGN_OR_RETURN(trust::Authority ca, trust::Authority::Open(flags.dir));
  Result<std::string> pem = ReadFileToString(flags.certificate, 1 << 20);
  if (!pem.ok()) return InvalidArgument(flags.certificate + ": " + pem.status().message());
  WC_ASSIGN_OR_RETURN(std::string serial, ca.Revoke(*pem));
  WC_RETURN_IF_ERROR(ca.WriteCrl(flags.dir));
  std::cout << "revoked serial " << serial << "; copy " << flags.dir << "/" << trust::kCaCrlFile
            << " over every node's copy (running nodes read it within a second)\n";
  return Status::Ok();
}

Status RunShow(const CaFlags& flags) {
  Result<std::string> pem = ReadFileToString(flags.certificate, 1 << 20);
  if (!pem.ok()) return InvalidArgument(flags.certificate + ": " + pem.status().message());
  Result<trust::CertificateInfo> info = trust::ReadCertificatePem(*pem);
  if (!info.ok()) return info.status().WithContext(flags.certificate);
  std::cout << "name      " << info->name << "\n"
            << "serial    " << info->serial << "\n"
            << "roles     " << info->roles.ToString() << "\n"
            << "node id   " << (info->node_id ? std::to_string(*info->node_id) : "any") << "\n"
            << "expires   " << FormatTime(info->not_after) << "\n";
  return Status::Ok();
}

void SetupCa(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "ca", "The cluster CA: make it, issue node certificates with roles, revoke them");
  cmd->require_subcommand(1);
  auto flags = std::make_shared<CaFlags>();

  CLI::App* init = cmd->add_subcommand("init", "Make a new CA (an Ed25519 key and certificate)");
  init->add_option("--dir", flags->dir, "Directory for ca.pem, ca.key and crl.pem")->required();
  init->add_option("--name", flags->name, "The CA's name (default: weightcast cluster CA)");
  init->add_option("--days", flags->days, "Validity in days (default: 3650)");
  init->callback([flags] { Finish("ca init", RunInit(*flags)); });

  CLI::App* issue =
      cmd->add_subcommand("issue", "Issue a node a certificate and key that name its roles");
  issue->add_option("--dir", flags->dir, "The CA's directory")->required();
  issue->add_option("--name", flags->name, "The node's name (its host, or a person)")->required();
  issue->add_option("--role", flags->roles,
                    "Roles, separated by commas: agent, publisher:CHANNEL, publisher:* (every "
                    "channel), coordinator, operator (required unless --host)");
  issue
      ->add_option("--host", flags->hosts,
                   "A host name or IPv4 address the holder serves TLS under (repeatable): for "
                   "a service clients check by name, such as etcd")
      ->delimiter(',');
  issue->add_option("--out", flags->out, "Write PREFIX.pem and PREFIX.key (mode 0600)")->required();
  issue->add_option("--days", flags->days, "Validity in days (default: 365)");
  issue->add_option("--node-id", flags->node_id,
                    "Bind the certificate to this node id: its holder connects under it only, "
                    "and it becomes the node's default --node-id");
  issue->add_flag("--force", flags->force, "Replace PREFIX.pem and PREFIX.key if they exist");
  issue->callback([flags] { Finish("ca issue", RunIssue(*flags)); });

  CLI::App* revoke = cmd->add_subcommand("revoke", "Add a certificate to the revocation list");
  revoke->add_option("--dir", flags->dir, "The CA's directory")->required();
  revoke->add_option("certificate", flags->certificate, "The certificate (PEM) to revoke")
      ->required();
  revoke->callback([flags] { Finish("ca revoke", RunRevoke(*flags)); });

  CLI::App* show = cmd->add_subcommand("show", "Print a certificate's name, serial and roles");
  show->add_option("certificate", flags->certificate, "A certificate (PEM)")->required();
  show->callback([flags] { Finish("ca show", RunShow(*flags)); });
}

const CommandRegistration kRegistered{"ca", 17, &SetupCa};

}  // namespace
}  // namespace weightcast::cli
