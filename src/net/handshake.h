// The connection handshake (docs/wire_format.md, "Handshake"), as a pure state machine that
// every transport drives the same way:
//
//   both sides:  send Hello{version, cluster, node id, role, nonce}
//                on peer Hello: check version and cluster, send Auth{HMAC(secret, transcript)}
//                on peer Auth:  check the proof -> established
//
// The proof binds the secret to both nonces, both node ids, both roles and which side is
// proving (initiator or acceptor), so a proof cannot be reflected back to its sender or replayed
// on another connection. No state outside this object changes until the handshake succeeds.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "net/frame.h"

namespace weightcast::net {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kMinSecretBytes = 16;

enum class Role : uint8_t { kAgent = 1, kCoordinator = 2, kPublisher = 3, kTool = 4 };
std::string_view RoleName(Role role);

// Who this process is, as it presents itself to peers.
struct Identity {
  std::string cluster_id;
  PeerId node_id;
  Role role = Role::kAgent;
  uint32_t protocol_version = kProtocolVersion;  // tests set others to check rejection
};

// Who the peer proved to be.
struct PeerInfo {
  PeerId node_id;
  Role role = Role::kAgent;
  std::string address;      // transport-specific ("127.0.0.1:7000", "mem:b")
  std::string transport{};  // which transport carries the connection: "tcp", "ucx", "memory"
};

// Receives a warning about the secret (one line, no trailing newline).
using SecretWarnFn = std::function<void(std::string_view message)>;
// Writes "weightcast: WARN <message>" to stderr.
void WarnToStderr(std::string_view message);

// Reads the cluster secret from a file (first line, trailing newline dropped) or, when `path`
// is empty, from the environment variable `env_var`. Never from the command line: argv is
// visible to every user of the machine. Rejects secrets shorter than kMinSecretBytes. A secret
// file that other users may read (any group or other bit in its mode) is still loaded, since
// refusing would break running clusters, but `warn` is told its path and mode.
Result<std::string> LoadClusterSecret(const std::filesystem::path& path,
                                      std::string_view env_var = "WEIGHTCAST_SECRET",
                                      const SecretWarnFn& warn = WarnToStderr);

// A fresh cluster secret: 32 bytes from OpenSSL's RAND_bytes, as 64 lowercase hex digits (text,
// so it survives LoadClusterSecret's first-line rule and copy-paste). kInternal when the
// random generator fails.
Result<std::string> GenerateClusterSecret();

// Writes `secret` and a newline to a new file `path` readable by its owner only (mode 0600).
// Refuses (kAlreadyExists) when `path` exists, unless `overwrite`; then the old file is
// replaced atomically (a 0600 temporary file beside it, renamed over it), so it is never seen
// half-written or with a wider mode.
Status WriteSecretFile(const std::filesystem::path& path, std::string_view secret, bool overwrite);

// Certificate mode over a transport without TLS (UCX; docs/security.md, "UCX"). TLS proves
// that each end holds the key of the certificate it presents; without TLS the handshake does:
// each side's Auth also carries its certificate and its signature of the transcript the HMAC
// proof covers (both nonces, both ids and roles, which side proves), and the other side has
// `verify` check the signature with that certificate's key and the certificate itself (the CA,
// validity, revocation, the role and node id claimed). A signature made for one connection
// verifies on no other, and a certificate without its key proves nothing. It authenticates; it
// does not encrypt. Made by the layer that holds the CA (node::KeyProofOf).
struct KeyProof {
  std::vector<uint8_t> certificate_der;  // this node's
  // This node's signature of `message` with its certificate's key.
  std::function<Result<std::vector<uint8_t>>(std::span<const uint8_t> message)> sign;
  // The peer's `certificate_der` signed `message` and may claim `claimed`: kUnauthenticated
  // naming what does not hold.
  std::function<Status(std::span<const uint8_t> certificate_der, std::span<const uint8_t> message,
                       std::span<const uint8_t> signature, const PeerInfo& claimed)>
      verify;
};

class Handshake {
 public:
  // `secret` must outlive the handshake. `nonce` empty means a fresh random one.
  Handshake(const Identity& self, std::string_view secret, bool initiator,
            std::optional<std::array<uint8_t, kNonceSize>> nonce = std::nullopt);

  // Certificate mode without TLS: this side proves its key and requires the peer to prove its
  // own (KeyProof). Before the first frame. `proof` must outlive the handshake.
  void ProveKeys(const KeyProof* proof) { key_proof_ = proof; }

  // The first frame to send.
  OutFrame HelloFrame() const;

  // Feeds one received frame. Returns the frame to send in reply, if any. An error means the
  // connection must be closed: send ErrorFrameFor(status) first (best effort), log the status.
  // Codes: kFailedPrecondition (version, cluster), kUnauthenticated (proof, reflected nonce),
  // kCorrupt (malformed or unexpected frame), kAborted (the peer sent an ErrorReport).
  Result<std::optional<OutFrame>> OnFrame(const Frame& frame);

  bool established() const { return state_ == State::kEstablished; }
  // The peer's Hello was accepted: peer() has the id and role it claims (not yet proven).
  bool heard_hello() const { return state_ == State::kAwaitAuth || state_ == State::kEstablished; }
  const PeerInfo& peer() const { return peer_; }
  // With ProveKeys, once established: the certificate the peer proved its key for (DER).
  const std::vector<uint8_t>& peer_certificate() const { return peer_certificate_; }

  static OutFrame ErrorFrameFor(const Status& status);
  // What an established connection sends just before this node closes it on purpose: an
  // ErrorReport with REASON_SHUTDOWN. It tells the peer the hang-up that follows is routine, not
  // a failure (a transport that cannot tell a close from a crash on its own uses it).
  static OutFrame GoodbyeFrame();
  // Whether `frame` is that goodbye.
  static bool IsGoodbye(const Frame& frame);
  // What an error report that arrives once the handshake is done says (a peer that refused this
  // node's proof after proving its own, a certificate that stopped passing): kAborted with the
  // peer's reason.
  static Status ReportedError(const Frame& frame);

 private:
  enum class State { kAwaitHello, kAwaitAuth, kEstablished, kFailed };
  // What the proof of `by_initiator`'s side covers.
  std::string Transcript(bool by_initiator) const;
  std::array<uint8_t, 32> Proof(bool by_initiator) const;
  // The Auth this side sends, and the check of the peer's.
  Result<OutFrame> AuthFrame() const;
  Status CheckAuth(const Frame& frame);

  Identity self_;
  std::string_view secret_;
  bool initiator_;
  std::array<uint8_t, kNonceSize> nonce_{};
  std::array<uint8_t, kNonceSize> peer_nonce_{};
  PeerInfo peer_;
  const KeyProof* key_proof_ = nullptr;
  std::vector<uint8_t> peer_certificate_;
  State state_ = State::kAwaitHello;
};

}  // namespace weightcast::net
