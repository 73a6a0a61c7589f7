// SwarmNode over the in-memory transport: a seed and several agents exchange a full version and
// a delta (payloads decoded onto the base), peers serve each other, a peer uploading corrupt
// chunks is dropped and the version still completes, a node with a wrong secret gets nothing,
// and a tensor-subset node fetches only its chunks.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "codec/version_codec.h"
#include "live/delta_file.h"
#include "manifest/selection.h"
#include "metrics/registry.h"
#include "net/memory_transport.h"
#include "node/payload_cache.h"
#include "node/swarm_node.h"
#include "origin/listing.h"
#include "store/partial.h"
#include "swarm/messages.h"
#include "swarm/tuning.h"
#include "trust/signed_manifest.h"
#include "unit/origin/fake_origin.h"
#include "unit/store/store_test_util.h"
#include "unit/trust/trust_test_util.h"

using weightcast::swarm::EncodeMessage;
using weightcast::swarm::Message;
using weightcast::swarm::MessageType;
using weightcast::swarm::PackBits;
using weightcast::swarm::ParseMessage;
using weightcast::swarm::UnpackBits;

namespace weightcast::node {
namespace {

using store_test::Flat;
using store_test::MakeManifest;
using store_test::ReadAll;
using store_test::SampleFiles;
using store_test::StageAndCommit;
using store_test::TempDir;
using store_test::TestFile;

constexpr char kSecret[] = "swarm test cluster secret";
constexpr char kChannel[] = "policy";
constexpr auto kWait = std::chrono::seconds(20);
// The swarm node's tick (SwarmNode::Impl::kTick): how far a test moves the protocol's time.
constexpr auto kTick = std::chrono::milliseconds(200);

net::Options NodeOptions(uint64_t id, std::string secret = kSecret) {
  net::Options o;
  o.self.cluster_id = "test";
  o.self.node_id = PeerId(id);
  o.secret = std::move(secret);
  o.log = [](std::string_view) {};
  return o;
}

std::vector<TestFile> NextStep(std::vector<TestFile> files) {
  for (size_t at = 10; at < files[0].bytes.size(); at += 90'000) files[0].bytes[at] ^= 0x5a;
  files[3].bytes[5] ^= 1;
  return files;
}

// Encodes `target` (bytes `target_flat`) as a delta against `base`, sets target.delta and puts
// the payloads in `cache`, as a publisher does.
Status MakeDelta(const Manifest& base, const std::string& base_flat, Manifest& target,
                 const std::string& target_flat, PayloadCache& cache) {
  WC_ASSIGN_OR_RETURN(
      DeltaInfo delta,
      codec::EncodeVersion(base, codec::SnapshotReader::FromMemory(AsBytes(base_flat)), target,
                           codec::SnapshotReader::FromMemory(AsBytes(target_flat)),
                           [&](ChunkIndex c, std::span<const uint8_t> payload) {
                             cache.Put(c, std::vector<uint8_t>(payload.begin(), payload.end()));
                             return Status::Ok();
                           }));
  delta.base_version = base.version;
  delta.base_root = base.root;
  target.delta = std::move(delta);
  return Status::Ok();
}

// `files` with a tensor over each safetensors file's bytes past its first 64 (the rest: a
// "header"), so that ChunksOutsideTensors is the headers' chunks and the files without tensors.
Manifest WithTensors(const std::vector<TestFile>& files, Version version) {
  Manifest m = MakeManifest(kChannel, version, files);
  for (uint32_t i = 0; i < m.files.size(); ++i) {
    const ManifestFile& f = m.files[i];
    if (!f.path.ends_with(".safetensors") || f.size <= 64) continue;
    m.tensors.push_back({f.path + ".w", DType::kU8, {f.size - 64}, i, f.offset + 64, f.size - 64});
  }
  m.root = ComputeRoot(m);
  return m;
}

Status CommitWhole(Store& store, const Manifest& m, const std::string& flat) {
  WC_ASSIGN_OR_RETURN(StagedVersion staged, store.BeginStaging(kChannel, m));
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    WC_RETURN_IF_ERROR(staged.PutChunk(ChunkIndex(i), store_test::ChunkOf(flat, m, ChunkIndex(i))));
  }
  return store.Commit(kChannel, m.version);
}

struct Node {
  std::unique_ptr<Store> store;
  std::unique_ptr<net::Transport> transport;
  std::unique_ptr<SwarmNode> swarm;
  PeerAddress address;
};

class Swarm : public ::testing::Test {
 protected:
  Node& AddNode(uint64_t id, bool source, std::vector<std::string> patterns = {},
                bool corrupt = false, std::string secret = kSecret) {
    auto node = std::make_unique<Node>();
    auto store = Store::Open(dir_.path() / ("n" + std::to_string(id)));
    EXPECT_TRUE(store.ok());
    node->store = std::make_unique<Store>(std::move(store).value());
    const std::string name = "mem:n" + std::to_string(id);
    node->transport = network_.CreateTransport(name, NodeOptions(id, secret));
    SwarmNodeOptions o{.channel = kChannel,
                       .node_id = PeerId(id),
                       .manifest_secret = secret,
                       .tensor_patterns = std::move(patterns),
                       .source = source,
                       .clock = &clock_,
                       .corrupt_uploads_for_testing = corrupt};
    if (tweak_) tweak_(id, o);
    o.on_bad_chunk = [this, id, theirs = std::move(o.on_bad_chunk)](PeerId from) {
      if (theirs) theirs(from);
      {
        std::lock_guard lock(bad_mu_);
        ++bad_chunks_[id];
      }
      bad_cv_.notify_all();
    };
    o.log = [id](std::string_view line) {
      if (getenv("SWARM_TEST_LOG") != nullptr)
        fprintf(stderr, "[%d] %.*s\n", int(id), int(line.size()), line.data());
    };
    node->swarm = std::make_unique<SwarmNode>(*node->store, *node->transport, o);
    EXPECT_TRUE(node->swarm->Start(name).ok());
    node->address = {PeerId(id), node->swarm->address(), source};
    nodes_.push_back(std::move(node));
    return *nodes_.back();
  }

  // Every node gets every other node as a peer (a full mesh).
  void Mesh() {
    std::vector<PeerAddress> all;
    for (auto& n : nodes_) all.push_back(n->address);
    for (auto& n : nodes_) n->swarm->SetPeers(all);
  }

  // Waits for node `id` to find a chunk that fails its hash (on_bad_chunk); false after kWait.
  bool WaitForBadChunk(uint64_t id) {
    std::unique_lock lock(bad_mu_);
    return bad_cv_.wait_for(lock, kWait, [&] { return bad_chunks_[id] > 0; });
  }

