// The cluster CA: certificates it issues are trusted with their roles; certificates from another
// CA, expired or revoked ones are refused with the reason; its files keep their key private.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <thread>

#include "testing/temp_dir.h"
#include "trust/authority.h"
#include "trust/signing_identity.h"
#include "trust/trust_anchor.h"
#include "trust_test_util.h"
#include "util/file.h"

namespace weightcast::trust {
namespace {

using testing::AnchorOf;
using testing::Issue;
using testing::NewAuthority;

TEST(Authority, IssuedCertificatesAreTrustedWithTheirRoles) {
  Authority ca = NewAuthority();
  auto anchor = AnchorOf(ca);
  auto node = Issue(ca, "sampler-7", "agent,publisher:policy");
  Result<CertificateInfo> info = anchor->Check(node->certificate_der());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->name, "sampler-7");
  EXPECT_TRUE(info->roles.agent);
  EXPECT_TRUE(info->roles.MayPublish("policy"));
  EXPECT_EQ(info->serial, node->info().serial);
  EXPECT_GT(info->not_after, 0);
}

TEST(Authority, ACertificateMayBindItsHolderToANodeId) {
  Authority ca = NewAuthority();
  auto bound = Issue(ca, "sampler-9", "agent", 0, kDay, 9001);
  Result<CertificateInfo> info = AnchorOf(ca)->Check(bound->certificate_der());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->node_id, std::optional<uint64_t>(9001));
  EXPECT_TRUE(info->roles.agent);
  EXPECT_EQ(AnchorOf(ca)->Check(Issue(ca, "free", "agent")->certificate_der())->node_id,
            std::nullopt);
}

TEST(Authority, ACertificateFromAnotherCaIsRefused) {
  Authority ours = NewAuthority("ours");
  Authority theirs = NewAuthority("theirs");
  auto stranger = Issue(theirs, "stranger", "publisher:*");
  Result<CertificateInfo> info = AnchorOf(ours)->Check(stranger->certificate_der());
  EXPECT_EQ(info.status().code(), Code::kUnauthenticated);
  EXPECT_NE(info.status().message().find("'stranger'"), std::string::npos)
      << info.status().message();
}

TEST(Authority, AnExpiredOrNotYetValidCertificateIsRefused) {
  Authority ca = NewAuthority();
  auto expired = Issue(ca, "old", "agent", -2 * kDay, kDay);
  Result<CertificateInfo> info = AnchorOf(ca)->Check(expired->certificate_der());
  EXPECT_EQ(info.status().code(), Code::kUnauthenticated);
  EXPECT_NE(info.status().message().find("expired"), std::string::npos) << info.status().message();
  auto early = Issue(ca, "early", "agent", kDay, kDay);
  EXPECT_EQ(AnchorOf(ca)->Check(early->certificate_der()).status().code(), Code::kUnauthenticated);
}

