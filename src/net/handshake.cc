#include "net/handshake.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "hash/digest.h"
#include "net/wire.pb.h"
#include "util/file.h"
#include "util/text.h"

namespace weightcast::net {
namespace {

void AppendU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

std::vector<uint8_t> Serialize(const google::protobuf::MessageLite& message) {
  std::vector<uint8_t> out(message.ByteSizeLong());
  message.SerializeToArray(out.data(), static_cast<int>(out.size()));
  return out;
}

bool ValidRole(int role) { return role >= 1 && role <= 4; }

}  // namespace

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kAgent:
      return "agent";
    case Role::kCoordinator:
      return "coordinator";
    case Role::kPublisher:
      return "publisher";
    case Role::kTool:
      return "tool";
  }
  return "unknown";
}

void WarnToStderr(std::string_view message) {
  std::fprintf(stderr, "weightcast: WARN %.*s\n", static_cast<int>(message.size()), message.data());
}

Result<std::string> LoadClusterSecret(const std::filesystem::path& path, std::string_view env_var,
                                      const SecretWarnFn& warn) {
  std::string secret;
  std::string source;
  if (!path.empty()) {
    Result<std::string> read = ReadFileToString(path, 1 << 16);
    if (!read.ok()) {
      // A usage error: name the flag's file as the secret file, whatever the errno said.
      return InvalidArgument("cannot read the secret file " + path.string() + ": " +
                             read.status().message());
    }
    secret = std::move(read).value();
    while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
    source = "secret file " + path.string();
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0 && warn) {
      char mode[8];
      std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
      warn("secret file " + path.string() + " has mode " + mode +
           ": other users of this machine may read the cluster secret (chmod 600 " + path.string() +
           ")");
    }
  } else {
    std::string name(env_var);
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) {
      return InvalidArgument("no cluster secret: pass a secret file (--secret-file) or set " +
                             name + " (make one with: weightcast keygen --out FILE)");
    }
    secret = value;
    source = "environment variable " + name;
  }
  if (secret.size() < kMinSecretBytes) {
    return InvalidArgument(source + " holds " + std::to_string(secret.size()) +
                           " bytes; a cluster secret needs at least " +
                           std::to_string(kMinSecretBytes) +
                           " bytes (make one with: weightcast keygen --out FILE)");
  }
  return secret;
}

Result<std::string> GenerateClusterSecret() {
  std::array<uint8_t, 32> bytes;
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    return Internal("OpenSSL's random generator failed; no secret was made");
  }
  return ToHex(bytes);
}

Status WriteSecretFile(const std::filesystem::path& path, std::string_view secret, bool overwrite) {
  return WritePrivateFile(path, std::string(secret) + "\n", overwrite);
}

Handshake::Handshake(const Identity& self, std::string_view secret, bool initiator,
                     std::optional<std::array<uint8_t, kNonceSize>> nonce)
    : self_(self), secret_(secret), initiator_(initiator) {
  if (nonce) {
    nonce_ = *nonce;
  } else if (RAND_bytes(nonce_.data(), static_cast<int>(nonce_.size())) != 1) {
    // Without randomness the handshake must not proceed; a zero nonce never verifies because
    // the peer rejects a Hello whose nonce is all zeros.
    nonce_.fill(0);
  }
}

OutFrame Handshake::HelloFrame() const {
  wire::Hello hello;
  hello.set_protocol_version(self_.protocol_version);
  hello.set_cluster_id(self_.cluster_id);
  hello.set_node_id(self_.node_id.value());
  hello.set_role(static_cast<wire::Role>(self_.role));
  hello.set_nonce(nonce_.data(), nonce_.size());
  return OutFrame::Make(FrameType::kHello, Serialize(hello));
}

