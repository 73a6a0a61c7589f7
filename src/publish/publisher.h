// The trainer side of weightcast (`weightcast publish`, docs/publish.md): turns checkpoint
// directories into versions in its own store (publish/version_builder.h), registers each with
// the coordinator and seeds it to the fleet through a node::SwarmNode acting as a source.
//
//   auto publisher = publish::Publisher::Create(options);        // store, transport, register
//   Version v = (*publisher)->PublishDirectory("/ckpt/step_7");  // prepare, publish, seed
//   (*publisher)->WaitUntil(publish::SeedUntil::kReplicated);    // keep seeding until then
//
// Threads: a heartbeat thread reports PHASE_SEEDING progress, takes the peer list from each reply
// and reconnects (and registers again) after the coordinator went away; the swarm node has its
// own. With a coordinator that holds heartbeats (long poll, docs/coordinator.md) the heartbeat
// thread keeps one held, so a changed peer list arrives at once; every other call on the shared
// client first wakes the held heartbeat and keeps the thread from holding another until it is
// done, so a publish never waits behind a held heartbeat. Thread-safety: every public method is
// safe from any thread; PublishDirectory calls are serialized. Stop (or the destructor) makes
// blocking calls return and joins every thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "coord/client.h"
#include "coord/client_session.h"
#include "metrics/log.h"
#include "metrics/registry.h"
#include "net/transport.h"
#include "net/transport_select.h"
#include "node/swarm_node.h"
#include "origin/http_client.h"
#include "publish/commit_behind.h"
#include "publish/version_builder.h"
#include "store/store.h"
#include "trust/signing_identity.h"
#include "trust/trust_anchor.h"
#include "util/stopwatch.h"