  // Waits for `node` to complete while the protocol's time moves on a tick whenever the node has
  // waited a moment without completing: for what waits on protocol time (a repeat the seed holds
  // back, a refusal's backoff). Every other test leaves the time where it is.
  Status CompleteWhileTimeMoves(Node& node) {
    const auto give_up = std::chrono::steady_clock::now() + kWait;
    for (;;) {
      Status s = node.swarm->WaitComplete(std::chrono::milliseconds(20));
      if (s.code() != Code::kDeadlineExceeded || std::chrono::steady_clock::now() >= give_up) {
        return s;
      }
      clock_.Advance(kTick);
    }
  }

  void TearDown() override {
    for (auto& n : nodes_) n->swarm->Stop();
  }

  // A seed (node 1) holding v1 of `files`, the other nodes made from now on reading origins, and
  // `origin` serving `served` under v1's file names, recorded in v1's metadata as a publisher
  // does for a version published from an origin (docs/origin.md). Returns v1.
  Manifest SeedWithOrigin(origin::testing::FakeOrigin& origin, const std::vector<TestFile>& files,
                          const std::vector<TestFile>& served) {
    tweak_ = [](uint64_t id, SwarmNodeOptions& o) {
      if (id != 1) o.origin_http = std::make_shared<origin::HttpClient>(origin::HttpOptions{});
    };
    Node& seed = AddNode(1, /*source=*/true);
    EXPECT_TRUE(StageAndCommit(*seed.store, kChannel, Version(1), files).ok());
    Manifest m = MakeManifest(kChannel, Version(1), files);
    std::vector<origin::OriginObject> objects;
    for (const ManifestFile& f : m.files) {
      for (const TestFile& t : served) {
        if (t.path == f.path) origin.Put(t.path, t.bytes);
      }
      objects.push_back({f.path, origin.url(f.path), {f.size, "", ""}});
    }
    m.metadata[std::string(origin::kObjectsMetadataKey)] = origin::EncodeOriginObjects(objects);
    EXPECT_TRUE(seed.swarm->Seed(m, SignManifestWithSecret(m, kSecret), nullptr).ok());
    return m;
  }

  // Changes the options of each node AddNode makes (metrics hooks).
  std::function<void(uint64_t id, SwarmNodeOptions&)> tweak_;
  TempDir dir_;
  net::FakeClock clock_;
  net::MemoryNetwork network_{clock_};
  std::mutex bad_mu_;
  std::condition_variable bad_cv_;
  std::map<uint64_t, int> bad_chunks_;  // node id -> chunks that failed their hash there
  std::vector<std::unique_ptr<Node>> nodes_;
};

TEST(SwarmProtocol, BitsRoundTripAndRejectStrayBits) {
  std::vector<bool> bits = {true, false, true, true, false, false, false, false, true, false};
  auto packed = PackBits(bits);
  ASSERT_EQ(packed.size(), 2u);
  auto back = UnpackBits(packed, 10);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, bits);
  packed[1] |= 0x80;  // bit 15, past the count
  EXPECT_EQ(UnpackBits(packed, 10).status().code(), Code::kCorrupt);
  EXPECT_EQ(UnpackBits(packed, 20).status().code(), Code::kCorrupt);
  Message m{.type = MessageType::kRequest, .version = 3, .chunk = 7, .code = 1};
  auto parsed = ParseMessage(EncodeMessage(m));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->type, MessageType::kRequest);
  EXPECT_EQ(parsed->chunk, 7u);
}

TEST_F(Swarm, FullVersionThenDeltaReachEveryAgent) {
  Node& seed = AddNode(1, /*source=*/true);
  const auto v1_files = SampleFiles(1, 4);
  ASSERT_TRUE(StageAndCommit(*seed.store, kChannel, Version(1), v1_files).ok());
  Manifest v1 = MakeManifest(kChannel, Version(1), v1_files);
  ASSERT_GT(v1.chunk_count(), 8u);
  for (uint64_t id = 2; id <= 5; ++id) AddNode(id, false);
  ASSERT_TRUE(seed.swarm->Seed(v1, SignManifestWithSecret(v1, kSecret), nullptr).ok());
  for (size_t i = 1; i < nodes_.size(); ++i) {
    ASSERT_TRUE(nodes_[i]->swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).ok());
    // Whole chunks: the default window (swarm/tuning.h, what `weightcast sim` runs).
    EXPECT_EQ(nodes_[i]->swarm->progress().window, swarm::Tuning{}.window_per_peer);
  }
  Mesh();
  for (size_t i = 1; i < nodes_.size(); ++i) {
    ASSERT_TRUE(nodes_[i]->swarm->WaitComplete(kWait).ok()) << i;
    ASSERT_TRUE(nodes_[i]->swarm->CommitTarget().ok());
    EXPECT_EQ(ReadAll(nodes_[i]->store->CurrentPath(kChannel) / "a.safetensors"),
              v1_files[0].bytes);
    EXPECT_EQ(nodes_[i]->swarm->progress().bytes_done, v1.total_size());
  }
  // Agents uploaded to each other: the seed did not send everything to everyone.
  uint64_t agent_upload = 0;
  for (size_t i = 1; i < nodes_.size(); ++i)
    agent_upload += nodes_[i]->swarm->counters().bytes_sent;
  EXPECT_GT(agent_upload, 0u);
  // An agent forwards chunks from the frames they arrived in (RecentChunks: the whole version
  // fits its budget here), never from a store read; the seed received nothing, so it reads.
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const SwarmCounters c = nodes_[i]->swarm->counters();
    EXPECT_EQ(c.uploads_from_store, 0u) << i;
    if (c.bytes_sent > 0) {
      EXPECT_GT(c.uploads_from_memory, 0u) << i;
    }
  }
  EXPECT_GT(seed.swarm->counters().uploads_from_store, 0u);
  EXPECT_EQ(seed.swarm->counters().uploads_from_memory, 0u);
  EXPECT_TRUE(seed.swarm->WaitReplicated(kWait).ok());

  // v2 as a delta: the seed encodes payloads against its v1; agents decode them onto theirs.
  const auto v2_files = NextStep(v1_files);
  ASSERT_TRUE(StageAndCommit(*seed.store, kChannel, Version(2), v2_files).ok());
  Manifest v2 = MakeManifest(kChannel, Version(2), v2_files);
  const std::string flat1 = Flat(v1_files), flat2 = Flat(v2_files);
  auto cache = std::make_shared<PayloadCache>(v2.version);
  ASSERT_TRUE(MakeDelta(v1, flat1, v2, flat2, *cache).ok());
  ASSERT_TRUE(seed.swarm->Seed(v2, SignManifestWithSecret(v2, kSecret), cache).ok());
  for (size_t i = 1; i < nodes_.size(); ++i) {
    ASSERT_TRUE(nodes_[i]->swarm->Fetch(v2, SignManifestWithSecret(v2, kSecret)).ok());
    EXPECT_TRUE(nodes_[i]->swarm->progress().delta);
    // Payloads of a few bytes where chunks hold kilobytes: pipelined far deeper than one chunk's
    // window.
    EXPECT_GE(nodes_[i]->swarm->progress().window, 32u);
  }
  for (size_t i = 1; i < nodes_.size(); ++i) {
    ASSERT_TRUE(nodes_[i]->swarm->WaitComplete(kWait).ok()) << i;
    ASSERT_TRUE(nodes_[i]->swarm->CommitTarget().ok());
    EXPECT_EQ(ReadAll(nodes_[i]->store->CurrentPath(kChannel) / "a.safetensors"),
              v2_files[0].bytes);
    EXPECT_EQ(ReadAll(nodes_[i]->store->CurrentPath(kChannel) / "c.safetensors"),
              v2_files[3].bytes);
    // Far less than the version crossed the wire: the unchanged chunks were copied locally.
    EXPECT_LT(nodes_[i]->swarm->progress().bytes_received, v2.total_size() / 2);
  }
}

