#include "publish/version_builder.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "format/safetensors.h"
#include "hash/digest.h"
#include "store/layout.h"
#include "synth/model.h"
#include "testing/temp_dir.h"
#include "trust/signed_manifest.h"
#include "unit/synth/tiny_shape.h"

namespace weightcast::publish {
namespace {

namespace fs = std::filesystem;
using ::weightcast::testing::TempDir;

constexpr std::string_view kSecret = "publish-test-secret";

using synth::testing::TinyShape;

// A tiny sharded model in root/step-0000 and `steps` RL-like steps in root/step-0001...
void WriteTrainer(const fs::path& root, uint64_t steps) {
  synth::SynthModelOptions model;
  model.out_dir = root / "step-0000";
  model.shape = TinyShape();
  model.shard_bytes = 400'000;
  model.threads = 2;
  auto summary = synth::WriteSynthModel(model);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  if (steps == 0) return;
  synth::SynthStepsOptions o;
  o.from = model.out_dir;
  o.out_dir = root;
  o.steps = steps;
  o.threads = 2;
  o.adam.lr = 1e-4;  // a few percent of elements change, as in RL post-training
  auto stats = synth::WriteSynthSteps(o);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
}

PrepareOptions Options() {
  PrepareOptions o;
  o.channel = "policy";
  o.secret = std::string(kSecret);
  o.build.chunk_size = kMinChunkSize;  // many chunks from a small model
  o.build.threads = 2;
  o.codec.threads = 2;
  return o;
}

struct Fixture {
  TempDir dir;
  fs::path trainer = dir.path() / "trainer";
  Store store;
  static Store OpenStore(const fs::path& root) {
    auto store = Store::Open(root);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return std::move(store).value();
  }
  explicit Fixture(uint64_t steps) : store(OpenStore(dir.path() / "store")) {
    WriteTrainer(trainer, steps);
  }
};

ino_t Inode(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_ino;
}

TEST(PrepareVersion, FirstVersionIsFullSignedAndCommitted) {
  Fixture f(0);
  auto v = PrepareVersion(f.store, f.trainer / "step-0000", Options());
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->manifest.version, Version(1));
  EXPECT_FALSE(v->manifest.delta.has_value());
  EXPECT_EQ(v->payloads, nullptr);
  EXPECT_EQ(v->payload_bytes, 0u);
  EXPECT_GT(v->manifest.chunk_count(), 4u);

  auto current = f.store.Current("policy");
  ASSERT_TRUE(current.ok());
  EXPECT_EQ(*current, Version(1));
  EXPECT_TRUE(f.store.Verify("policy", Version(1)).ok());