namespace weightcast::publish {

// When `weightcast publish` stops seeding a version (docs/publish.md "Seeding and stopping").
enum class SeedUntil {
  kReplicated,  // every chunk (and payload) is held by at least one other node
  kComplete,    // every live agent following the channel has the version committed
  kNever,       // until Stop (SIGINT/SIGTERM)
};
Result<SeedUntil> ParseSeedUntil(std::string_view text);  // "replicated", "complete", "never"

struct PublisherOptions {
  std::string coordinator;  // host:port of the coordinator
  std::filesystem::path store;
  std::string channel;
  std::string listen = "127.0.0.1:0";  // where peers fetch from this node
  // Which transport carries peer connections (net/transport_select.h).
  net::TransportKind transport = net::TransportKind::kTcp;
  net::TlsOptions tls;  // certificate mode: every connection mutual TLS (docs/security.md)
  std::string secret;   // the cluster secret (never from argv)
  // Signs manifests with this publisher certificate's key; null: with the cluster secret
  // (development mode).
  std::shared_ptr<const trust::SigningIdentity> signing_identity;
  // The cluster CA: manifests must be signed by a publisher it certifies for their channel.
  // Null: shared-secret development mode (manifests verify with the cluster secret).
  std::shared_ptr<const trust::TrustAnchor> trust_anchor;
  std::string cluster = "default";
  PeerId node_id;  // 0: random
  // One writer per channel (docs/publish.md "One writer per channel"). The writer's
  // identity across restarts; empty: the id kept in the store (STORE/.writer-id, made on first
  // use), so the same store is the same writer. A registration while another live writer holds
  // the channel fails (kFailedPrecondition, "channel C already has a writer: ...") unless
  // `take_over`, which fences that writer.
  std::string writer_id;
  bool take_over = false;
  // Sharded publish (docs/sharded_publish.md): this publisher is rank `rank` of `world` ranks
  // that publish each version of the channel together, each giving its own files (its part).
  // The ranks share `writer_id` (required when world > 1) and each has its own store. A version
  // is published once every rank gave its part; PublishDirectory returns then (or fails with
  // kAborted when a part did not come in time). world 1: an ordinary publisher.
  uint32_t rank = 0;
  uint32_t world = 1;
  std::shared_ptr<net::TokenBucket> upload_limit;
  BuildOptions build;
  codec::VersionCodecOptions codec;
  ImportPolicy import = ImportPolicy::kAuto;
  // A directory without a single tensor (a readme, a config) is refused unless this is set:
  // every agent would commit it as current in place of the model.
  bool allow_no_tensors = false;
  // How often WaitUntil and Watch look again.
  net::Duration poll_interval = std::chrono::milliseconds(200);
  // Give up connecting to the coordinator at Create after this long. A refused handshake (wrong
  // secret or cluster, coord::IsPermanentConnectError) fails at once.
  net::Duration connect_timeout = std::chrono::seconds(30);
  // After Create: how long PublishDirectory and WaitUntil wait out an unreachable coordinator
  // before failing with kUnavailable. kForever (the default, and `publish --watch`): until Stop,
  // logging at ERROR once the outage lasts. A one-shot `publish --dir` sets it, so that it ends.
  net::Duration unreachable_timeout = net::kForever;
  // What the publisher decides by time reads this: the connect deadline, the unreachable timeout,
  // retry backoff, WaitUntil's timeout and polls (tests pass a net::FakeClock). Its seeding node
  // runs on it too. Null: the steady clock. Must outlive the publisher.
  const net::Clock* clock = nullptr;
  metrics::Logger log{"publish"};
  metrics::Registry* metrics = nullptr;  // optional; must outlive the publisher
  // Optional: once it reads true, Create stops waiting for the coordinator and fails with
  // kAborted (a signal during start-up, before there is a publisher to Stop).
  const std::atomic<bool>* cancel = nullptr;
  // After a restart, the version the coordinator already logged is seeded again; when it is a
  // delta its payloads are encoded again from the store (a full pass over it and its base, about
  // 0.1 s of CPU for 128 MiB). Off for a publisher that publishes a new version right after
  // Create (`publish --dir`): the previous version is its seed target only while the next one is
  // prepared, so that pass would sit on the new version's critical path for nothing. Without
  // payloads, a node that holds only the previous version's base fetches its chunks whole.
  bool reseed_payloads = true;
};

// What the last PublishDirectory did.
struct PublishedVersion {
  Version version;
  bool delta = false;
  uint64_t model_bytes = 0;
  uint64_t payload_bytes = 0;  // delta payloads (0 for a full version)
  uint32_t chunks = 0;
  double prepare_seconds = 0;  // manifest + encode + import
  Digest root{};               // the manifest's
};

// The publisher is its coordinator session's delegate (coord/client_session.h): it registers as
// the channel's source and writer, and keeps the writer lease the registration grants.
class Publisher : private coord::SessionDelegate {
 public:
  // Opens the store (locking it), starts the swarm node on `listen`, connects to the
  // coordinator (retrying until connect_timeout) and registers as a source of the channel. If
  // the store holds a version the coordinator has not logged (a publisher that died between its
  // import and its Publish), it is published now; the newest version both know is seeded.
  static Result<std::unique_ptr<Publisher>> Create(PublisherOptions options);
  ~Publisher() override;
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  std::string address() const;  // the swarm node's listen address
  PeerId node_id() const { return node_id_; }
  const std::string& writer_id() const { return writer_id_; }
  // The writer epoch the coordinator granted this process for the channel (0: none yet, or a
  // coordinator that predates writer leases).
  uint64_t writer_epoch() const;
  // Not OK once another writer took the channel over (kFailedPrecondition, "fenced by writer
  // ..."): every later PublishDirectory, WaitUntil and Watch returns it.
  Status lost_lease() const;

  // Publishes `dir` as the next version: a delta against the store's current version when the
  // coordinator logged that one with the same root, otherwise full. Blocks until the coordinator
  // logged it (retrying while it is unreachable, until Stop), then seeds it and returns.
  Result<PublishedVersion> PublishDirectory(
      const std::filesystem::path& dir, const std::map<std::string, std::string>& metadata = {});

  // PublishDirectory of a version held in memory as one file's bytes (a trainer's tensors):
  // hashed and encoded where they lie, against `held` when it holds the current version's bytes
  // (PrepareVersionFromMemory), and announced once signed: the image's write into the store and
  // the commit run behind it (CommitBehind), whole chunks served from the image until then.
  // `held` must not change until it returns, `image` until the next publish or Stop returns
  // (which wait for that commit; a commit that failed fails the next publish, naming it). Not
  // for a sharded publisher.
  Result<PublishedVersion> PublishImage(const VersionImage& image, const HeldBase* held,
                                        const std::map<std::string, std::string>& metadata = {});