// Agents granted shares of an origin version fetch their shares from the origin as from a source
// peer; each chunk leaves the origin at most once, and the rest travels between the agents.
TEST_F(Swarm, AgentsFetchTheirSharesFromTheOriginAndTheRestFromPeers) {
  origin::testing::FakeOrigin origin;
  const auto files = SampleFiles(3, 4);
  const Manifest v1 = SeedWithOrigin(origin, files, files);
  for (uint64_t id = 2; id <= 4; ++id) AddNode(id, false);
  for (size_t i = 1; i < nodes_.size(); ++i) {
    nodes_[i]->swarm->SetOriginShare(static_cast<uint32_t>(i - 1), 3);
    ASSERT_TRUE(nodes_[i]->swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).ok());
  }
  Mesh();
  uint64_t from_origin = 0;
  for (size_t i = 1; i < nodes_.size(); ++i) {
    ASSERT_TRUE(nodes_[i]->swarm->WaitComplete(kWait).ok()) << i;
    ASSERT_TRUE(nodes_[i]->swarm->CommitTarget().ok());
    EXPECT_EQ(ReadAll(nodes_[i]->store->CurrentPath(kChannel) / files[0].path), files[0].bytes);
    from_origin += nodes_[i]->swarm->counters().origin_bytes;
  }
  EXPECT_GT(from_origin, 0u);
  // A read still in flight when its chunk came from a peer first ends later: the origin's count
  // may be ahead of the nodes', never past one copy.
  EXPECT_GE(origin.body_bytes_sent(), from_origin);
  EXPECT_LE(origin.body_bytes_sent(), v1.total_size()) << "a chunk left the origin twice";
}

// Content changed at the origin under the URLs the manifest names: the chunks read there fail
// their hashes, the origin is dropped like a bad peer, and the version completes from peers.
TEST_F(Swarm, AnOriginWhoseContentChangedIsDroppedAndPeersServeTheVersion) {
  origin::testing::FakeOrigin origin;
  const auto files = SampleFiles(4, 4);
  // Other bytes under the same names.
  const Manifest v1 = SeedWithOrigin(origin, files, NextStep(files));
  Node& agent = AddNode(2, false);
  agent.swarm->SetOriginShare(0, 1);
  ASSERT_TRUE(agent.swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).ok());
  // The origin alone first: what it sends fails its hash.
  ASSERT_TRUE(WaitForBadChunk(2));
  Mesh();
  ASSERT_TRUE(agent.swarm->WaitComplete(kWait).ok());
  // Counted by the event loop, which handled the failed check before the completion.
  EXPECT_GT(agent.swarm->counters().chunks_failed, 0u);
  ASSERT_TRUE(agent.swarm->CommitTarget().ok());
  EXPECT_EQ(ReadAll(agent.store->CurrentPath(kChannel) / files[0].path), files[0].bytes);
  EXPECT_TRUE(agent.swarm->BannedPeers().empty()) << "the origin is not a node to report";
}

// The XXH3-128 of every chunk of `m` (bytes `flat`), as a publisher adds them. The
// root does not cover them: a manifest with them names the same version.
Manifest WithFastHashes(Manifest m, const std::string& flat) {
  m.fast_hashes.clear();
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    m.fast_hashes.push_back(
        HashBytes(HashAlgorithm::kXxh3_128, store_test::ChunkOf(flat, m, ChunkIndex(i))));
  }
  return m;
}

