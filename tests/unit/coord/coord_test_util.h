// A coordinator served over the in-memory transport with a fake clock, and nodes that talk to it
// through the real CoordinatorClient, for the coordinator's unit tests.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "coord/client.h"
#include "coord/coordinator.h"
#include "hash/digest.h"
#include "manifest/builder.h"
#include "net/memory_transport.h"
#include "testing/temp_dir.h"
#include "trust/signed_manifest.h"

namespace weightcast::coord::testing {

inline constexpr char kSecret[] = "coordinator test secret 0123456789";

inline net::Options NodeOptions(uint64_t node, net::Role role) {
  net::Options o;
  o.self.cluster_id = "coord-test";
  o.self.node_id = PeerId(node);
  o.self.role = role;
  o.secret = kSecret;
  // The tests move the fake clock by seconds at a time; transport keepalives are not under test.
  o.keepalive_interval = std::chrono::hours(1);
  o.keepalive_timeout = std::chrono::hours(2);
  o.log = [](std::string_view) {};
  return o;
}

// A full manifest of `chunks` 64 KiB chunks whose hashes derive from `seed` (the coordinator
// never reads the bytes, only the manifest).
inline Manifest TestManifest(const std::string& channel, uint64_t version, uint64_t seed,
                             uint32_t chunks = 3) {
  Manifest m;
  m.channel = channel;
  m.version = Version(version);
  m.chunk_size = kMinChunkSize;
  m.files.push_back({"model.safetensors", chunks * kMinChunkSize, 0});
  for (uint32_t i = 0; i < chunks; ++i) {
    const std::string text = std::to_string(seed) + "/" + std::to_string(i);
    m.chunk_hashes.push_back(
        Sha256(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size())));
  }
  m.root = ComputeRoot(m);
  return m;
}

// `m` as a delta on `base`: chunk 0 same, the others xor with payloads of `payload` bytes.
inline Manifest AsDelta(Manifest m, const Manifest& base, uint64_t payload = 1000) {
  DeltaInfo delta;
  delta.base_version = base.version;
  delta.base_root = base.root;
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    DeltaChunk chunk;
    chunk.encoding = i == 0 ? ChunkEncoding::kSame : ChunkEncoding::kXor;
    chunk.payload_size = i == 0 ? 0 : payload;
    chunk.payload_hash = Sha256(std::span<const uint8_t>(chunk.payload_hash));
    delta.chunks.push_back(chunk);
  }
  m.delta = std::move(delta);
  return m;
}

inline std::vector<uint8_t> Signed(const Manifest& m, std::string_view secret = kSecret) {
  return SignManifestWithSecret(m, secret);
}

class CoordinatorHarness {
 public:
  explicit CoordinatorHarness(CoordinatorOptions base = {}) : base_(std::move(base)) {}
  ~CoordinatorHarness() { Stop(); }

  CoordinatorOptions Options() {
    CoordinatorOptions o = base_;
    o.state_dir = dir_.path() / "state";
    o.secret = kSecret;
    o.clock = &clock_;
    o.unix_ms = [this] { return unix_ms_.load(); };
    o.log = [](std::string_view) {};
    return o;
  }

  // Opens the coordinator on the harness's state directory and serves it.
  Status Start() {
    WC_ASSIGN_OR_RETURN(coordinator_, Coordinator::Open(Options()));
    if (transport_ == nullptr) {
      transport_ = network_.CreateTransport("coord", NodeOptions(1, net::Role::kCoordinator));
    }
    WC_ASSIGN_OR_RETURN(listener_, transport_->Listen("mem:coord"));
    serve_ = std::thread([this] { coordinator_->Serve(*listener_); });
    return Status::Ok();
  }

  void Stop() {
    if (coordinator_ != nullptr) coordinator_->Stop();
    if (serve_.joinable()) serve_.join();
    coordinator_.reset();
    listener_.reset();
  }

  // A client connected as node `id` with `role`; each call makes a fresh transport.
  std::unique_ptr<CoordinatorClient> Connect(uint64_t id, net::Role role) {
    transports_.push_back(
        network_.CreateTransport("n" + std::to_string(transports_.size()), NodeOptions(id, role)));
    auto client = CoordinatorClient::Connect(*transports_.back(), "mem:coord");
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(client).value() : nullptr;
  }

  void Advance(net::Duration by) { clock_.Advance(by); }
  // For transports of nodes that connect by themselves (a ClientSession).
  net::MemoryNetwork& network() { return network_; }
  // The wall clock the coordinator stamps versions and decisions with.
  void SetUnixMs(uint64_t ms) { unix_ms_ = ms; }

  Coordinator& coordinator() { return *coordinator_; }
  const std::filesystem::path& dir() const { return dir_.path(); }
  std::filesystem::path state_dir() const { return dir_.path() / "state"; }

 private:
  CoordinatorOptions base_;
  std::atomic<uint64_t> unix_ms_{1'700'000'000'000};
  weightcast::testing::TempDir dir_;
  net::FakeClock clock_;
  net::MemoryNetwork network_{clock_};
  std::unique_ptr<net::Transport> transport_;
  std::unique_ptr<net::Listener> listener_;
  std::unique_ptr<Coordinator> coordinator_;
  std::thread serve_;
  std::vector<std::unique_ptr<net::Transport>> transports_;
};

inline wire::Register AgentRegistration(uint64_t id, std::string channel = "policy",
                                        std::string rack = "") {
  wire::Register r;
  r.set_peer_address("mem:agent" + std::to_string(id));
  r.set_rack(std::move(rack));
  r.add_channels(std::move(channel));
  r.set_hostname("host" + std::to_string(id));
  return r;
}

}  // namespace weightcast::coord::testing