  // Publishes the model at an HTTP(S) origin as the next version (docs/origin.md): `from` is a
  // URL or a list of URLs (origin/listing.h). Always a full version; every file is streamed once
  // through `http` to build the manifest, and nothing is stored: the version is seeded by
  // reading each chunk a peer asks for from the origin again (node::SwarmNode::SeedFrom). While
  // it is seeded, content changed at the origin (a validator or a chunk's hash) reports the
  // version FAILED, which aborts it fleet-wide. Not for a sharded publisher. Otherwise as
  // PublishDirectory.
  Result<PublishedVersion> PublishOrigin(const std::string& from,
                                         const std::shared_ptr<origin::HttpClient>& http,
                                         const std::map<std::string, std::string>& metadata = {});

  // Blocks until `until` holds for the newest version seeded (OK), Stop (kAborted) or `timeout`
  // (kDeadlineExceeded). kFailedPrecondition when nothing is seeded. With kReplicated or
  // kComplete it also ends when the version can no longer get there: aborted by the rollout
  // (deadline, superseded, rolled back past; kAborted "vN was aborted: <reason>"), the
  // coordinator unreachable for unreachable_timeout (kUnavailable), or a call it refuses.
  Status WaitUntil(SeedUntil until, net::Duration timeout = net::kForever);

  // Publishes every checkpoint directory that appears under `dir` (publish/watcher.h) until
  // Stop (then OK). A failed publish is logged and retried on the next poll.
  Status Watch(const std::filesystem::path& dir, net::Duration settle);

  // The newest version seeded (0: none) and the swarm's view of it.
  Version seeding() const;
  node::SwarmProgress progress() const;

  // Safe from any thread (not from a signal handler); idempotent.
  void Stop();
  bool stopped() const { return stopping_.load(); }

 private:
  explicit Publisher(PublisherOptions options);
  Status Start();
  // Waits for the coordinator (it may still be starting) until connect_timeout.
  Status ConnectFirst(net::TimePoint deadline);
  // coord::SessionDelegate: the source's registration with its writer lease, and the reply's.
  coord::wire::Register Registration() override;
  void OnRegistered(const coord::wire::RegisterReply& reply) override;
  Result<std::shared_ptr<coord::CoordinatorClient>> Client();
  // Runs `fn` on the coordinator client (connecting and registering first when there is none);
  // a call that loses the connection (coord::LostConnection) drops the client, so the next call
  // reconnects.
  template <typename T>
  Result<T> Call(const std::function<Result<T>(coord::CoordinatorClient&)>& fn);
  // Wakes a held heartbeat (if any) so that the heartbeat thread sees what changed.
  void WakeHeartbeat();
  // Remembers a refusal by the coordinator for another writer (coord::IsWriterConflict).
  void NoteWriterConflict(const Status& status);
  // Names the files of `dir` that are not safetensors: INFO for small metadata (config.json,
  // tokenizer files), WARN for the rest (docs/publish.md).
  void WarnOtherFiles(const std::filesystem::path& dir,
                      const std::vector<std::pair<std::string, uint64_t>>& files);
  Result<coord::wire::ChannelLog> ChannelLog();
  // The channel's log as a publish starts: asked again once after a lost connection, and
  // kFailedPrecondition when this writer was fenced meanwhile.
  Result<coord::wire::ChannelLog> LogBeforePublish();
  Status Reconcile();
  PrepareOptions BaseOptions() const;
  // The options of the next version's prepare: above what `log` holds, a delta only against a
  // current version the log has (and did not abort).
  PrepareOptions NextVersionOptions(const coord::wire::ChannelLog& log,
                                    const std::map<std::string, std::string>& metadata);
  // Publishes a prepared version to the coordinator and seeds it; `source` names it in the log.
  Result<PublishedVersion> Announce(const PreparedVersion& prepared, const Stopwatch& prepare,
                                    const std::string& source, node::ChunkReader reader = {});
  Status PublishSigned(const PreparedVersion& prepared);
  Status StartSeeding(const PreparedVersion& prepared, node::ChunkReader reader = {});
  // Waits for the last PublishImage's store commit (under publish_mu_): its failure, once.
  Status FinishCommitBehind();
  // Marks `prepared` as the version seeded (after node_ seeds it) and wakes the heartbeat.
  void NoteSeeding(const PreparedVersion& prepared);
  // Sharded publish (publisher_parts.cc).
  bool sharded() const { return options_.world > 1; }
  Result<PublishedVersion> PublishPartDirectory(const std::filesystem::path& dir,
                                                const std::map<std::string, std::string>& metadata,
                                                const coord::wire::ChannelLog& log);
  // Gives the part to the coordinator and waits until the version is assembled (OK), aborted
  // (kAborted with the reason) or Stop.
  Status PublishPartSigned(const PreparedVersion& part);
  // Turns a prepared delta into a full version (its base is not in the fleet's log), signed again.
  Status SendWhole(PreparedVersion& prepared) const;
  // Seeds this rank's chunks of the assembled version whose part is `part`.
  Status StartSeedingPart(const PreparedVersion& part);
  // Whether the coordinator logged `version` as assembled with `part_root` as this rank's part
  // (and did not abort it).
  bool PartLogged(const coord::wire::ChannelLog& log, Version version, const Digest& part_root);
  Status ReconcilePart(Version current, const coord::wire::ChannelLog& log);
  // Whether `until` holds for `version`, given the coordinator's view of the channel (kComplete).
  bool Holds(SeedUntil until, Version version, const coord::wire::FleetStatus& status);
  // Logs (WARN) when no live agent follows the channel, and again (INFO) once one does.
  void ReportFollowers(Version version, const coord::wire::FleetStatus& status);
  void HeartbeatLoop();
  // One heartbeat (held when the coordinator holds them) and its peer list. False when the loop
  // ends: stopping, or fenced by another writer.
  bool Beat();
  // The SEEDING progress of the version being seeded, added to `heartbeat` (nothing while none
  // is seeded). Under mu_.
  void AddSeedingProgressLocked(coord::wire::Heartbeat& heartbeat) const;
  // The bytes uploaded so far, into that progress. Not under mu_: it asks the swarm node.
  void AddUploadedBytes(coord::wire::Heartbeat& heartbeat) const;
  bool SleepFor(net::Duration d);  // false when stopping
  const net::Clock& clock() const {
    return options_.clock != nullptr ? *options_.clock : net::Clock::Real();
  }
  bool Stopping() const { return stopping_ || (options_.cancel != nullptr && *options_.cancel); }