// With fast hashes in the signed manifest, an agent checks each chunk it rebuilt from
// a payload against the XXH3-128 (after the payload matched its SHA-256); with verify_result
// kSha256 against the SHA-256. Both commit the published bytes.
// A node whose sampler holds the base in its live tensors keeps a delta's payloads instead of
// decoding and staging it: committed partial (payloads), with the headers' chunks only and the
// delta file; it never offers the chunks it does not hold, so a node fetching them whole gets
// them elsewhere, intact.
TEST_F(Swarm, ALiveBaseKeepsTheDeltaAsPayloads) {
  Node& seed = AddNode(1, /*source=*/true);
  const auto v1_files = SampleFiles(1, 4);
  const std::string flat1 = Flat(v1_files);
  Manifest v1 = WithTensors(v1_files, Version(1));
  ASSERT_TRUE(CommitWhole(*seed.store, v1, flat1).ok());
  Node& sampler = AddNode(2, false);
  Node& agent = AddNode(3, false);
  ASSERT_TRUE(seed.swarm->Seed(v1, SignManifestWithSecret(v1, kSecret), nullptr).ok());
  for (Node* n : {&sampler, &agent}) {
    ASSERT_TRUE(n->swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).ok());
  }
  Mesh();
  for (Node* n : {&sampler, &agent}) {
    ASSERT_TRUE(n->swarm->WaitComplete(kWait).ok());
    ASSERT_TRUE(n->swarm->CommitTarget().ok());
  }
  // Another root than v1's is no live base; v1's is.
  sampler.swarm->SetLiveBase(Version(1), Digest{});
  sampler.swarm->SetLiveBase(Version(1), v1.root);

  const auto v2_files = NextStep(v1_files);
  const std::string flat2 = Flat(v2_files);
  Manifest v2 = WithTensors(v2_files, Version(2));
  auto cache = std::make_shared<PayloadCache>(v2.version);
  ASSERT_TRUE(MakeDelta(v1, flat1, v2, flat2, *cache).ok());
  ASSERT_TRUE(CommitWhole(*seed.store, v2, flat2).ok());
  ASSERT_TRUE(seed.swarm->Seed(v2, SignManifestWithSecret(v2, kSecret), cache).ok());
  for (Node* n : {&sampler, &agent}) {
    ASSERT_TRUE(n->swarm->Fetch(v2, SignManifestWithSecret(v2, kSecret)).ok());
  }
  for (Node* n : {&sampler, &agent}) {
    ASSERT_TRUE(n->swarm->WaitComplete(kWait).ok());
    ASSERT_TRUE(n->swarm->CommitTarget().ok());
  }
  EXPECT_EQ(*sampler.store->Current(kChannel), Version(2));
  auto partial = sampler.store->GetPartial(kChannel, Version(2));
  ASSERT_TRUE(partial.ok() && partial->has_value());
  EXPECT_TRUE((*partial)->payloads);
  EXPECT_EQ((*partial)->chunks, ChunksOutsideTensors(v2));
  ASSERT_LT((*partial)->chunks.size(), v2.chunk_count() / 2);
  // The held chunks are v2's; the rest of the file was never written (sparse).
  for (ChunkIndex c : (*partial)->chunks) {
    auto chunk = sampler.store->ReadChunk(kChannel, Version(2), c);
    ASSERT_TRUE(chunk.ok()) << c.value();
    auto want = store_test::ChunkOf(flat2, v2, c);
    EXPECT_TRUE(std::equal(chunk->begin(), chunk->end(), want.begin(), want.end()));
  }
  struct stat st {};
  const auto file = sampler.store->VersionPath(kChannel, Version(2)) / "a.safetensors";
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, v2_files[0].bytes.size() / 2);
  // Every payload is in the delta file, checked against the manifest.
  auto delta = live::DeltaFile::Open(sampler.store->root(), v2);
  ASSERT_TRUE(delta.ok()) << delta.status().ToString();
  for (uint32_t i = 0; i < v2.chunk_count(); ++i) {
    EXPECT_TRUE(delta->Payload(v2, ChunkIndex(i)).ok()) << i;
  }
  // The agent without a live base staged v2 whole, as before.
  EXPECT_EQ(ReadAll(agent.store->CurrentPath(kChannel) / "a.safetensors"), v2_files[0].bytes);
  auto whole = agent.store->GetPartial(kChannel, Version(2));
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE(whole->has_value());

  // A node without a base fetches v2 whole, from the seed and the agent: intact.
  Node& late = AddNode(4, false);
  Mesh();
  ASSERT_TRUE(late.swarm->Fetch(v2, SignManifestWithSecret(v2, kSecret)).ok());
  ASSERT_TRUE(late.swarm->WaitComplete(kWait).ok());
  ASSERT_TRUE(late.swarm->CommitTarget().ok());
  EXPECT_EQ(ReadAll(late.store->CurrentPath(kChannel) / "a.safetensors"), v2_files[0].bytes);
  EXPECT_EQ(late.swarm->counters().chunks_failed, 0u);

  // A rollback to v2 after v3 moved on finds v2 held as payloads: it is fetched again, whole.
  const auto v3_files = NextStep(v2_files);
  const std::string flat3 = Flat(v3_files);
  Manifest v3 = WithTensors(v3_files, Version(3));
  auto cache3 = std::make_shared<PayloadCache>(v3.version);
  ASSERT_TRUE(MakeDelta(v2, flat2, v3, flat3, *cache3).ok());
  ASSERT_TRUE(CommitWhole(*seed.store, v3, flat3).ok());
  ASSERT_TRUE(seed.swarm->Seed(v3, SignManifestWithSecret(v3, kSecret), cache3).ok());
  sampler.swarm->SetLiveBase(Version(2), v2.root);
  ASSERT_TRUE(sampler.swarm->Fetch(v3, SignManifestWithSecret(v3, kSecret)).ok());
  ASSERT_TRUE(sampler.swarm->WaitComplete(kWait).ok());
  ASSERT_TRUE(sampler.swarm->CommitTarget().ok());
  ASSERT_TRUE(seed.swarm->Seed(v2, SignManifestWithSecret(v2, kSecret), cache).ok());
  ASSERT_TRUE(sampler.swarm->Fetch(v2, SignManifestWithSecret(v2, kSecret)).ok());
  ASSERT_TRUE(sampler.swarm->WaitComplete(kWait).ok());
  ASSERT_TRUE(sampler.swarm->CommitTarget().ok());
  auto refetched = sampler.store->GetPartial(kChannel, Version(2));
  ASSERT_TRUE(refetched.ok());
  EXPECT_FALSE(refetched->has_value());
  EXPECT_EQ(ReadAll(sampler.store->VersionPath(kChannel, Version(2)) / "a.safetensors"),
            v2_files[0].bytes);
}

