#include "net/handshake.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "hash/digest.h"
#include "net/wire.pb.h"

namespace weightcast::net {
namespace {

constexpr std::string_view kSecret = "correct horse battery staple";

Frame ToFrame(const OutFrame& out) {
  FrameDecoder decoder(kDefaultMaxFrameBytes);
  std::vector<uint8_t> bytes(out.head.begin(), out.head.begin() + out.head_size);
  bytes.insert(bytes.end(), out.payload.begin(), out.payload.end());
  EXPECT_TRUE(decoder.Feed(bytes).ok());
  auto frames = decoder.TakeFrames();
  EXPECT_EQ(frames.size(), 1u);
  return frames.empty() ? Frame{} : std::move(frames.front());
}

Identity Node(uint64_t id, std::string cluster = "c1") {
  return Identity{.cluster_id = std::move(cluster),
                  .node_id = PeerId(id),
                  .role = Role::kAgent,
                  .protocol_version = kProtocolVersion};
}

// Runs both sides; returns (initiator status, acceptor status).
std::pair<Status, Status> RunBoth(Handshake& a, Handshake& b) {
  auto a_reply = a.OnFrame(ToFrame(b.HelloFrame()));
  auto b_reply = b.OnFrame(ToFrame(a.HelloFrame()));
  if (!a_reply.ok() || !b_reply.ok()) {
    return {a_reply.ok() ? Status::Ok() : a_reply.status(),
            b_reply.ok() ? Status::Ok() : b_reply.status()};
  }
  auto a_done = a.OnFrame(ToFrame(**b_reply));
  auto b_done = b.OnFrame(ToFrame(**a_reply));
  return {a_done.ok() ? Status::Ok() : a_done.status(),
          b_done.ok() ? Status::Ok() : b_done.status()};
}

TEST(Handshake, EstablishesAndLearnsPeerIdentity) {
  Handshake a(Node(1), kSecret, true);
  Identity coord = Node(2);
  coord.role = Role::kCoordinator;
  Handshake b(coord, kSecret, false);
  auto [sa, sb] = RunBoth(a, b);
  ASSERT_TRUE(sa.ok()) << sa.ToString();
  ASSERT_TRUE(sb.ok()) << sb.ToString();
  EXPECT_TRUE(a.established());
  EXPECT_TRUE(b.established());
  EXPECT_EQ(a.peer().node_id, PeerId(2));
  EXPECT_EQ(a.peer().role, Role::kCoordinator);
  EXPECT_EQ(b.peer().node_id, PeerId(1));
}

TEST(Handshake, WrongSecretFailsOnBothSides) {
  Handshake a(Node(1), kSecret, true);
  Handshake b(Node(2), "another secret of enough length", false);
  auto [sa, sb] = RunBoth(a, b);
  EXPECT_EQ(sa.code(), Code::kUnauthenticated);
  EXPECT_EQ(sb.code(), Code::kUnauthenticated);
  EXPECT_EQ(sa.reason(), Reason::kWrongSecret);
  EXPECT_EQ(sb.reason(), Reason::kWrongSecret);
  EXPECT_FALSE(a.established());
  EXPECT_FALSE(b.established());
}

TEST(Handshake, WrongClusterIsRefusedBeforeAuth) {
  Handshake a(Node(1, "c1"), kSecret, true);
  Handshake b(Node(2, "c2"), kSecret, false);
  auto [sa, sb] = RunBoth(a, b);
  EXPECT_EQ(sa.code(), Code::kFailedPrecondition);
  EXPECT_EQ(sa.reason(), Reason::kWrongCluster);
  EXPECT_NE(sb.message().find("cluster"), std::string::npos);
  // The side refused learns the cause from the report's reason field, not from its words.
  wire::ErrorReport report;
  report.set_reason(wire::ErrorReport::REASON_CLUSTER);
  report.set_message("words that say nothing");
  Handshake e(Node(5, "c1"), kSecret, true);
  const Status refused =
      e.OnFrame(ToFrame(OutFrame::Make(FrameType::kError,
                                       [&] {
                                         std::string bytes = report.SerializeAsString();
                                         return std::vector<uint8_t>(bytes.begin(), bytes.end());
                                       }())))
          .status();
  EXPECT_EQ(refused.code(), Code::kAborted);
  EXPECT_EQ(refused.reason(), Reason::kWrongCluster);
}

TEST(Handshake, WrongProtocolVersionIsRefused) {
  Identity old = Node(1);
  old.protocol_version = 0;
  Handshake a(old, kSecret, true);
  Handshake b(Node(2), kSecret, false);
  auto [sa, sb] = RunBoth(a, b);
  EXPECT_EQ(sb.code(), Code::kFailedPrecondition);
  EXPECT_EQ(sb.reason(), Reason::kProtocolVersion);
  EXPECT_NE(sb.message().find("protocol version 0"), std::string::npos);
  // Its report to the other side names the cause in the reason field.
  const Frame report_frame = ToFrame(Handshake::ErrorFrameFor(sb));
  wire::ErrorReport report;
  ASSERT_TRUE(
      report.ParseFromArray(report_frame.body.data(), static_cast<int>(report_frame.body.size())));
  EXPECT_EQ(report.reason(), wire::ErrorReport::REASON_PROTOCOL_VERSION);
}

TEST(Handshake, ReflectedProofDoesNotVerify) {
  // An attacker without the secret connects to b, and replays b's own proof back to b.
  Handshake b(Node(2), kSecret, false);
  Handshake attacker(Node(1), "attacker does not know it", true);
  auto b_auth = b.OnFrame(ToFrame(attacker.HelloFrame()));
  ASSERT_TRUE(b_auth.ok());
  auto result = b.OnFrame(ToFrame(**b_auth));
  EXPECT_EQ(result.status().code(), Code::kUnauthenticated);
}

TEST(Handshake, EchoedNonceIsRefused) {
  std::array<uint8_t, kNonceSize> nonce;
  nonce.fill(7);
  Handshake b(Node(2), kSecret, false, nonce);
  Handshake mirror(Node(1), kSecret, true, nonce);
  auto r = b.OnFrame(ToFrame(mirror.HelloFrame()));
  EXPECT_EQ(r.status().code(), Code::kUnauthenticated);
}

TEST(Handshake, ProofFromAnotherConnectionIsRejected) {
  // Record a's proof on one connection; replay it on a second connection with fresh nonces.
  Handshake a1(Node(1), kSecret, true);
  Handshake b1(Node(2), kSecret, false);
  (void)b1.OnFrame(ToFrame(a1.HelloFrame()));
  auto recorded = a1.OnFrame(ToFrame(b1.HelloFrame()));
  ASSERT_TRUE(recorded.ok());
  Handshake a2(Node(1), kSecret, true);
  Handshake b2(Node(2), kSecret, false);
  ASSERT_TRUE(b2.OnFrame(ToFrame(a2.HelloFrame())).ok());
  EXPECT_EQ(b2.OnFrame(ToFrame(**recorded)).status().code(), Code::kUnauthenticated);
}

// A stand-in for certificates in these tests: a "certificate" is "ROLE:NAME" (the role its
// holder may claim), its "key" an HMAC key only its holder knows, and verify recomputes the HMAC
// (the real KeyProof, with Ed25519 and the CA, is node::KeyProofOf's and is tested there).
KeyProof TestKeyProof(const std::string& certificate, const std::string& key) {
  KeyProof proof;
  proof.certificate_der.assign(certificate.begin(), certificate.end());
  proof.sign = [key](std::span<const uint8_t> message) -> Result<std::vector<uint8_t>> {
    const auto mac = HmacSha256(AsBytes(key), message);
    return std::vector<uint8_t>(mac.begin(), mac.end());
  };
  proof.verify = [](std::span<const uint8_t> der, std::span<const uint8_t> message,
                    std::span<const uint8_t> signature, const PeerInfo& claimed) -> Status {
    const std::string holder(der.begin(), der.end());
    const std::string name = holder.substr(holder.find(':') + 1);
    const auto mac = HmacSha256(AsBytes("key of " + name), message);
    if (!std::equal(mac.begin(), mac.end(), signature.begin(), signature.end())) {
      return Unauthenticated("the signature is not " + name + "'s");
    }
    if (!holder.starts_with(std::string(RoleName(claimed.role)) + ":")) {
      return Unauthenticated(name + " may not claim " + std::string(RoleName(claimed.role)));
    }
    return Status::Ok();
  };
  return proof;
}

TEST(Handshake, KeyProofsAreExchangedAndChecked) {
  const KeyProof alice = TestKeyProof("agent:alice", "key of alice");
  const KeyProof bob = TestKeyProof("agent:bob", "key of bob");
  Handshake a(Node(1), kSecret, true);
  Handshake b(Node(2), kSecret, false);
  a.ProveKeys(&alice);
  b.ProveKeys(&bob);
  auto [sa, sb] = RunBoth(a, b);
  ASSERT_TRUE(sa.ok()) << sa.ToString();
  ASSERT_TRUE(sb.ok()) << sb.ToString();
  EXPECT_EQ(std::string(a.peer_certificate().begin(), a.peer_certificate().end()), "agent:bob");
  EXPECT_EQ(std::string(b.peer_certificate().begin(), b.peer_certificate().end()), "agent:alice");
}

TEST(Handshake, APeerWithoutAKeyProofOrWithAnotherNodesCertificateIsRefused) {
  const KeyProof bob = TestKeyProof("agent:bob", "key of bob");
  {  // The initiator proves no key: the acceptor refuses it.
    Handshake a(Node(1), kSecret, true);
    Handshake b(Node(2), kSecret, false);
    b.ProveKeys(&bob);
    auto [sa, sb] = RunBoth(a, b);
    EXPECT_EQ(sb.code(), Code::kUnauthenticated);
    EXPECT_NE(sb.message().find("proved no certificate's key"), std::string::npos) << sb.message();
  }
  {  // Mallory presents alice's certificate without alice's key.
    const KeyProof mallory = TestKeyProof("agent:alice", "key of mallory");
    Handshake a(Node(1), kSecret, true);
    Handshake b(Node(2), kSecret, false);
    a.ProveKeys(&mallory);
    b.ProveKeys(&bob);
    auto [sa, sb] = RunBoth(a, b);
    EXPECT_EQ(sb.code(), Code::kUnauthenticated);
    EXPECT_NE(sb.message().find("the signature is not alice's"), std::string::npos) << sb.message();
  }
  {  // A certificate that may not claim the role its node claims.
    const KeyProof agent = TestKeyProof("agent:carol", "key of carol");
    Identity claims_coordinator = Node(1);
    claims_coordinator.role = Role::kCoordinator;
    Handshake a(claims_coordinator, kSecret, true);
    Handshake b(Node(2), kSecret, false);
    a.ProveKeys(&agent);
    b.ProveKeys(&bob);
    auto [sa, sb] = RunBoth(a, b);
    EXPECT_EQ(sb.code(), Code::kUnauthenticated);
    EXPECT_NE(sb.message().find("may not claim coordinator"), std::string::npos) << sb.message();
  }
}

TEST(Handshake, AKeyProofFromAnotherConnectionIsRejected) {
  // The cluster secret is known (a compromised member); the key proof recorded on one
  // connection does not verify on another, whose nonces differ.
  const KeyProof alice = TestKeyProof("agent:alice", "key of alice");
  const KeyProof bob = TestKeyProof("agent:bob", "key of bob");
  Handshake a1(Node(1), kSecret, true);
  Handshake b1(Node(2), kSecret, false);
  a1.ProveKeys(&alice);
  b1.ProveKeys(&bob);
  (void)b1.OnFrame(ToFrame(a1.HelloFrame()));
  auto recorded = a1.OnFrame(ToFrame(b1.HelloFrame()));
  ASSERT_TRUE(recorded.ok());
  // A second connection: the replayer knows the secret (its HMAC proof is fresh and right) but
  // not alice's key, so it can only replay her recorded signature.
  Handshake replayer(Node(1), kSecret, true);
  Handshake b2(Node(2), kSecret, false);
  b2.ProveKeys(&bob);
  ASSERT_TRUE(b2.OnFrame(ToFrame(replayer.HelloFrame())).ok());
  Frame recorded_frame = ToFrame(**recorded);
  wire::Auth old;
  ASSERT_TRUE(
      old.ParseFromArray(recorded_frame.body.data(), static_cast<int>(recorded_frame.body.size())));
  auto fresh = replayer.OnFrame(ToFrame(b2.HelloFrame()));
  ASSERT_TRUE(fresh.ok());
  Frame fresh_frame = ToFrame(**fresh);
  wire::Auth forged;
  ASSERT_TRUE(
      forged.ParseFromArray(fresh_frame.body.data(), static_cast<int>(fresh_frame.body.size())));
  forged.set_certificate(old.certificate());
  forged.set_signature(old.signature());
  std::string body;
  ASSERT_TRUE(forged.SerializeToString(&body));
  const Result<std::optional<OutFrame>> r = b2.OnFrame(
      ToFrame(OutFrame::Make(FrameType::kAuth, std::vector<uint8_t>(body.begin(), body.end()))));
  EXPECT_EQ(r.status().code(), Code::kUnauthenticated);
  EXPECT_NE(r.status().message().find("the signature is not alice's"), std::string::npos)
      << r.status().message();
}

TEST(Handshake, UnexpectedFrameIsMalformed) {
  Handshake b(Node(2), kSecret, false);
  Frame ping;
  ping.type = FrameType::kChunk;
  EXPECT_EQ(b.OnFrame(ping).status().code(), Code::kCorrupt);
}

TEST(Handshake, LoadsSecretFromFileOrEnvironmentOnly) {
  const std::string path = ::testing::TempDir() + "/wc_secret";
  {
    std::ofstream f(path);
    f << "0123456789abcdef0123\n";
  }
  auto from_file = LoadClusterSecret(path);
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  EXPECT_EQ(*from_file, "0123456789abcdef0123");
  ::setenv("WC_TEST_SECRET", "short", 1);
  EXPECT_EQ(LoadClusterSecret("", "WC_TEST_SECRET").status().code(), Code::kInvalidArgument);
  ::unsetenv("WC_TEST_SECRET");
  EXPECT_EQ(LoadClusterSecret("", "WC_TEST_SECRET").status().code(), Code::kInvalidArgument);
  // A missing file is named as the secret file: a usage error, not a bare "No such file".
  const Status missing = LoadClusterSecret(path + ".missing").status();
  EXPECT_EQ(missing.code(), Code::kInvalidArgument);
  EXPECT_NE(missing.message().find("secret file " + path + ".missing"), std::string::npos)
      << missing.ToString();
}

std::string WriteTemp(const std::string& name, const std::string& text, mode_t mode) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::filesystem::remove(path);
  {
    std::ofstream f(path);
    f << text;
  }
  EXPECT_EQ(::chmod(path.c_str(), mode), 0);
  return path;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0);
  return st.st_mode & 07777;
}