  PublisherOptions options_;
  PeerId node_id_;
  std::string writer_id_;
  std::optional<Store> store_;
  std::unique_ptr<net::Transport> transport_;
  std::unique_ptr<node::SwarmNode> node_;

  // Made by Start once the transport and the swarm node run.
  std::unique_ptr<coord::ClientSession> session_;

  std::mutex publish_mu_;  // one PublishDirectory at a time
  // The last PublishImage's store commit, still running or not yet waited for (publish_mu_).
  std::unique_ptr<CommitBehind> commit_behind_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Version seeding_;
  // Long poll, guarded by mu_. Invariant: heartbeat_held_ only while calls_in_flight_ was 0 when
  // the held heartbeat was sent; a call that starts later wakes it.
  int calls_in_flight_ = 0;
  bool heartbeat_held_ = false;
  // Why the last publish of Watch failed (empty: it did not); guarded by mu_. Sent with each
  // heartbeat (ChannelProgress.error), so `weightcast status` shows it beside this node.
  std::string publish_error_;
  uint64_t writer_epoch_ = 0;  // guarded by mu_
  // The newest version whose assembly the coordinator aborted: the next part goes above it.
  Version aborted_part_;  // guarded by publish_mu_
  Status lost_lease_;     // guarded by mu_
  // The non-safetensors files of the last published directory, to warn only when they change.
  std::vector<std::pair<std::string, uint64_t>> warned_other_files_;
  bool no_followers_reported_ = false;  // WaitUntil's thread only
  uint64_t seeding_chunks_ = 0;
  uint64_t seeding_bytes_ = 0;
  // The origin client of the last PublishOrigin (guarded by mu_): Stop cancels its reads.
  std::shared_ptr<origin::HttpClient> origin_http_;
  std::atomic<bool> stopping_{false};
  std::mutex stop_mu_;
  std::thread heartbeat_;
};

}  // namespace weightcast::publish