TEST_F(Swarm, DeltaChunksAreCheckedByTheFastHashOrBySha256AsConfigured) {
  tweak_ = [](uint64_t id, SwarmNodeOptions& o) {
    if (id == 3) o.verify_result = codec::VerifyResult::kSha256;
  };
  Node& seed = AddNode(1, /*source=*/true);
  const auto v1_files = SampleFiles(8, 4);
  Node& fast = AddNode(2, false);
  Node& sha = AddNode(3, false);
  for (Node* n : {&seed, &fast, &sha}) {
    ASSERT_TRUE(StageAndCommit(*n->store, kChannel, Version(1), v1_files).ok());
  }
  Manifest v1 = MakeManifest(kChannel, Version(1), v1_files);
  const auto v2_files = NextStep(v1_files);
  ASSERT_TRUE(StageAndCommit(*seed.store, kChannel, Version(2), v2_files).ok());
  const std::string flat1 = Flat(v1_files), flat2 = Flat(v2_files);
  Manifest v2 = WithFastHashes(MakeManifest(kChannel, Version(2), v2_files), flat2);
  auto cache = std::make_shared<PayloadCache>(v2.version);
  ASSERT_TRUE(MakeDelta(v1, flat1, v2, flat2, *cache).ok());
  ASSERT_EQ(v2.delta->payload_hash_algorithm, HashAlgorithm::kSha256);
  ASSERT_TRUE(seed.swarm->Seed(v2, SignManifestWithSecret(v2, kSecret), cache).ok());
  for (Node* n : {&fast, &sha}) {
    ASSERT_TRUE(n->swarm->Fetch(v2, SignManifestWithSecret(v2, kSecret)).ok());
    ASSERT_TRUE(n->swarm->progress().delta);
  }
  Mesh();
  for (Node* n : {&fast, &sha}) {
    ASSERT_TRUE(n->swarm->WaitComplete(kWait).ok());
    EXPECT_TRUE(n->swarm->progress().delta) << "no fallback to whole chunks";
    ASSERT_TRUE(n->swarm->CommitTarget().ok());
    EXPECT_EQ(ReadAll(n->store->CurrentPath(kChannel) / "a.safetensors"), v2_files[0].bytes);
    EXPECT_EQ(ReadAll(n->store->CurrentPath(kChannel) / "c.safetensors"), v2_files[3].bytes);
    EXPECT_TRUE(n->store->Verify(kChannel, Version(2)).ok());
  }
  EXPECT_EQ(fast.swarm->counters().delta_chunks_fast, cache->size());
  EXPECT_EQ(fast.swarm->counters().delta_chunks_sha256, 0u);
  EXPECT_EQ(sha.swarm->counters().delta_chunks_sha256, cache->size());
  EXPECT_EQ(sha.swarm->counters().delta_chunks_fast, 0u);
}

// A base chunk whose bytes are not what its hash says (a memory error, a file changed on disk
// after the commit): the payload is authentic, so only the XXH3 of the rebuilt chunk can tell.
// The agent refuses the delta loudly, fetches whole chunks and commits exactly the published
// bytes; the rotten bytes never count as verified.
TEST_F(Swarm, ABadBaseIsCaughtByTheFastHashAndTheChunkIsFetchedWhole) {
  Node& seed = AddNode(1, /*source=*/true);
  const auto v1_files = SampleFiles(9, 4);
  ASSERT_TRUE(StageAndCommit(*seed.store, kChannel, Version(1), v1_files).ok());
  Manifest v1 = MakeManifest(kChannel, Version(1), v1_files);
  Node& agent = AddNode(2, false);
  ASSERT_TRUE(StageAndCommit(*agent.store, kChannel, Version(1), v1_files).ok());
  {
    // Byte 20 of a.safetensors: chunk 0, which v2 changes (NextStep flips byte 10).
    const auto path = agent.store->VersionPath(kChannel, Version(1)) / "a.safetensors";
    std::filesystem::permissions(path, std::filesystem::perms::owner_write,
                                 std::filesystem::perm_options::add);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekp(20);
    const char rotten = static_cast<char>(v1_files[0].bytes[20] ^ 0x04);
    f.write(&rotten, 1);
  }
  ASSERT_FALSE(agent.store->Verify(kChannel, Version(1)).ok());
  const auto v2_files = NextStep(v1_files);
  ASSERT_TRUE(StageAndCommit(*seed.store, kChannel, Version(2), v2_files).ok());
  const std::string flat1 = Flat(v1_files), flat2 = Flat(v2_files);
  Manifest v2 = WithFastHashes(MakeManifest(kChannel, Version(2), v2_files), flat2);
  auto cache = std::make_shared<PayloadCache>(v2.version);
  ASSERT_TRUE(MakeDelta(v1, flat1, v2, flat2, *cache).ok());
  ASSERT_EQ(v2.delta->chunks[0].encoding, ChunkEncoding::kXor);
  ASSERT_TRUE(seed.swarm->Seed(v2, SignManifestWithSecret(v2, kSecret), cache).ok());
  ASSERT_TRUE(agent.swarm->Fetch(v2, SignManifestWithSecret(v2, kSecret)).ok());
  ASSERT_TRUE(agent.swarm->progress().delta);
  Mesh();
  // The seed holds back its repeat of chunk 0 (sent once as a payload) for a moment of protocol
  // time.
  const Status done = CompleteWhileTimeMoves(agent);
  ASSERT_TRUE(done.ok()) << done.ToString() << " err " << agent.swarm->progress().error;
  EXPECT_FALSE(agent.swarm->progress().delta) << "the failed check switched to whole chunks";
  EXPECT_EQ(agent.swarm->counters().chunks_failed, 0u) << "the seed sent nothing bad";
  ASSERT_TRUE(agent.swarm->CommitTarget().ok());
  EXPECT_EQ(ReadAll(agent.store->CurrentPath(kChannel) / "a.safetensors"), v2_files[0].bytes);
  EXPECT_TRUE(agent.store->Verify(kChannel, Version(2)).ok());
}

TEST_F(Swarm, CorruptUploaderIsDroppedAndTheVersionStillCompletes) {
  Node& seed = AddNode(1, true);
  const auto files = SampleFiles(3, 4);
  ASSERT_TRUE(StageAndCommit(*seed.store, kChannel, Version(1), files).ok());
  Manifest v1 = MakeManifest(kChannel, Version(1), files);
  // Node 2 gets v1 first, then serves corrupt bytes to node 3.
  Node& bad = AddNode(2, false, {}, /*corrupt=*/true);
  ASSERT_TRUE(seed.swarm->Seed(v1, SignManifestWithSecret(v1, kSecret), nullptr).ok());
  ASSERT_TRUE(bad.swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).ok());
  Mesh();
  ASSERT_TRUE(bad.swarm->WaitComplete(kWait).ok());
  Node& good = AddNode(3, false);
  ASSERT_TRUE(good.swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).ok());
  Mesh();
  // A chunk the bad node spoiled is asked of the seed again, which may hold a repeat back.
  ASSERT_TRUE(CompleteWhileTimeMoves(good).ok());
  ASSERT_TRUE(good.swarm->CommitTarget().ok());
  EXPECT_TRUE(good.store->Verify(kChannel, Version(1)).ok());
  EXPECT_EQ(ReadAll(good.store->CurrentPath(kChannel) / "c.safetensors"), files[3].bytes);
  // Whether the bad node was asked depends on timing; when it was, it was caught.
  if (good.swarm->counters().chunks_failed > 0) {
    EXPECT_GE(good.swarm->counters().peers_dropped, 1u);
  }
}