  auto verified = VerifySignedManifestWithSecret(v->signed_manifest, kSecret);
  ASSERT_TRUE(verified.ok()) << verified.status().ToString();
  EXPECT_EQ(verified->root, v->manifest.root);
  EXPECT_EQ(VerifySignedManifestWithSecret(v->signed_manifest, "another secret").status().code(),
            Code::kUnauthenticated);
}

TEST(PrepareVersion, DeltaPayloadsDecodedOntoTheBaseReproduceTheTarget) {
  Fixture f(1);
  auto v1 = PrepareVersion(f.store, f.trainer / "step-0000", Options());
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  auto v2 = PrepareVersion(f.store, f.trainer / "step-0001", Options());
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();

  const Manifest& target = v2->manifest;
  EXPECT_EQ(target.version, Version(2));
  ASSERT_TRUE(target.delta.has_value());
  EXPECT_EQ(target.delta->base_version, Version(1));
  EXPECT_EQ(target.delta->base_root, v1->manifest.root);
  ASSERT_EQ(target.delta->chunks.size(), target.chunk_count());
  // The delta section is signed but not part of the root: the same bytes keep their identity.
  EXPECT_EQ(ComputeRoot(target), target.root);
  EXPECT_TRUE(ValidateManifest(target).ok());
  auto verified = VerifySignedManifestWithSecret(v2->signed_manifest, kSecret);
  ASSERT_TRUE(verified.ok()) << verified.status().ToString();
  ASSERT_TRUE(verified->delta.has_value());
  EXPECT_EQ(verified->delta->chunks.size(), target.chunk_count());

  // Every chunk that travels has its payload in the cache, with the size and hash of the table.
  ASSERT_NE(v2->payloads, nullptr);
  EXPECT_EQ(v2->payloads->version(), Version(2));
  uint64_t table_bytes = 0;
  size_t same = 0;
  for (uint32_t i = 0; i < target.chunk_count(); ++i) {
    const DeltaChunk& d = target.delta->chunks[i];
    std::optional<HeldBytes> payload = v2->payloads->Get(ChunkIndex(i));
    if (d.encoding == ChunkEncoding::kSame) {
      ++same;
      EXPECT_FALSE(payload.has_value()) << "chunk " << i;
      continue;
    }
    ASSERT_TRUE(payload.has_value()) << "chunk " << i;
    EXPECT_EQ(payload->bytes.size(), d.payload_size);
    EXPECT_EQ(HashBytes(target.hash_algorithm, payload->bytes), d.payload_hash);
    table_bytes += d.payload_size;
  }
  EXPECT_EQ(v2->payload_bytes, table_bytes);
  EXPECT_EQ(v2->payloads->bytes(), table_bytes);
  EXPECT_LT(table_bytes, target.total_size()) << "a small RL step should travel smaller";

  // What an agent holding v1 does: decode each payload onto its base, compare with the target.
  auto base_bytes =
      codec::SnapshotReader::Open(f.store.VersionPath("policy", Version(1)), v1->manifest);
  ASSERT_TRUE(base_bytes.ok()) << base_bytes.status().ToString();
  auto target_bytes = codec::SnapshotReader::Open(f.trainer / "step-0001", target);
  ASSERT_TRUE(target_bytes.ok()) << target_bytes.status().ToString();
  uint32_t decoded = 0;
  std::vector<uint8_t> scratch;
  codec::VersionCodecOptions decode_options;
  decode_options.threads = 2;
  Status st = codec::DecodeVersion(
      v1->manifest, *base_bytes, target,
      [&](ChunkIndex i) -> Result<std::span<const uint8_t>> {
        std::optional<HeldBytes> p = v2->payloads->Get(i);
        if (!p) return NotFound("no payload for chunk " + std::to_string(i.value()));
        return p->bytes;
      },
      [&](ChunkIndex i, std::span<const uint8_t> bytes) {
        auto expected = target_bytes->Read(target.ChunkRange(i), scratch);
        EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), expected.begin(), expected.end()))
            << "chunk " << i.value();
        ++decoded;
        return Status::Ok();
      },
      decode_options);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(decoded, target.chunk_count());
  EXPECT_GT(same + v2->payloads->size(), 0u);
}

TEST(PrepareVersion, EachStepIsADeltaAgainstTheOneBefore) {
  Fixture f(2);
  for (int step = 0; step <= 2; ++step) {
    char name[16];
    std::snprintf(name, sizeof name, "step-%04d", step);
    auto v = PrepareVersion(f.store, f.trainer / name, Options());
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(v->manifest.version, Version(step + 1));
    if (step > 0) {
      ASSERT_TRUE(v->manifest.delta.has_value());
      EXPECT_EQ(v->manifest.delta->base_version, Version(step));
    }
  }
}

TEST(PrepareVersion, DeltaOffPublishesFull) {
  Fixture f(1);
  ASSERT_TRUE(PrepareVersion(f.store, f.trainer / "step-0000", Options()).ok());
  PrepareOptions o = Options();
  o.delta = false;
  auto v2 = PrepareVersion(f.store, f.trainer / "step-0001", o);
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_FALSE(v2->manifest.delta.has_value());
  EXPECT_EQ(v2->payloads, nullptr);
}