// "weightcast-auth-v1" | version | len(cluster) | cluster | prover side | prover id |
// prover role | verifier id | verifier role | prover nonce | verifier nonce
std::string Handshake::Transcript(bool by_initiator) const {
  const bool by_self = by_initiator == initiator_;
  std::string t = "weightcast-auth-v1";
  t.push_back('\0');
  AppendU64(t, self_.protocol_version);
  AppendU64(t, self_.cluster_id.size());
  t += self_.cluster_id;
  t.push_back(by_initiator ? 'I' : 'A');
  const uint64_t self_id = self_.node_id.value();
  const uint64_t peer_id = peer_.node_id.value();
  AppendU64(t, by_self ? self_id : peer_id);
  t.push_back(static_cast<char>(by_self ? self_.role : peer_.role));
  AppendU64(t, by_self ? peer_id : self_id);
  t.push_back(static_cast<char>(by_self ? peer_.role : self_.role));
  const auto& prover_nonce = by_self ? nonce_ : peer_nonce_;
  const auto& verifier_nonce = by_self ? peer_nonce_ : nonce_;
  t.append(reinterpret_cast<const char*>(prover_nonce.data()), prover_nonce.size());
  t.append(reinterpret_cast<const char*>(verifier_nonce.data()), verifier_nonce.size());
  return t;
}

// HMAC-SHA256(secret, transcript)
std::array<uint8_t, 32> Handshake::Proof(bool by_initiator) const {
  return HmacSha256(AsBytes(secret_), AsBytes(Transcript(by_initiator)));
}

namespace {

// What a key proof signs: its own domain, so that no other signature of the node's key (a
// manifest, a decision) can stand in for one.
std::string KeyProofMessage(const std::string& transcript) {
  return "weightcast-key-proof-v1" + std::string(1, '\0') + transcript;
}

}  // namespace

Result<OutFrame> Handshake::AuthFrame() const {
  wire::Auth auth;
  const auto proof = Proof(initiator_);
  auth.set_proof(proof.data(), proof.size());
  if (key_proof_ != nullptr) {
    WC_ASSIGN_OR_RETURN(std::vector<uint8_t> signature,
                        key_proof_->sign(AsBytes(KeyProofMessage(Transcript(initiator_)))));
    auth.set_certificate(key_proof_->certificate_der.data(), key_proof_->certificate_der.size());
    auth.set_signature(signature.data(), signature.size());
  }
  return OutFrame::Make(FrameType::kAuth, Serialize(auth));
}

Status Handshake::CheckAuth(const Frame& frame) {
  wire::Auth auth;
  if (!auth.ParseFromArray(frame.body.data(), static_cast<int>(frame.body.size()))) {
    return Corrupt("auth frame is not a valid Auth message");
  }
  const auto expected_proof = Proof(!initiator_);
  if (!ConstantTimeEqual(AsBytes(auth.proof()), expected_proof)) {
    return Unauthenticated("peer's proof of the cluster secret does not verify (wrong secret?)")
        .WithReason(Reason::kWrongSecret);
  }
  if (key_proof_ == nullptr) return Status::Ok();
  if (auth.certificate().empty() || auth.signature().empty()) {
    return Unauthenticated(
        "peer proved no certificate's key: this node is in certificate mode (--ca), and over "
        "UCX each node signs the handshake with the key of its certificate");
  }
  Status verified = key_proof_->verify(AsBytes(auth.certificate()),
                                       AsBytes(KeyProofMessage(Transcript(!initiator_))),
                                       AsBytes(auth.signature()), peer_);
  if (!verified.ok()) return Unauthenticated("peer's key proof: " + verified.message());
  peer_certificate_.assign(auth.certificate().begin(), auth.certificate().end());
  return Status::Ok();
}