TEST_F(Swarm, CorruptSourceIsDetected) {
  Node& seed = AddNode(1, true, {}, /*corrupt=*/true);
  const auto files = SampleFiles(4);
  ASSERT_TRUE(StageAndCommit(*seed.store, kChannel, Version(1), files).ok());
  Manifest v1 = MakeManifest(kChannel, Version(1), files);
  Node& agent = AddNode(2, false);
  ASSERT_TRUE(seed.swarm->Seed(v1, SignManifestWithSecret(v1, kSecret), nullptr).ok());
  ASSERT_TRUE(agent.swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).ok());
  Mesh();
  ASSERT_TRUE(WaitForBadChunk(2));
  EXPECT_EQ(agent.swarm->progress().chunks_done, 0u);
  EXPECT_FALSE(agent.swarm->CommitTarget().ok());
}

// An agent checks a manifest for itself, whoever relays it: with a CA, one signed with the cluster
// secret or by a certificate without the channel's publisher role is refused before anything is
// fetched (docs/security.md).
TEST_F(Swarm, CertifiedManifestsOnly) {
  trust::Authority ca = testing::NewAuthority();
  auto anchor = testing::AnchorOf(ca);
  auto trainer = testing::Issue(ca, "trainer", std::string("publisher:") + kChannel);
  auto sampler = testing::Issue(ca, "sampler", "agent");
  tweak_ = [&](uint64_t, SwarmNodeOptions& o) { o.trust_anchor = anchor; };
  Node& seed = AddNode(1, true);
  const auto files = SampleFiles(5);
  ASSERT_TRUE(StageAndCommit(*seed.store, kChannel, Version(1), files).ok());
  Manifest v1 = MakeManifest(kChannel, Version(1), files);
  const std::vector<uint8_t> certified = *SignManifest(v1, {kSecret, trainer.get()});
  EXPECT_EQ(seed.swarm->Seed(v1, SignManifestWithSecret(v1, kSecret), nullptr).code(),
            Code::kUnauthenticated);
  ASSERT_TRUE(seed.swarm->Seed(v1, certified, nullptr).ok());
  Node& agent = AddNode(2, false);
  EXPECT_EQ(agent.swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).code(),
            Code::kUnauthenticated);
  EXPECT_EQ(agent.swarm->Fetch(v1, *SignManifest(v1, {kSecret, sampler.get()})).code(),
            Code::kUnauthenticated);
  EXPECT_EQ(agent.swarm->progress().chunks_done, 0u);
  ASSERT_TRUE(agent.swarm->Fetch(v1, certified).ok());
  Mesh();
  ASSERT_TRUE(agent.swarm->WaitComplete(std::chrono::seconds(10)).ok());
}

TEST_F(Swarm, WrongSecretGetsNothing) {
  Node& seed = AddNode(1, true);
  const auto files = SampleFiles(5);
  ASSERT_TRUE(StageAndCommit(*seed.store, kChannel, Version(1), files).ok());
  Manifest v1 = MakeManifest(kChannel, Version(1), files);
  ASSERT_TRUE(seed.swarm->Seed(v1, SignManifestWithSecret(v1, kSecret), nullptr).ok());
  Node& intruder = AddNode(2, false, {}, false, "another secret of enough length");
  // Its own secret cannot verify the cluster's manifest, and its connections fail the handshake.
  EXPECT_EQ(intruder.swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).code(),
            Code::kUnauthenticated);
  ASSERT_TRUE(
      intruder.swarm->Fetch(v1, SignManifestWithSecret(v1, "another secret of enough length"))
          .ok());
  // The intruder's connect to the seed (the lower id) is made inside its SetPeers (the in-memory
  // transport connects at once) and refused in the handshake; progress() is answered by the
  // node's loop after that connect's end: nothing to wait for.
  Mesh();
  const SwarmProgress p = intruder.swarm->progress();
  EXPECT_EQ(p.peers, 0u);
  EXPECT_FALSE(p.complete);
  EXPECT_EQ(p.bytes_received, 0u);
  EXPECT_EQ(seed.swarm->counters().bytes_sent, 0u);
}