TEST(PrepareVersion, AnotherChunkSizeThanTheBaseIsFull) {
  Fixture f(1);
  ASSERT_TRUE(PrepareVersion(f.store, f.trainer / "step-0000", Options()).ok());
  PrepareOptions o = Options();
  o.build.chunk_size = 2 * kMinChunkSize;
  auto v2 = PrepareVersion(f.store, f.trainer / "step-0001", o);
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_FALSE(v2->manifest.delta.has_value());
}

TEST(PrepareVersion, AutoChunkSizeFollowsTheSizeThenKeepsTheChannels) {
  Fixture f(1);
  PrepareOptions o = Options();
  o.build.chunk_size = kAutoChunkSize;
  auto v1 = PrepareVersion(f.store, f.trainer / "step-0000", o);
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  EXPECT_EQ(v1->manifest.chunk_size, ChooseChunkSize(v1->manifest.total_size()));
  // The next version keeps it, so it is a delta against the first.
  auto v2 = PrepareVersion(f.store, f.trainer / "step-0001", o);
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_EQ(v2->manifest.chunk_size, v1->manifest.chunk_size);
  EXPECT_TRUE(v2->manifest.delta.has_value());
}

TEST(ResolveChunkSize, ToldThenTheChannelsThenTheRule) {
  Manifest current;
  current.chunk_size = 4 * kMinChunkSize;
  const uint64_t size = uint64_t{500'000'000'000};
  EXPECT_EQ(ResolveChunkSize(2 * kMinChunkSize, size, &current), 2 * kMinChunkSize);
  EXPECT_EQ(ResolveChunkSize(kAutoChunkSize, size, &current), 4 * kMinChunkSize);
  EXPECT_EQ(ResolveChunkSize(kAutoChunkSize, size, nullptr), ChooseChunkSize(size));
}

TEST(PrepareVersion, CopiesByDefaultAndHardLinksOnlyWhenAsked) {
  Fixture f(1);
  auto v1 = PrepareVersion(f.store, f.trainer / "step-0000", Options());
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  EXPECT_EQ(v1->import_mode, ImportMode::kCopy);
  const std::string file = v1->manifest.files.front().path;
  EXPECT_NE(Inode(f.trainer / "step-0000" / file),
            Inode(f.store.VersionPath("policy", Version(1)) / file));

  PrepareOptions o = Options();
  o.import = ImportPolicy::kHardlink;
  auto v2 = PrepareVersion(f.store, f.trainer / "step-0001", o);
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_EQ(v2->import_mode, ImportMode::kHardlink);
  EXPECT_EQ(Inode(f.trainer / "step-0001" / file),
            Inode(f.store.VersionPath("policy", Version(2)) / file));
}

// Trainers save every step to the same path (cp, open('wb'), save_file): with the default
// import the committed version must not change when the trainer's file does.
TEST(PrepareVersion, ACheckpointRewrittenInPlaceLeavesTheStoreIntact) {
  Fixture f(1);
  auto v1 = PrepareVersion(f.store, f.trainer / "step-0000", Options());
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  const std::string file = v1->manifest.files.front().path;
  {
    std::fstream rewrite(f.trainer / "step-0000" / file,
                         std::ios::in | std::ios::out | std::ios::binary);
    rewrite.seekp(static_cast<std::streamoff>(v1->manifest.files.front().size / 2));
    rewrite.write("overwritten by the next step", 28);
  }
  const Status verified = f.store.Verify("policy", Version(1));
  EXPECT_TRUE(verified.ok()) << "the trainer's in-place write reached the committed version: "
                             << verified.ToString();
}

TEST(PrepareVersion, RefusesADirectoryWithoutTensorsUnlessAllowed) {
  Fixture f(0);
  const fs::path text = f.dir.path() / "txtonly";
  fs::create_directories(text);
  std::ofstream(text / "readme.txt") << "hi\n";
  auto refused = PrepareVersion(f.store, text, Options());
  ASSERT_EQ(refused.status().code(), Code::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("no tensors"), std::string::npos)
      << refused.status().ToString();
  EXPECT_EQ(f.store.Current("policy").status().code(), Code::kNotFound);
  EXPECT_EQ(*f.store.NextVersion("policy"), Version(1));

  PrepareOptions o = Options();
  o.allow_no_tensors = true;
  auto allowed = PrepareVersion(f.store, text, o);
  ASSERT_TRUE(allowed.ok()) << allowed.status().ToString();
  EXPECT_EQ(*f.store.Current("policy"), Version(1));
}

TEST(PrepareVersion, MinVersionRaisesTheNumber) {
  Fixture f(0);
  PrepareOptions o = Options();
  o.min_version = Version(7);
  auto v = PrepareVersion(f.store, f.trainer / "step-0000", o);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->manifest.version, Version(7));
}