TEST(Handshake, SecretFileOthersCanReadIsLoadedWithAWarningNamingItsMode) {
  const std::string path = WriteTemp("wc_secret_open", "0123456789abcdef0123\n", 0644);
  std::vector<std::string> warnings;
  auto collect = [&](std::string_view w) { warnings.emplace_back(w); };
  auto secret = LoadClusterSecret(path, "WEIGHTCAST_SECRET", collect);
  ASSERT_TRUE(secret.ok()) << secret.status().ToString();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(path), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("mode 0644"), std::string::npos) << warnings[0];

  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);  // group-readable is as bad
  warnings.clear();
  ASSERT_TRUE(LoadClusterSecret(path, "WEIGHTCAST_SECRET", collect).ok());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("mode 0640"), std::string::npos) << warnings[0];

  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  warnings.clear();
  ASSERT_TRUE(LoadClusterSecret(path, "WEIGHTCAST_SECRET", collect).ok());
  EXPECT_TRUE(warnings.empty()) << warnings[0];
}

TEST(Handshake, ShortSecretErrorStatesTheMinimum) {
  const std::string path = WriteTemp("wc_secret_short", "tooshort\n", 0600);
  auto secret = LoadClusterSecret(path);
  ASSERT_EQ(secret.status().code(), Code::kInvalidArgument);
  EXPECT_NE(secret.status().message().find("holds 8 bytes"), std::string::npos)
      << secret.status().ToString();
  EXPECT_NE(secret.status().message().find("at least 16 bytes"), std::string::npos)
      << secret.status().ToString();
  EXPECT_NE(secret.status().message().find("weightcast keygen"), std::string::npos)
      << secret.status().ToString();
}