TEST_F(Swarm, SubsetNodeFetchesOnlyItsChunks) {
  Node& seed = AddNode(1, true);
  const auto files = SampleFiles(6, 4);
  {
    // One tensor covering the first 100 KB of a.safetensors.
    Manifest m = MakeManifest(kChannel, Version(1), files);
    m.tensors.push_back({.name = "layer.0.w",
                         .dtype = DType::kU8,
                         .shape = {100'000},
                         .file_index = 0,
                         .offset = 0,
                         .size = 100'000});
    m.root = ComputeRoot(m);
    auto staged = seed.store->BeginStaging(kChannel, m);
    ASSERT_TRUE(staged.ok()) << staged.status().ToString();
    const std::string flat = Flat(files);
    for (uint32_t i = 0; i < m.chunk_count(); ++i) {
      ASSERT_TRUE(
          staged->PutChunk(ChunkIndex(i), store_test::ChunkOf(flat, m, ChunkIndex(i))).ok());
    }
    ASSERT_TRUE(seed.store->Commit(kChannel, Version(1)).ok());
  }
  Manifest v1 = *seed.store->GetManifest(kChannel, Version(1));
  {
    Status seeded = seed.swarm->Seed(v1, SignManifestWithSecret(v1, kSecret), nullptr);
    ASSERT_TRUE(seeded.ok()) << seeded.ToString();
  }
  Node& subset = AddNode(2, false, {"layer.0.*"});
  ASSERT_TRUE(subset.swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).ok());
  Mesh();
  ASSERT_TRUE(subset.swarm->WaitComplete(kWait).ok());
  SwarmProgress p = subset.swarm->progress();
  EXPECT_EQ(p.chunks_total, 2u);  // 100 KB over 64 KiB chunks
  EXPECT_EQ(p.chunks_done, 2u);
  EXPECT_LE(p.bytes_received, 2 * kMinChunkSize);
  EXPECT_GT(p.bytes_received, 0u);

  // It commits a partial version: its chunks real, recorded; the others never served.
  ASSERT_TRUE(subset.swarm->CommitTarget().ok());
  EXPECT_EQ(*subset.store->Current(kChannel), Version(1));
  auto partial = subset.store->GetPartial(kChannel, Version(1));
  ASSERT_TRUE(partial.ok() && partial->has_value());
  EXPECT_EQ((*partial)->chunks, (std::vector<ChunkIndex>{ChunkIndex(0), ChunkIndex(1)}));
  EXPECT_EQ((*partial)->tensors, std::vector<std::string>{"layer.0.w"});
  EXPECT_TRUE(subset.store->Verify(kChannel, Version(1)).ok());
  EXPECT_EQ(subset.store->ReadChunk(kChannel, Version(1), ChunkIndex(2)).status().code(),
            Code::kNotFound);
  EXPECT_TRUE(subset.swarm->progress().committed);
}

TEST_F(Swarm, ResumesAStagingLeftByAnEarlierRun) {
  const auto files = SampleFiles(10, 4);
  Manifest v1 = MakeManifest(kChannel, Version(1), files);
  const std::string flat = Flat(files);
  {
    // An earlier run verified the first five chunks, then died.
    auto store = Store::Open(dir_.path() / "n2");
    ASSERT_TRUE(store.ok());
    auto staged = store->BeginStaging(kChannel, v1);
    ASSERT_TRUE(staged.ok());
    for (uint32_t i = 0; i < 5; ++i) {
      ASSERT_TRUE(
          staged->PutChunk(ChunkIndex(i), store_test::ChunkOf(flat, v1, ChunkIndex(i))).ok());
    }
    ASSERT_TRUE(staged->Flush().ok());
  }
  Node& seed = AddNode(1, true);
  ASSERT_TRUE(StageAndCommit(*seed.store, kChannel, Version(1), files).ok());
  ASSERT_TRUE(seed.swarm->Seed(v1, SignManifestWithSecret(v1, kSecret), nullptr).ok());
  Node& agent = AddNode(2, false);
  ASSERT_TRUE(agent.swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).ok());
  EXPECT_EQ(agent.swarm->progress().chunks_done, 5u);
  Mesh();
  ASSERT_TRUE(agent.swarm->WaitComplete(kWait).ok());
  ASSERT_TRUE(agent.swarm->CommitTarget().ok());
  EXPECT_TRUE(agent.store->Verify(kChannel, Version(1)).ok());
  // Only the missing chunks crossed the wire.
  uint64_t missing_bytes = 0;
  for (uint32_t i = 5; i < v1.chunk_count(); ++i)
    missing_bytes += v1.ChunkRange(ChunkIndex(i)).size;
  EXPECT_EQ(agent.swarm->progress().bytes_received, missing_bytes);
}

// An authentic payload (its hash is the manifest's) that decodes to the wrong bytes: the agent
// writes the decoded blocks to the staging before the chunk's hash is checked, so the check must
// keep the chunk unverified (never served, never committed); the agent then fetches whole chunks
// and commits exactly the published bytes.
TEST_F(Swarm, DeltaChunkThatFailsItsHashIsNotVerifiedAndIsFetchedWhole) {
  Node& seed = AddNode(1, /*source=*/true);
  const auto v1_files = SampleFiles(2, 4);
  ASSERT_TRUE(StageAndCommit(*seed.store, kChannel, Version(1), v1_files).ok());
  Manifest v1 = MakeManifest(kChannel, Version(1), v1_files);
  Node& agent = AddNode(2, false);
  ASSERT_TRUE(StageAndCommit(*agent.store, kChannel, Version(1), v1_files).ok());

  const auto v2_files = NextStep(v1_files);
  ASSERT_TRUE(StageAndCommit(*seed.store, kChannel, Version(2), v2_files).ok());
  Manifest v2 = MakeManifest(kChannel, Version(2), v2_files);
  const std::string flat1 = Flat(v1_files), flat2 = Flat(v2_files);
  auto cache = std::make_shared<PayloadCache>(v2.version);
  ASSERT_TRUE(MakeDelta(v1, flat1, v2, flat2, *cache).ok());
  // Chunk 0 changed (NextStep flips byte 10). Re-encode it against a base that differs from v1,
  // then make its header name v1's chunk: it parses, applies and fails only on the result hash.
  const ChunkIndex bad(0);
  ASSERT_TRUE(cache->Contains(bad));
  const ByteRange r = v1.ChunkRange(bad);
  std::string other_base = flat1.substr(r.offset, r.size);
  for (size_t k = 0; k < other_base.size(); k += 7) other_base[k] ^= 0x21;
  codec::ChunkEncodeOptions opt;
  opt.xor_transform = codec::Transform::kSparse;
  opt.try_full_above = 2.0;  // never `full`, which would not depend on the base
  codec::CodecScratch scratch;
  const std::vector<codec::Segment> segs = codec::ChunkSegments(v2, bad);
  auto forged = codec::EncodeChunk(
      codec::HashedChunk::Compute(AsBytes(other_base), v1.hash_algorithm),
      codec::HashedChunk::Compute(AsBytes(std::string_view(flat2).substr(r.offset, r.size)),
                                  v1.hash_algorithm),
      segs, opt, scratch);
  ASSERT_TRUE(forged.ok());
  ASSERT_EQ(forged->encoding, ChunkEncoding::kXor);
  std::memcpy(forged->payload.data() + 32, v1.chunk_hashes[0].data(), 32);  // base hash field
  v2.delta->chunks[0].encoding = ChunkEncoding::kXor;
  v2.delta->chunks[0].payload_size = forged->payload.size();
  v2.delta->chunks[0].payload_hash = HashBytes(v2.hash_algorithm, forged->payload);
  cache->Put(bad, forged->payload);

  ASSERT_TRUE(seed.swarm->Seed(v2, SignManifestWithSecret(v2, kSecret), cache).ok());
  // The seed is the only source of the whole chunk 0 after the fallback, though it sent that
  // chunk (as a payload) already and most chunks are `same`: its first round covers only the
  // chunks with payloads, so the repeat is held briefly, then served.
  ASSERT_TRUE(agent.swarm->Fetch(v2, SignManifestWithSecret(v2, kSecret)).ok());
  ASSERT_TRUE(agent.swarm->progress().delta);
  Mesh();
  const Status done = CompleteWhileTimeMoves(agent);
  ASSERT_TRUE(done.ok()) << done.ToString() << " done " << agent.swarm->progress().chunks_done
                         << "/" << agent.swarm->progress().chunks_total << " failed "
                         << agent.swarm->progress().chunks_failed << " peers "
                         << agent.swarm->progress().peers << " err "
                         << agent.swarm->progress().error;
  // The failed decode switched the agent to whole chunks.
  EXPECT_FALSE(agent.swarm->progress().delta);
  ASSERT_TRUE(agent.swarm->CommitTarget().ok());
  EXPECT_EQ(ReadAll(agent.store->CurrentPath(kChannel) / "a.safetensors"), v2_files[0].bytes);
  EXPECT_TRUE(agent.store->Verify(kChannel, Version(2)).ok());
}

// After a rollback to a version this node does not keep, it fetches that older version
// (refusing it as "older than the target" would wedge the channel).
TEST_F(Swarm, AnyOtherVersionReplacesTheTargetOlderOnesIncluded) {
  Node& agent = AddNode(2, false);
  Manifest v2 = MakeManifest(kChannel, Version(2), SampleFiles(7));
  Manifest v1 = MakeManifest(kChannel, Version(1), SampleFiles(8));
  Manifest v3 = MakeManifest(kChannel, Version(3), SampleFiles(9));
  ASSERT_TRUE(agent.swarm->Fetch(v2, SignManifestWithSecret(v2, kSecret)).ok());
  ASSERT_TRUE(agent.swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).ok());
  EXPECT_EQ(agent.swarm->progress().version, Version(1));
  ASSERT_TRUE(agent.swarm->Fetch(v3, SignManifestWithSecret(v3, kSecret)).ok());
  auto staging = agent.store->ListStaging(kChannel);
  ASSERT_TRUE(staging.ok());
  EXPECT_EQ(*staging, std::vector<Version>{Version(3)});
  EXPECT_EQ(agent.swarm->progress().version, Version(3));
}

