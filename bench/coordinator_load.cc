// How much load one coordinator carries: a fleet of N nodes joining at once (register +
// heartbeat each, every join changing membership), then steady heartbeats from all N, then a
// series of publishes (each two fsyncs). Requests go straight to Coordinator::Handle on one
// thread, so the figures are the coordinator's own cost, not the transport's. Time comes from a
// fake clock moved 1/N s per request, as if the joins came within one second and every node
// heartbeats once a second, whatever the machine's speed (no node dies while we measure).
//
//   bench_coordinator_load [--nodes 1000] [--rounds 20] [--publishes 20]
//
// Ratios, each measured in this run: `headroom_at_1hz` = heartbeats/s handled over the N/s a
// fleet of N sends at one heartbeat a second (the interval for the default 3 s timeout);
// `join_vs_steady` = the time of the join storm over one steady round of N heartbeats (what the
// peer-list rebuilds after each join cost).
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "coord/coordinator.h"
#include "manifest/builder.h"
#include "manifest/signed_manifest.h"

using namespace weightcast;  // NOLINT: a benchmark program

namespace {

constexpr char kSecret[] = "coordinator bench secret 0123456789";

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

coord::wire::Envelope Request(uint64_t id) {
  coord::wire::Envelope e;
  e.set_request_id(id);
  return e;
}

bool Ok(const coord::wire::Envelope& reply) {
  if (reply.body_case() != coord::wire::Envelope::kError) return true;
  std::fprintf(stderr, "error: %s\n", reply.error().message().c_str());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t nodes = 1000, rounds = 20, publishes = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--nodes") == 0) nodes = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--publishes") == 0) {
      publishes = std::strtoull(argv[i + 1], nullptr, 10);
    }
  }
  if (nodes < 2 || rounds == 0 || publishes == 0) {
    std::fprintf(stderr, "need --nodes >= 2, --rounds >= 1, --publishes >= 1\n");
    return 2;
  }
  std::string dir_pattern = (std::filesystem::temp_directory_path() / "wc_coord_bench_XXXXXX");
  if (::mkdtemp(dir_pattern.data()) == nullptr) return 1;
  const std::filesystem::path dir = dir_pattern;

  net::FakeClock clock;
  coord::CoordinatorOptions options;
  options.state_dir = dir / "state";
  options.secret = kSecret;
  options.clock = &clock;
  options.log = [](std::string_view) {};
  auto opened = coord::Coordinator::Open(std::move(options));
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
    return 1;
  }
  coord::Coordinator& c = **opened;

  // The publisher's versions: 3 chunks each, hashes derived from the version number.
  auto manifest = [](uint64_t version) {
    Manifest m;
    m.channel = "policy";
    m.version = Version(version);
    m.chunk_size = kMinChunkSize;
    m.files.push_back({"model.safetensors", 3 * kMinChunkSize, 0});
    for (int i = 0; i < 3; ++i) {
      const std::string text = std::to_string(version) + "/" + std::to_string(i);
      m.chunk_hashes.push_back(
          Sha256(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size())));
    }
    m.root = ComputeRoot(m);
    return m;
  };
  net::PeerInfo publisher{.node_id = PeerId(1), .role = net::Role::kPublisher, .address = "p"};
  {
    auto e = Request(1);
    const auto bytes = SignManifest(manifest(1), kSecret);
    e.mutable_publish()->set_signed_manifest(bytes.data(), bytes.size());
    if (!Ok(c.Handle(1, publisher, e))) return 1;
  }

  uint64_t request_id = 1;
  auto heartbeat = [&](uint64_t node) {
    net::PeerInfo peer{.node_id = PeerId(node), .role = net::Role::kAgent, .address = "a"};
    auto e = Request(++request_id);
    auto* progress = e.mutable_heartbeat()->add_channels();
    progress->set_channel("policy");
    progress->set_version(1);
    progress->set_phase(coord::wire::PHASE_COMMITTED);
    progress->set_current_version(1);
    return c.Handle(node, peer, e);
  };

  const net::Duration tick = net::Duration(std::chrono::seconds(1)) / static_cast<int64_t>(nodes);
  const auto join_start = std::chrono::steady_clock::now();
  for (uint64_t node = 100; node < 100 + nodes; ++node) {
    clock.Advance(tick);
    net::PeerInfo peer{.node_id = PeerId(node), .role = net::Role::kAgent, .address = "a"};
    auto e = Request(++request_id);
    e.mutable_register_()->set_peer_address("10.0.0.1:" + std::to_string(node));
    e.mutable_register_()->set_rack("rack" + std::to_string(node % 8));
    e.mutable_register_()->add_channels("policy");
    if (!Ok(c.Handle(node, peer, e))) return 1;
    if (!Ok(heartbeat(node))) return 1;
  }
  const double join_s = Seconds(std::chrono::steady_clock::now() - join_start);
  const uint64_t builds_after_join = c.counters().peer_list_builds.load();

  const auto steady_start = std::chrono::steady_clock::now();
  size_t peers_total = 0;
  for (uint64_t round = 0; round < rounds; ++round) {
    for (uint64_t node = 100; node < 100 + nodes; ++node) {
      clock.Advance(tick);
      auto reply = heartbeat(node);
      if (!Ok(reply)) return 1;
      peers_total += static_cast<size_t>(reply.heartbeat_reply().peers_size());
    }
  }
  const double steady_s = Seconds(std::chrono::steady_clock::now() - steady_start);
  const double heartbeats_per_s = static_cast<double>(rounds * nodes) / steady_s;

  const auto publish_start = std::chrono::steady_clock::now();
  for (uint64_t v = 2; v < 2 + publishes; ++v) {
    auto e = Request(++request_id);
    const auto bytes = SignManifest(manifest(v), kSecret);
    e.mutable_publish()->set_signed_manifest(bytes.data(), bytes.size());
    if (!Ok(c.Handle(1, publisher, e))) return 1;
  }
  const double publish_ms =
      1000 * Seconds(std::chrono::steady_clock::now() - publish_start) / publishes;

  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::printf(
      "nodes %llu: join storm %.3f s (%llu peer-list builds), steady %.1f heartbeats/s "
      "(%.1f us each, %.1f peers per reply), publish %.2f ms each\n",
      static_cast<unsigned long long>(nodes), join_s,
      static_cast<unsigned long long>(builds_after_join), heartbeats_per_s, 1e6 / heartbeats_per_s,
      static_cast<double>(peers_total) / (rounds * nodes), publish_ms);
  std::printf(
      "{\"bench\":\"coordinator_load\",\"nodes\":%llu,\"join_storm_s\":%.4f,"
      "\"peer_list_builds\":%llu,\"heartbeats_per_s\":%.1f,\"heartbeat_us\":%.2f,"
      "\"headroom_at_1hz\":%.1f,\"join_vs_steady\":%.2f,\"publish_ms\":%.3f}\n",
      static_cast<unsigned long long>(nodes), join_s,
      static_cast<unsigned long long>(builds_after_join), heartbeats_per_s, 1e6 / heartbeats_per_s,
      heartbeats_per_s / static_cast<double>(nodes),
      join_s / (steady_s / static_cast<double>(rounds)), publish_ms);
  return 0;
}