Result<std::optional<OutFrame>> Handshake::OnFrame(const Frame& frame) {
  auto fail = [this](Status status) -> Result<std::optional<OutFrame>> {
    state_ = State::kFailed;
    return status;
  };
  if (state_ == State::kFailed || state_ == State::kEstablished) {
    return fail(FailedPrecondition("handshake already finished"));
  }
  if (frame.type == FrameType::kError) {
    wire::ErrorReport report;
    report.ParseFromArray(frame.body.data(), static_cast<int>(frame.body.size()));
    // The peer's reason travels as a field: a wrong secret, another cluster or another protocol
    // version reads the same whichever side noticed first.
    Reason reason = Reason::kNone;
    switch (report.reason()) {
      case wire::ErrorReport::REASON_PROTOCOL_VERSION:
        reason = Reason::kProtocolVersion;
        break;
      case wire::ErrorReport::REASON_CLUSTER:
        reason = Reason::kWrongCluster;
        break;
      case wire::ErrorReport::REASON_AUTH:
        reason = Reason::kWrongSecret;
        break;
      default:
        break;
    }
    return fail(Aborted("peer refused the connection: " + report.message()).WithReason(reason));
  }
  const bool want_hello = state_ == State::kAwaitHello;
  const FrameType expected = want_hello ? FrameType::kHello : FrameType::kAuth;
  if (frame.type != expected) {
    return fail(Corrupt("expected a " + std::string(FrameTypeName(expected)) +
                        " frame during the handshake, got " +
                        std::string(FrameTypeName(frame.type))));
  }
  if (want_hello) {
    wire::Hello hello;
    if (!hello.ParseFromArray(frame.body.data(), static_cast<int>(frame.body.size()))) {
      return fail(Corrupt("hello frame is not a valid Hello message"));
    }
    if (hello.protocol_version() != self_.protocol_version) {
      return fail(FailedPrecondition("peer speaks protocol version " +
                                     std::to_string(hello.protocol_version()) +
                                     ", this node speaks " + std::to_string(self_.protocol_version))
                      .WithReason(Reason::kProtocolVersion));
    }
    if (hello.cluster_id() != self_.cluster_id) {
      return fail(FailedPrecondition("peer belongs to cluster '" +
                                     hello.cluster_id().substr(0, 64) + "', this node to '" +
                                     self_.cluster_id + "'")
                      .WithReason(Reason::kWrongCluster));
    }
    if (hello.nonce().size() != kNonceSize || !ValidRole(hello.role())) {
      return fail(Corrupt("hello has a " + std::to_string(hello.nonce().size()) +
                          "-byte nonce (need 32) or an unknown role"));
    }
    std::copy(hello.nonce().begin(), hello.nonce().end(), peer_nonce_.begin());
    const std::array<uint8_t, kNonceSize> zero{};
    if (peer_nonce_ == nonce_ || peer_nonce_ == zero) {
      return fail(Unauthenticated("peer echoed this node's nonce (reflection) or sent a zero one"));
    }
    peer_.node_id = PeerId(hello.node_id());
    peer_.role = static_cast<Role>(hello.role());
    state_ = State::kAwaitAuth;
    Result<OutFrame> auth = AuthFrame();
    if (!auth.ok()) return fail(auth.status());
    return std::optional<OutFrame>(std::move(*auth));
  }
  if (Status checked = CheckAuth(frame); !checked.ok()) return fail(std::move(checked));
  state_ = State::kEstablished;
  return std::optional<OutFrame>();
}

OutFrame Handshake::ErrorFrameFor(const Status& status) {
  wire::ErrorReport report;
  switch (status.code()) {
    case Code::kFailedPrecondition:
      report.set_reason(status.reason() == Reason::kProtocolVersion
                            ? wire::ErrorReport::REASON_PROTOCOL_VERSION
                            : wire::ErrorReport::REASON_CLUSTER);
      break;
    case Code::kUnauthenticated:
      report.set_reason(wire::ErrorReport::REASON_AUTH);
      break;
    case Code::kCorrupt:
      report.set_reason(wire::ErrorReport::REASON_MALFORMED);
      break;
    case Code::kDeadlineExceeded:
      report.set_reason(wire::ErrorReport::REASON_TIMEOUT);
      break;
    default:
      report.set_reason(wire::ErrorReport::REASON_SHUTDOWN);
  }
  report.set_message(status.message());
  return OutFrame::Make(FrameType::kError, Serialize(report));
}

OutFrame Handshake::GoodbyeFrame() {
  wire::ErrorReport report;
  report.set_reason(wire::ErrorReport::REASON_SHUTDOWN);
  report.set_message("closing the connection");
  return OutFrame::Make(FrameType::kError, Serialize(report));
}

Status Handshake::ReportedError(const Frame& frame) {
  wire::ErrorReport report;
  if (!report.ParseFromArray(frame.body.data(), static_cast<int>(frame.body.size())) ||
      report.message().empty()) {
    return Aborted("peer closed the connection with an error report");
  }
  return Aborted("peer closed the connection: " + report.message().substr(0, 1024));
}

bool Handshake::IsGoodbye(const Frame& frame) {
  if (frame.type != FrameType::kError) return false;
  wire::ErrorReport report;
  return report.ParseFromArray(frame.body.data(), static_cast<int>(frame.body.size())) &&
         report.reason() == wire::ErrorReport::REASON_SHUTDOWN;
}

}  // namespace weightcast::net