TEST(PrepareVersion, MetadataIsCarriedOutsideTheRoot) {
  Fixture f(0);
  PrepareOptions o = Options();
  o.metadata[std::string(kSourceMetadataKey)] = "step-0000";
  auto v = PrepareVersion(f.store, f.trainer / "step-0000", o);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  auto stored = f.store.GetManifest("policy", Version(1));
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->metadata.at(std::string(kSourceMetadataKey)), "step-0000");
}

TEST(PrepareVersion, BadInputLeavesTheStoreUnchanged) {
  Fixture f(0);
  fs::create_directories(f.dir.path() / "empty");
  auto empty = PrepareVersion(f.store, f.dir.path() / "empty", Options());
  EXPECT_FALSE(empty.ok());
  auto missing = PrepareVersion(f.store, f.dir.path() / "nope", Options());
  EXPECT_FALSE(missing.ok());
  PrepareOptions no_secret = Options();
  no_secret.secret.clear();
  EXPECT_EQ(PrepareVersion(f.store, f.trainer / "step-0000", no_secret).status().code(),
            Code::kInvalidArgument);
  PrepareOptions bad_channel = Options();
  bad_channel.channel = "../x";
  EXPECT_EQ(PrepareVersion(f.store, f.trainer / "step-0000", bad_channel).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(f.store.Current("policy").status().code(), Code::kNotFound);
  auto next = f.store.NextVersion("policy");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, Version(1));
}

// One pass over the bytes (hashing while encoding, from the store's copy) must give exactly the
// manifest that hashing the trainer's directory gives: same chunk hashes, same root.
TEST(PrepareVersion, OnePassManifestEqualsBuildManifestOfTheDirectory) {
  Fixture f(2);
  for (const char* step : {"step-0000", "step-0001", "step-0002"}) {
    auto v = PrepareVersion(f.store, f.trainer / step, Options());
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    auto ckpt = OpenCheckpoint(f.trainer / step);
    ASSERT_TRUE(ckpt.ok());
    auto want = BuildManifest(*ckpt, "policy", v->manifest.version, Options().build);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(v->manifest.chunk_hashes, want->chunk_hashes) << step;
    EXPECT_EQ(v->manifest.root, want->root) << step;
    EXPECT_EQ(v->manifest.delta.has_value(), std::string(step) != "step-0000");
    EXPECT_TRUE(f.store.Verify("policy", v->manifest.version).ok());
  }
}

// A one-file model held in memory: four bf16 tensors, `changed` of every 64 elements of each
// moved by `step`.
std::vector<uint8_t> ModelImage(int step) {
  std::vector<TensorSpec> specs;
  for (int t = 0; t < 4; ++t) {
    specs.push_back({"layer" + std::to_string(t) + ".weight", DType::kBF16, {256, 160}});
  }
  auto header = EncodeSafetensorsHeader(specs, {});
  EXPECT_TRUE(header.ok());
  std::vector<uint8_t> image(header->bytes.begin(), header->bytes.end());
  const size_t elements = 4 * 256 * 160;
  for (size_t i = 0; i < elements; ++i) {
    uint16_t v = static_cast<uint16_t>(0x3c00 + (i * 2654435761u >> 20) % 512);
    if (i % 64 < 3) v = static_cast<uint16_t>(v + step);  // a few percent change per step
    image.push_back(static_cast<uint8_t>(v & 0xff));
    image.push_back(static_cast<uint8_t>(v >> 8));
  }
  return image;
}