// A commit that failed for want of disk space (here: the manifest's place is taken)
// succeeds when retried once the space is back, with no restart.
TEST_F(Swarm, ACommitThatFailedIsRetriedOnceTheCauseIsGone) {
  Node& seed = AddNode(1, /*source=*/true);
  Node& agent = AddNode(2, false);
  const auto files = SampleFiles(14);
  ASSERT_TRUE(StageAndCommit(*seed.store, kChannel, Version(1), files).ok());
  Manifest v1 = MakeManifest(kChannel, Version(1), files);
  ASSERT_TRUE(seed.swarm->Seed(v1, SignManifestWithSecret(v1, kSecret), nullptr).ok());
  ASSERT_TRUE(agent.swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).ok());
  Mesh();
  ASSERT_TRUE(agent.swarm->WaitComplete(kWait).ok());
  const std::filesystem::path blocker = dir_.path() / "n2" / kChannel / "manifests" / "1.wcm";
  std::filesystem::create_directories(blocker / "x");
  EXPECT_FALSE(agent.swarm->CommitTarget().ok());
  std::filesystem::remove_all(blocker);
  ASSERT_TRUE(agent.swarm->CommitTarget().ok());
  EXPECT_TRUE(agent.store->Verify(kChannel, Version(1)).ok());
  EXPECT_EQ(*agent.store->Current(kChannel), Version(1));
}

// The rolled-back-to version is served by a node that keeps it, and a node that does not keep
// it fetches it from that node.
TEST_F(Swarm, AnOlderVersionIsFetchedFromAPeerThatKeepsIt) {
  Node& keeper = AddNode(1, false);
  Node& agent = AddNode(2, false);
  auto v1_files = SampleFiles(12);
  Manifest v1 = MakeManifest(kChannel, Version(1), v1_files);
  Manifest v2 = MakeManifest(kChannel, Version(2), SampleFiles(13));
  ASSERT_TRUE(StageAndCommit(*keeper.store, kChannel, Version(1), v1_files).ok());
  ASSERT_TRUE(agent.swarm->Fetch(v2, SignManifestWithSecret(v2, kSecret)).ok());
  ASSERT_TRUE(keeper.swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).ok());
  ASSERT_TRUE(agent.swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).ok());
  Mesh();
  ASSERT_TRUE(agent.swarm->WaitComplete(kWait).ok()) << agent.swarm->progress().error;
  ASSERT_TRUE(agent.swarm->CommitTarget().ok());
  EXPECT_TRUE(agent.store->Verify(kChannel, Version(1)).ok());
}

}  // namespace
}  // namespace weightcast::node

namespace weightcast::node {
namespace {

TEST_F(Swarm, TimesChunkFetchesAndNamesThePeerOfABadChunk) {
  metrics::Registry registry;
  metrics::Histogram& fetch_seconds =
      registry.Histogram("fetch_seconds", "h", metrics::ExponentialBuckets(0.001, 4, 8));
  std::mutex mu;
  std::vector<uint64_t> bad_peers;
  tweak_ = [&](uint64_t id, SwarmNodeOptions& o) {
    if (id == 1) return;
    o.chunk_fetch_seconds = &fetch_seconds;
    o.on_bad_chunk = [&](PeerId peer) {
      std::lock_guard lock(mu);
      bad_peers.push_back(peer.value());
    };
  };
  Node& seed = AddNode(1, true);
  const auto files = SampleFiles(3, 4);
  ASSERT_TRUE(StageAndCommit(*seed.store, kChannel, Version(1), files).ok());
  Manifest v1 = MakeManifest(kChannel, Version(1), files);
  Node& agent = AddNode(2, false);
  ASSERT_TRUE(seed.swarm->Seed(v1, SignManifestWithSecret(v1, kSecret), nullptr).ok());
  ASSERT_TRUE(agent.swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).ok());
  Mesh();
  ASSERT_TRUE(agent.swarm->WaitComplete(kWait).ok());
  // Every chunk came from the one peer it was asked of: each is timed once at most (the last
  // one's event may still be on its way when WaitComplete returns).
  const uint64_t chunks = agent.swarm->progress().chunks_total;
  EXPECT_GE(fetch_seconds.count(), 1u);
  EXPECT_LE(fetch_seconds.count(), chunks);
  EXPECT_GE(fetch_seconds.sum(), 0.0);
  {
    std::lock_guard lock(mu);
    EXPECT_TRUE(bad_peers.empty());
  }

  // A corrupt uploader is named by its node id.
  Node& bad = AddNode(3, true, {}, /*corrupt=*/true);
  ASSERT_TRUE(StageAndCommit(*bad.store, kChannel, Version(1), files).ok());
  ASSERT_TRUE(bad.swarm->Seed(v1, SignManifestWithSecret(v1, kSecret), nullptr).ok());
  Node& victim = AddNode(4, false);
  ASSERT_TRUE(victim.swarm->Fetch(v1, SignManifestWithSecret(v1, kSecret)).ok());
  victim.swarm->SetPeers(std::vector<PeerAddress>{bad.address, victim.address});
  bad.swarm->SetPeers(std::vector<PeerAddress>{bad.address, victim.address});
  ASSERT_TRUE(WaitForBadChunk(4));
  std::lock_guard lock(mu);
  ASSERT_FALSE(bad_peers.empty());
  EXPECT_EQ(bad_peers.front(), 3u);
}

}  // namespace
}  // namespace weightcast::node