TEST(Authority, ARevokedCertificateIsRefusedOnceTheNewListIsLoaded) {
  Authority ca = NewAuthority();
  auto kept = Issue(ca, "kept", "publisher:policy");
  auto before = AnchorOf(ca);
  // Revoke by the certificate's PEM, as `weightcast ca revoke FILE` does.
  Result<IssuedCertificate> again = ca.Issue({"lost laptop 2", *ParseRolesFlag("agent")});
  ASSERT_TRUE(again.ok());
  Result<std::string> serial = ca.Revoke(again->certificate_pem);
  ASSERT_TRUE(serial.ok()) << serial.status().ToString();
  EXPECT_EQ(*serial, again->serial);
  EXPECT_TRUE(ca.Revoke(again->certificate_pem).ok()) << "revoking twice is not an error";
  EXPECT_EQ(ca.revoked_serials().size(), 1u);
  auto after = AnchorOf(ca);
  auto revoked = SigningIdentity::FromPem(again->certificate_pem, again->key_pem);
  ASSERT_TRUE(revoked.ok());
  EXPECT_TRUE(before->Check((*revoked)->certificate_der()).ok());
  Result<CertificateInfo> refused = after->Check((*revoked)->certificate_der());
  EXPECT_EQ(refused.status().code(), Code::kUnauthenticated);
  EXPECT_NE(refused.status().message().find("revoked"), std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(after->Check(kept->certificate_der()).ok());
}

TEST(Authority, OnlyItsOwnCertificatesCanBeRevokedAndOnlyItsOwnListIsTrusted) {
  Authority ours = NewAuthority("ours");
  Authority theirs = NewAuthority("theirs");
  Result<IssuedCertificate> foreign = theirs.Issue({"x", *ParseRolesFlag("agent")});
  ASSERT_TRUE(foreign.ok());
  EXPECT_EQ(ours.Revoke(foreign->certificate_pem).status().code(), Code::kInvalidArgument);
  Result<std::string> their_crl = theirs.crl_pem();
  ASSERT_TRUE(their_crl.ok());
  auto anchor = TrustAnchor::FromPem(ours.certificate_pem(), *their_crl);
  EXPECT_EQ(anchor.status().code(), Code::kInvalidArgument);
  EXPECT_NE(anchor.status().message().find("not signed by the CA"), std::string::npos);
}

TEST(Authority, BadRequestsAreRefused) {
  Authority ca = NewAuthority();
  EXPECT_EQ(ca.Issue({"", *ParseRolesFlag("agent")}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ca.Issue({"x", Roles{}}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ca.Issue({.name = "x", .roles = *ParseRolesFlag("agent"), .valid_seconds = 0})
                .status()
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(
      ca.Issue({.name = "x", .roles = *ParseRolesFlag("agent"), .node_id = 0}).status().code(),
      Code::kInvalidArgument);
  EXPECT_EQ(Authority::Create("").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(TrustAnchor::FromPem("not pem", "").status().code(), Code::kInvalidArgument);
  // A node certificate is not a CA.
  Result<IssuedCertificate> node = ca.Issue({"x", *ParseRolesFlag("agent")});
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(TrustAnchor::FromPem(node->certificate_pem, "").status().code(),
            Code::kInvalidArgument);
}

TEST(Authority, ItsDirectoryKeepsTheKeyPrivateAndIsNeverReplaced) {
  testing::TempDir dir;
  const auto ca_dir = dir.path() / "ca";
  Authority ca = NewAuthority();
  ASSERT_TRUE(ca.WriteNew(ca_dir).ok());
  struct stat st {};
  ASSERT_EQ(::stat((ca_dir / kCaKeyFile).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(NewAuthority().WriteNew(ca_dir).code(), Code::kAlreadyExists);

  Result<Authority> opened = Authority::Open(ca_dir);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened->certificate_pem(), ca.certificate_pem());
  Result<IssuedCertificate> node = opened->Issue({"n", *ParseRolesFlag("agent")});
  ASSERT_TRUE(node.ok());
  ASSERT_TRUE(opened->Revoke(node->certificate_pem).ok());
  ASSERT_TRUE(opened->WriteCrl(ca_dir).ok());
  // The list survives a reopen, and a node loading the files refuses the revoked certificate.
  Result<Authority> reopened = Authority::Open(ca_dir);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(reopened->revoked_serials(), std::vector<std::string>{node->serial});
  auto anchor = TrustAnchor::Load(ca_dir / kCaCertificateFile, ca_dir / kCaCrlFile);
  ASSERT_TRUE(anchor.ok()) << anchor.status().ToString();
  auto identity = SigningIdentity::FromPem(node->certificate_pem, node->key_pem);
  EXPECT_EQ((*anchor)->Check((*identity)->certificate_der()).status().code(),
            Code::kUnauthenticated);

  ASSERT_EQ(::chmod((ca_dir / kCaKeyFile).c_str(), 0644), 0);
  EXPECT_EQ(Authority::Open(ca_dir).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Authority::Open(dir.path() / "none").status().code(), Code::kInvalidArgument);
}

TEST(SigningIdentity, LoadRefusesAKeyOthersCanReadOrAKeyThatIsNotTheCertificates) {
  testing::TempDir dir;
  Authority ca = NewAuthority();
  Result<IssuedCertificate> a = ca.Issue({"a", *ParseRolesFlag("publisher:p")});
  Result<IssuedCertificate> b = ca.Issue({"b", *ParseRolesFlag("publisher:p")});
  ASSERT_TRUE(a.ok() && b.ok());
  const auto cert = dir.path() / "a.pem";
  const auto key = dir.path() / "a.key";
  const auto other_key = dir.path() / "b.key";
  ASSERT_TRUE(WriteFileAtomic(cert, a->certificate_pem).ok());
  ASSERT_TRUE(WritePrivateFile(key, a->key_pem, false).ok());
  ASSERT_TRUE(WritePrivateFile(other_key, b->key_pem, false).ok());
  EXPECT_TRUE(SigningIdentity::Load(cert, key).ok());
  Result<std::shared_ptr<const SigningIdentity>> mismatched =
      SigningIdentity::Load(cert, other_key);
  EXPECT_EQ(mismatched.status().code(), Code::kInvalidArgument);
  EXPECT_NE(mismatched.status().message().find("not the certificate's"), std::string::npos);
  ASSERT_EQ(::chmod(key.c_str(), 0640), 0);
  Result<std::shared_ptr<const SigningIdentity>> open_key = SigningIdentity::Load(cert, key);
  EXPECT_EQ(open_key.status().code(), Code::kInvalidArgument);
  EXPECT_NE(open_key.status().message().find("chmod 600"), std::string::npos);
}

// A certificate that passed is not verified again while the list and its validity hold, but
// every signature made with it still is, and other certificates are checked on their own.
TEST(TrustAnchor, ACertificateThatPassedIsKeptButEverySignatureIsChecked) {
  Authority ca = NewAuthority();
  auto anchor = TrustAnchor::FromPem(ca.certificate_pem(), *ca.crl_pem());
  ASSERT_TRUE(anchor.ok());
  Result<IssuedCertificate> node = ca.Issue({"trainer", *ParseRolesFlag("publisher:p")});
  auto identity = SigningIdentity::FromPem(node->certificate_pem, node->key_pem);
  const auto der = (*identity)->certificate_der();
  const std::vector<uint8_t> message = {1, 2, 3};
  const std::vector<uint8_t> signature = *(*identity)->Sign(message);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*anchor)->Check(der).ok());
    EXPECT_TRUE((*anchor)->CheckSigned(der, message, signature).ok());
    std::vector<uint8_t> forged = signature;
    forged[i] ^= 1;
    EXPECT_EQ((*anchor)->CheckSigned(der, message, forged).status().code(), Code::kUnauthenticated);
    const std::vector<uint8_t> other_message = {9, 9};
    EXPECT_EQ((*anchor)->CheckSigned(der, other_message, signature).status().code(),
              Code::kUnauthenticated);
  }
  Authority other = NewAuthority("other");
  Result<IssuedCertificate> foreign = other.Issue({"trainer", *ParseRolesFlag("publisher:p")});
  auto intruder = SigningIdentity::FromPem(foreign->certificate_pem, foreign->key_pem);
  EXPECT_EQ((*anchor)->Check((*intruder)->certificate_der()).status().code(),
            Code::kUnauthenticated);
}

}  // namespace
}  // namespace weightcast::trust

namespace weightcast::trust {
namespace {

// A node does not restart to learn of a revocation: a new crl.pem is read within kCrlRecheck.
// A file that does not load leaves the list in force and says why.
TEST(TrustAnchor, ANewRevocationListIsReadWithoutARestart) {
  testing::TempDir dir;
  const auto ca_dir = dir.path() / "ca";
  Authority ca = NewAuthority();
  ASSERT_TRUE(ca.WriteNew(ca_dir).ok());
  Result<IssuedCertificate> node = ca.Issue({"stolen", *ParseRolesFlag("publisher:p")});
  ASSERT_TRUE(node.ok());
  auto identity = SigningIdentity::FromPem(node->certificate_pem, node->key_pem);
  auto anchor = TrustAnchor::Load(ca_dir / kCaCertificateFile, ca_dir / kCaCrlFile);
  ASSERT_TRUE(anchor.ok()) << anchor.status().ToString();
  const auto der = (*identity)->certificate_der();
  ASSERT_TRUE((*anchor)->Check(der).ok());

  ASSERT_TRUE(WriteFileAtomic(ca_dir / kCaCrlFile, "not a CRL").ok());
  std::this_thread::sleep_for(TrustAnchor::kCrlRecheck + std::chrono::milliseconds(100));
  EXPECT_TRUE((*anchor)->Check(der).ok()) << "a bad file must not drop the list in force";
  EXPECT_NE((*anchor)->crl_error().find("holds no PEM CRL"), std::string::npos)
      << (*anchor)->crl_error();

  ASSERT_TRUE(ca.Revoke(node->certificate_pem).ok());
  ASSERT_TRUE(ca.WriteCrl(ca_dir).ok());
  std::this_thread::sleep_for(TrustAnchor::kCrlRecheck + std::chrono::milliseconds(100));
  Result<CertificateInfo> refused = (*anchor)->Check(der);
  EXPECT_EQ(refused.status().code(), Code::kUnauthenticated);
  EXPECT_NE(refused.status().message().find("revoked"), std::string::npos);
  EXPECT_EQ((*anchor)->crl_error(), "");
}

}  // namespace
}  // namespace weightcast::trust