fs::path WriteImage(const fs::path& dir, const std::vector<uint8_t>& image) {
  fs::create_directories(dir);
  std::ofstream(dir / "model.safetensors", std::ios::binary)
      .write(reinterpret_cast<const char*>(image.data()),
             static_cast<std::streamsize>(image.size()));
  return dir;
}

// The same bytes published from memory and from a directory are the same versions: roots, chunk
// hashes, delta tables; the store holds the image's bytes.
TEST(PrepareVersionFromMemory, GivesTheVersionsOfTheSameBytesInADirectory) {
  TempDir dir;
  Store from_dir = Fixture::OpenStore(dir.path() / "a");
  Store from_memory = Fixture::OpenStore(dir.path() / "b");
  std::vector<uint8_t> held_bytes;
  std::optional<HeldBase> held;
  for (int step = 0; step < 3; ++step) {
    const std::vector<uint8_t> image = ModelImage(step);
    auto want = PrepareVersion(
        from_dir, WriteImage(dir.path() / ("step" + std::to_string(step)), image), Options());
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    auto got = PrepareVersionFromMemory(from_memory, {"model.safetensors", image},
                                        held ? &*held : nullptr, Options());
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->manifest.root, want->manifest.root) << step;
    EXPECT_EQ(got->manifest.chunk_hashes, want->manifest.chunk_hashes) << step;
    EXPECT_EQ(got->manifest.fast_hashes, want->manifest.fast_hashes) << step;
    ASSERT_EQ(got->manifest.delta.has_value(), step > 0);
    if (step > 0) {
      EXPECT_GT(got->payload_bytes, 0u);
      EXPECT_EQ(got->payload_bytes, want->payload_bytes);
      for (size_t c = 0; c < got->manifest.delta->chunks.size(); ++c) {
        EXPECT_EQ(got->manifest.delta->chunks[c].payload_hash,
                  want->manifest.delta->chunks[c].payload_hash);
      }
    }
    EXPECT_TRUE(from_memory.Verify("policy", got->manifest.version).ok());
    EXPECT_TRUE(VerifySignedManifestWithSecret(got->signed_manifest, kSecret).ok());
    held_bytes = image;
    held = HeldBase{got->manifest.version, got->manifest.root, held_bytes};
  }
}

// The held image is read instead of the base's files, and only when it is the current version.
TEST(PrepareVersionFromMemory, ReadsTheHeldBaseOnlyWhenItIsTheCurrentVersion) {
  TempDir dir;
  Store store = Fixture::OpenStore(dir.path() / "store");
  const std::vector<uint8_t> first = ModelImage(0);
  auto v1 = PrepareVersionFromMemory(store, {"model.safetensors", first}, nullptr, Options());
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  // Without the base's file only the held image can be the base.
  fs::remove(store.VersionPath("policy", Version(1)) / "model.safetensors");
  const std::vector<uint8_t> second = ModelImage(1);
  HeldBase other_root{Version(1), Digest{}, first};
  EXPECT_FALSE(
      PrepareVersionFromMemory(store, {"model.safetensors", second}, &other_root, Options()).ok());
  HeldBase held{Version(1), v1->manifest.root, first};
  auto v2 = PrepareVersionFromMemory(store, {"model.safetensors", second}, &held, Options());
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_TRUE(v2->manifest.delta.has_value());
  EXPECT_TRUE(store.Verify("policy", Version(2)).ok());
}