TEST(Handshake, GeneratedSecretIsHexAndLoadsBack) {
  auto a = GenerateClusterSecret();
  auto b = GenerateClusterSecret();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos) << *a;
  EXPECT_NE(*a, *b);
  const std::string path = ::testing::TempDir() + "/wc_secret_generated";
  std::filesystem::remove(path);
  ASSERT_TRUE(WriteSecretFile(path, *a, /*overwrite=*/false).ok());
  EXPECT_EQ(ModeOf(path), 0600u);
  std::vector<std::string> warnings;
  auto loaded = LoadClusterSecret(path, "WEIGHTCAST_SECRET",
                                  [&](std::string_view w) { warnings.emplace_back(w); });
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(*loaded, *a);
  EXPECT_TRUE(warnings.empty());
}

TEST(Handshake, SecretFileIsNotOverwrittenUnlessAsked) {
  const std::string path = WriteTemp("wc_secret_existing", "the old secret, keep it\n", 0644);
  Status refused = WriteSecretFile(path, "0123456789abcdef0123", /*overwrite=*/false);
  EXPECT_EQ(refused.code(), Code::kAlreadyExists) << refused.ToString();
  EXPECT_NE(refused.message().find("--force"), std::string::npos) << refused.ToString();
  EXPECT_EQ(*LoadClusterSecret(path, "WEIGHTCAST_SECRET", {}), "the old secret, keep it");
  ASSERT_TRUE(WriteSecretFile(path, "0123456789abcdef0123", /*overwrite=*/true).ok());
  EXPECT_EQ(*LoadClusterSecret(path), "0123456789abcdef0123");
  EXPECT_EQ(ModeOf(path), 0600u);  // the replacement does not inherit the old file's mode
}

TEST(Handshake, GoodbyeIsAShutdownReportAndNothingElseIsOne) {
  EXPECT_TRUE(Handshake::IsGoodbye(ToFrame(Handshake::GoodbyeFrame())));
  EXPECT_FALSE(
      Handshake::IsGoodbye(ToFrame(Handshake::ErrorFrameFor(Unauthenticated("bad proof")))));
  EXPECT_FALSE(Handshake::IsGoodbye(ToFrame(OutFrame::Make(FrameType::kPing, {}))));
  Frame garbage = ToFrame(Handshake::GoodbyeFrame());
  garbage.body.assign({0xff, 0xff, 0xff});
  EXPECT_FALSE(Handshake::IsGoodbye(garbage));
}

}  // namespace
}  // namespace weightcast::net
