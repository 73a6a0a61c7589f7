// How much load one coordinator carries: a fleet of N nodes joining at once (register +
// heartbeat each, every join changing membership), then steady heartbeats from all N, then a
// series of publishes (each two fsyncs). Requests go straight to Coordinator::Handle on one
// thread, so the figures are the coordinator's own cost, not the transport's. Time comes from a
// fake clock moved 1/N s per request, as if the joins came within one second and every node
// heartbeats once a second, whatever the machine's speed (no node dies while we measure).
//
//   bench_coordinator_load [--nodes 1000] [--rounds 20] [--publishes 20] [--etcd URL,...]
//
// With --etcd the same run is made twice, on the embedded file log and then on the
// etcd backend (this process leads through an etcd lease under a prefix of its own), and the
// figures of both are printed with their ratios: `etcd_publish_vs_file` (a publish's time on
// etcd over its time on the file log) and `etcd_heartbeats_vs_file`.
//
// Ratios, each measured in this run: `headroom_at_1hz` = heartbeats/s handled over the N/s a
// fleet of N sends at one heartbeat a second (the interval for the default 3 s timeout);
// `join_vs_steady` = the time of the join storm over one steady round of N heartbeats (what the
// peer-list rebuilds after each join cost).
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "coord/coordinator.h"
#include "coord/etcd_client.h"
#include "coord/etcd_election.h"
#include "coord/etcd_log_store.h"
#include "manifest/builder.h"
#include "trust/signed_manifest.h"

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

struct Figures {
  double join_s = 0;
  uint64_t builds_after_join = 0;
  double steady_s = 0;
  double heartbeats_per_s = 0;
  double peers_per_reply = 0;
  double publish_ms = 0;
};

// One run on the store `open_store` gives (null: the file log in a temp dir).
int Run(uint64_t nodes, uint64_t rounds, uint64_t publishes,
        std::function<Result<std::unique_ptr<coord::LogStore>>()> open_store, Figures* out) {
  std::string dir_pattern = (std::filesystem::temp_directory_path() / "wc_coord_bench_XXXXXX");
  if (::mkdtemp(dir_pattern.data()) == nullptr) return 1;
  const std::filesystem::path dir = dir_pattern;

  net::FakeClock clock;
  coord::CoordinatorOptions options;
  options.state_dir = dir / "state";
  options.open_store = std::move(open_store);
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
    const auto bytes = SignManifestWithSecret(manifest(1), kSecret);
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
    const auto bytes = SignManifestWithSecret(manifest(v), kSecret);
    e.mutable_publish()->set_signed_manifest(bytes.data(), bytes.size());
    if (!Ok(c.Handle(1, publisher, e))) return 1;
  }
  const double publish_ms =
      1000 * Seconds(std::chrono::steady_clock::now() - publish_start) / publishes;

  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  *out = {.join_s = join_s,
          .builds_after_join = builds_after_join,
          .steady_s = steady_s,
          .heartbeats_per_s = heartbeats_per_s,
          .peers_per_reply = static_cast<double>(peers_total) / static_cast<double>(rounds * nodes),
          .publish_ms = publish_ms};
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t nodes = 1000, rounds = 20, publishes = 20;
  std::string etcd_endpoints;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--nodes") == 0) nodes = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--publishes") == 0) {
      publishes = std::strtoull(argv[i + 1], nullptr, 10);
    }
    if (std::strcmp(argv[i], "--etcd") == 0) etcd_endpoints = argv[i + 1];
  }
  if (nodes < 2 || rounds == 0 || publishes == 0) {
    std::fprintf(stderr, "need --nodes >= 2, --rounds >= 1, --publishes >= 1\n");
    return 2;
  }
  Figures file;
  if (int rc = Run(nodes, rounds, publishes, nullptr, &file); rc != 0) return rc;
  const double join_s = file.join_s;
  const uint64_t builds_after_join = file.builds_after_join;
  const double steady_s = file.steady_s;
  const double heartbeats_per_s = file.heartbeats_per_s;
  const double publish_ms = file.publish_ms;
  std::printf(
      "nodes %llu: join storm %.3f s (%llu peer-list builds), steady %.1f heartbeats/s "
      "(%.1f us each, %.1f peers per reply), publish %.2f ms each\n",
      static_cast<unsigned long long>(nodes), join_s,
      static_cast<unsigned long long>(builds_after_join), heartbeats_per_s, 1e6 / heartbeats_per_s,
      file.peers_per_reply, publish_ms);
  if (!etcd_endpoints.empty()) {
    auto client = coord::etcd::Client::Create(etcd_endpoints);
    if (!client.ok()) {
      std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
      return 2;
    }
    // A prefix of this run's own, so that nothing else in that etcd is touched.
    const coord::EtcdKeys keys{
        "/weightcast-bench/" + std::to_string(::getpid()) + "-" +
        std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "/"};
    coord::Election election(**client, keys, "bench", std::chrono::seconds(10));
    auto outcome = election.Campaign();
    if (!outcome.ok() || outcome->term == nullptr) {
      std::fprintf(stderr, "could not lead in etcd: %s\n",
                   outcome.ok() ? "another leader" : outcome.status().ToString().c_str());
      return 1;
    }
    auto term = outcome->term;
    Figures etcd;
    coord::etcd::Client& c = **client;
    const int rc = Run(
        nodes, rounds, publishes,
        [&c, keys, term]() -> Result<std::unique_ptr<coord::LogStore>> {
          return std::unique_ptr<coord::LogStore>(new coord::EtcdLogStore(c, keys, term));
        },
        &etcd);
    election.Resign(*term);
    if (rc != 0) return rc;
    std::printf(
        "etcd backend: join storm %.3f s, steady %.1f heartbeats/s (%.1f us each), publish %.2f "
        "ms each (%.2fx the file log's)\n",
        etcd.join_s, etcd.heartbeats_per_s, 1e6 / etcd.heartbeats_per_s, etcd.publish_ms,
        etcd.publish_ms / publish_ms);
    std::printf(
        "{\"bench\":\"coordinator_load\",\"nodes\":%llu,\"file\":{\"join_storm_s\":%.4f,"
        "\"heartbeats_per_s\":%.1f,\"heartbeat_us\":%.2f,\"headroom_at_1hz\":%.1f,"
        "\"publish_ms\":%.3f},\"etcd\":{\"join_storm_s\":%.4f,\"heartbeats_per_s\":%.1f,"
        "\"heartbeat_us\":%.2f,\"headroom_at_1hz\":%.1f,\"publish_ms\":%.3f},"
        "\"etcd_publish_vs_file\":%.2f,\"etcd_heartbeats_vs_file\":%.3f}\n",
        static_cast<unsigned long long>(nodes), join_s, heartbeats_per_s, 1e6 / heartbeats_per_s,
        heartbeats_per_s / static_cast<double>(nodes), publish_ms, etcd.join_s,
        etcd.heartbeats_per_s, 1e6 / etcd.heartbeats_per_s,
        etcd.heartbeats_per_s / static_cast<double>(nodes), etcd.publish_ms,
        etcd.publish_ms / publish_ms, etcd.heartbeats_per_s / heartbeats_per_s);
    return 0;
  }
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