TEST(PrepareVersionFromMemory, BadBytesLeaveTheStoreUnchanged) {
  TempDir dir;
  Store store = Fixture::OpenStore(dir.path() / "store");
  std::vector<uint8_t> image = ModelImage(0);
  image.resize(image.size() - 1);  // the data no longer reaches the size the header says
  auto torn = PrepareVersionFromMemory(store, {"model.safetensors", image}, nullptr, Options());
  EXPECT_EQ(torn.status().code(), Code::kCorrupt) << torn.status().ToString();
  auto nested =
      PrepareVersionFromMemory(store, {"a/model.safetensors", ModelImage(0)}, nullptr, Options());
  EXPECT_EQ(nested.status().code(), Code::kInvalidArgument) << nested.status().ToString();
  EXPECT_EQ(store.Current("policy").status().code(), Code::kNotFound);
  for (const auto& entry : fs::recursive_directory_iterator(dir.path() / "store")) {
    EXPECT_FALSE(entry.is_regular_file() && entry.path().filename() == "model.safetensors")
        << entry.path();
  }
}

TEST(PrepareVersion, AFileMissingFromTheIndexFailsCleanly) {
  Fixture f(1);
  ASSERT_TRUE(PrepareVersion(f.store, f.trainer / "step-0000", Options()).ok());
  // The index names a shard that is gone: refused before anything is imported or encoded.
  fs::path step = f.trainer / "step-0001";
  fs::path shard;
  for (const auto& e : fs::directory_iterator(step)) {
    if (e.path().extension() == ".safetensors") shard = e.path();
  }
  ASSERT_FALSE(shard.empty());
  fs::remove(shard);
  auto v = PrepareVersion(f.store, step, Options());
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(*f.store.Current("policy"), Version(1));
  EXPECT_EQ(*f.store.NextVersion("policy"), Version(2));
  auto left = store::ListDir(f.dir.path() / "store/policy/staging");
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
}

TEST(ReloadVersion, RebuildsTheSamePayloadsAndSignature) {
  Fixture f(1);
  ASSERT_TRUE(PrepareVersion(f.store, f.trainer / "step-0000", Options()).ok());
  auto v2 = PrepareVersion(f.store, f.trainer / "step-0001", Options());
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  auto again = ReloadVersion(f.store, Version(2), Options());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->signed_manifest, v2->signed_manifest);
  ASSERT_NE(again->payloads, nullptr);
  EXPECT_EQ(again->payloads->Chunks(), v2->payloads->Chunks());
  for (ChunkIndex i : v2->payloads->Chunks()) {
    const std::span<const uint8_t> a = again->payloads->Get(i)->bytes;
    const std::span<const uint8_t> b = v2->payloads->Get(i)->bytes;
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << "chunk " << i.value();
  }
  EXPECT_EQ(again->payload_bytes, v2->payload_bytes);

  // Without payloads (a publisher about to publish its next version): the same signed
  // manifest, delta table included, and nothing encoded.
  auto bare = ReloadVersion(f.store, Version(2), Options(), /*encode_payloads=*/false);
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(bare->signed_manifest, v2->signed_manifest);
  EXPECT_EQ(bare->payloads, nullptr);
  EXPECT_EQ(bare->encode_seconds, 0);
  EXPECT_EQ(bare->payload_bytes, v2->payload_bytes);

  auto full = ReloadVersion(f.store, Version(1), Options());
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->payloads, nullptr);
  EXPECT_EQ(ReloadVersion(f.store, Version(9), Options()).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace weightcast::publish

namespace weightcast::publish {
namespace {

// The publisher warns about these: everything but safetensors files and their index.
TEST(PrepareVersion, ListsTheFilesThatAreNotSafetensors) {
  Fixture f(0);
  const fs::path dir = f.trainer / "step-0000";
  {
    std::ofstream out(dir / "optimizer.pt", std::ios::binary);
    out << std::string(3000, 'x');
  }
  auto v = PrepareVersion(f.store, dir, Options());
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  std::map<std::string, uint64_t> other(v->other_files.begin(), v->other_files.end());
  EXPECT_EQ(other.count("optimizer.pt"), 1u);
  EXPECT_EQ(other["optimizer.pt"], 3000u);
  for (const auto& [name, size] : other) {
    EXPECT_FALSE(name.ends_with(".safetensors")) << name;
    EXPECT_FALSE(name.ends_with(".safetensors.index.json")) << name;
  }
}

}  // namespace
}  // namespace weightcast::publish
