#include "codec/version_codec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

namespace weightcast::codec {
namespace {

using Bytes = std::vector<uint8_t>;

// A two-file snapshot with tensors of every width, laid out so chunks cut tensors mid-element.
struct Snapshot {
  Manifest manifest;
  Bytes bytes;
};

Manifest Layout(uint64_t chunk_size, uint64_t file0, uint64_t file1) {
  Manifest m;
  m.channel = "test";
  m.chunk_size = chunk_size;
  m.files = {{"a.safetensors", file0, 0}, {"b.safetensors", file1, file0}};
  // 13 bytes of "header", then tensors of widths 2, 4, 1, 8, 2 across both files.
  const DType dtypes[] = {DType::kBF16, DType::kF32, DType::kU8, DType::kF64, DType::kBF16};
  uint64_t at = 13;
  const uint64_t total = file0 + file1;
  for (int k = 0; k < 5 && at < total; ++k) {
    const uint64_t w = ElementWidth(dtypes[k]);
    uint64_t size = std::min<uint64_t>((total / 6) / w * w, (total - at) / w * w);
    m.tensors.push_back({"t" + std::to_string(k), dtypes[k], {size / w}, 0, at, size});
    at += size + 3;  // gaps of plain bytes between tensors
  }
  return m;
}

void Finish(Snapshot& s, uint8_t version, uint8_t root_tag) {
  Manifest& m = s.manifest;
  m.version = Version(version);
  m.chunk_hashes.clear();
  for (uint32_t i = 0; m.ChunkRange(ChunkIndex(i)).size != 0 || i == 0; ++i) {
    const ByteRange r = m.ChunkRange(ChunkIndex(i));
    if (r.size == 0) break;
    m.chunk_hashes.push_back(Sha256(std::span(s.bytes).subspan(r.offset, r.size)));
  }
  m.root = Digest{};
  m.root[0] = root_tag;
}

Snapshot MakeBase(uint64_t seed, uint64_t file0 = 30011, uint64_t file1 = 20003) {
  std::mt19937_64 rng(seed);
  Snapshot s;
  s.manifest = Layout(4096, file0, file1);
  s.bytes.resize(file0 + file1);
  for (auto& b : s.bytes) b = static_cast<uint8_t>(rng());
  Finish(s, 1, 1);
  return s;
}

Snapshot MakeTarget(const Snapshot& base, uint64_t seed, double fraction) {
  std::mt19937_64 rng(seed);
  Snapshot t = base;
  std::bernoulli_distribution pick(fraction);
  for (size_t i = 0; i < t.bytes.size(); ++i) {
    if (i >= 4096 * 3 && i < 4096 * 4) continue;  // one chunk stays the same
    if (pick(rng)) t.bytes[i] ^= static_cast<uint8_t>(1 + rng() % 3);
  }
  Finish(t, 2, 2);
  return t;
}

struct Encoded {
  DeltaInfo info;
  std::map<uint32_t, Bytes> payloads;
};

Encoded Encode(const Snapshot& base, const Snapshot& target, const VersionCodecOptions& opt = {}) {
  Encoded e;
  auto info = EncodeVersion(
      base.manifest, SnapshotReader::FromMemory(base.bytes), target.manifest,
      SnapshotReader::FromMemory(target.bytes),
      [&](ChunkIndex i, std::span<const uint8_t> p) {
        e.payloads[i.value()].assign(p.begin(), p.end());
        return Status::Ok();
      },
      opt);
  EXPECT_TRUE(info.ok()) << info.status().ToString();
  if (info.ok()) e.info = *info;
  return e;
}

Status Decode(const Snapshot& base, Manifest target, const Encoded& e, Bytes* out,
              std::vector<uint32_t>* seen = nullptr) {
  target.delta = e.info;
  out->assign(target.total_size(), 0);
  return DecodeVersion(
      base.manifest, SnapshotReader::FromMemory(base.bytes), target,
      [&](ChunkIndex i) -> Result<std::span<const uint8_t>> {
        auto it = e.payloads.find(i.value());
        if (it == e.payloads.end()) return NotFound("no payload");
        return std::span<const uint8_t>(it->second);
      },
      [&](ChunkIndex i, std::span<const uint8_t> bytes) {
        if (seen) seen->push_back(i.value());
        std::copy(bytes.begin(), bytes.end(), out->begin() + target.ChunkRange(i).offset);
        return Status::Ok();
      },
      {{}, 2, 3});
}

TEST(VersionCodec, RoundTripsAcrossFilesAndCutTensors) {
  for (double fraction : {0.0005, 0.01, 0.2, 1.0}) {
    const Snapshot base = MakeBase(1);
    const Snapshot target = MakeTarget(base, 2, fraction);
    const Encoded e = Encode(base, target, {{}, 2, 3});
    ASSERT_EQ(e.info.chunks.size(), target.manifest.chunk_count());
    EXPECT_EQ(e.info.chunks[3].encoding, ChunkEncoding::kSame);
    EXPECT_EQ(e.info.chunks[3].payload_size, 0u);
    Bytes out;
    const Status s = Decode(base, target.manifest, e, &out);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(out, target.bytes) << "fraction " << fraction;
  }
}

TEST(VersionCodec, SparseChangesMakeSmallPayloads) {
  const Snapshot base = MakeBase(3);
  const Snapshot target = MakeTarget(base, 4, 0.002);
  const Encoded e = Encode(base, target);
  uint64_t total = 0;
  for (const DeltaChunk& d : e.info.chunks) {
    total += d.payload_size;
    EXPECT_NE(d.encoding, ChunkEncoding::kFull);
  }
  EXPECT_LT(total, target.bytes.size() / 5);
}

// The publisher's one-pass encode: same delta table and payloads as EncodeVersion with the
// hashes known, and the chunk hashes the manifest needs, from a target whose hashes are zeros.
void ExpectHashingEncodeMatches(const Snapshot& base, const Snapshot& target) {
  const Encoded want = Encode(base, target);
  Manifest blank = target.manifest;
  std::fill(blank.chunk_hashes.begin(), blank.chunk_hashes.end(), Digest{});
  std::map<uint32_t, Bytes> payloads;
  std::vector<Digest> hashes;
  auto info = EncodeVersionHashing(base.manifest, SnapshotReader::FromMemory(base.bytes), blank,
                                   SnapshotReader::FromMemory(target.bytes),
                                   [&](ChunkIndex i, std::span<const uint8_t> p) {
                                     payloads[i.value()].assign(p.begin(), p.end());
                                     return Status::Ok();
                                   },
                                   &hashes, {{}, 2, 3});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(hashes, target.manifest.chunk_hashes);
  ASSERT_EQ(info->chunks.size(), want.info.chunks.size());
  for (size_t i = 0; i < info->chunks.size(); ++i) {
    EXPECT_EQ(info->chunks[i].encoding, want.info.chunks[i].encoding) << i;
    EXPECT_EQ(info->chunks[i].payload_size, want.info.chunks[i].payload_size) << i;
    EXPECT_EQ(info->chunks[i].payload_hash, want.info.chunks[i].payload_hash) << i;
  }
  EXPECT_EQ(payloads, want.payloads);
}

TEST(VersionCodec, HashingEncodeGivesTheSameDeltaAndTheTargetHashes) {
  const Snapshot base = MakeBase(21);
  ExpectHashingEncodeMatches(base, MakeTarget(base, 22, 0.002));  // sparse, one chunk same
  ExpectHashingEncodeMatches(base, MakeTarget(base, 23, 0.9));    // dense: full chunks
  Snapshot longer = MakeBase(21, 30011, 29000);                   // chunks the base lacks
  longer.manifest = Layout(4096, 30011, 29000);
  Finish(longer, 2, 2);
  ExpectHashingEncodeMatches(base, longer);
}

TEST(VersionCodec, HashingEncodeRefusesWithoutAPlaceForTheHashes) {
  const Snapshot base = MakeBase(24);
  auto info = EncodeVersionHashing(
      base.manifest, SnapshotReader::FromMemory(base.bytes), base.manifest,
      SnapshotReader::FromMemory(base.bytes),
      [](ChunkIndex, std::span<const uint8_t>) { return Status::Ok(); }, nullptr);
  EXPECT_EQ(info.status().code(), Code::kInvalidArgument);
}

TEST(VersionCodec, TargetWithMoreChunksThanBaseSendsTheNewOnesFull) {
  const Snapshot base = MakeBase(5, 30011, 20003);
  Snapshot target = MakeBase(5, 30011, 29000);  // same prefix, longer second file
  target.manifest = Layout(4096, 30011, 29000);
  Finish(target, 2, 2);
  const Encoded e = Encode(base, target);
  EXPECT_EQ(e.info.chunks.back().encoding, ChunkEncoding::kFull);
  Bytes out;
  ASSERT_TRUE(Decode(base, target.manifest, e, &out).ok());
  EXPECT_EQ(out, target.bytes);
}

TEST(VersionCodec, RefusesAWrongBase) {
  const Snapshot base = MakeBase(6);
  const Snapshot target = MakeTarget(base, 7, 0.01);
  const Encoded e = Encode(base, target);
  Snapshot other = MakeBase(8);
  other.manifest.root[0] = 9;
  Bytes out;
  const Status s = Decode(other, target.manifest, e, &out);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.ToString();
}

TEST(VersionCodec, BaseBytesThatDifferFromTheirManifestAreCaughtPerChunk) {
  // The root matches but the bytes held are not the ones hashed: the payload base check or the
  // target hash check catches it; never silent.
  const Snapshot base = MakeBase(9);
  const Snapshot target = MakeTarget(base, 10, 0.01);
  const Encoded e = Encode(base, target);
  Snapshot damaged = base;
  damaged.bytes[5000] ^= 0xFF;
  Bytes out;
  std::vector<uint32_t> seen;
  const Status s = Decode(damaged, target.manifest, e, &out, &seen);
  EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
  EXPECT_NE(s.message().find("chunk 1"), std::string::npos) << s.message();
  EXPECT_EQ(seen, std::vector<uint32_t>{0});
}

TEST(VersionCodec, CorruptPayloadStopsBeforeTheChunkReachesTheSink) {
  const Snapshot base = MakeBase(11);
  const Snapshot target = MakeTarget(base, 12, 0.01);
  Encoded e = Encode(base, target);
  e.payloads.at(2)[e.payloads.at(2).size() / 2] ^= 0x10;
  Bytes out;
  std::vector<uint32_t> seen;
  const Status s = Decode(base, target.manifest, e, &out, &seen);
  EXPECT_EQ(s.code(), Code::kCorrupt);
  EXPECT_EQ(seen, (std::vector<uint32_t>{0, 1}));
}

TEST(VersionCodec, SameChunkWhoseHashesDisagreeIsCorrupt) {
  const Snapshot base = MakeBase(15);
  Snapshot target = MakeTarget(base, 16, 0.01);
  const Encoded e = Encode(base, target);
  ASSERT_EQ(e.info.chunks[3].encoding, ChunkEncoding::kSame);
  target.manifest.chunk_hashes[3][0] ^= 1;  // a manifest that says `same` but lists another hash
  Bytes out;
  std::vector<uint32_t> seen;
  const Status s = Decode(base, target.manifest, e, &out, &seen);
  EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
  EXPECT_EQ(seen, (std::vector<uint32_t>{0, 1, 2}));
}

TEST(VersionCodec, ReadsSnapshotFilesThroughMmap) {
  const Snapshot base = MakeBase(13);
  const Snapshot target = MakeTarget(base, 14, 0.01);
  const auto dir =
      std::filesystem::temp_directory_path() / ("wc_codec_test_" + std::to_string(::getpid()));
  for (const auto* s : {&base, &target}) {
    const auto root = dir / std::to_string(s->manifest.version.value());
    std::filesystem::create_directories(root);
    for (const ManifestFile& f : s->manifest.files) {
      std::ofstream(root / f.path, std::ios::binary)
          .write(reinterpret_cast<const char*>(s->bytes.data() + f.offset),
                 static_cast<std::streamsize>(f.size));
    }
  }
  auto br = SnapshotReader::Open(dir / "1", base.manifest);
  auto tr = SnapshotReader::Open(dir / "2", target.manifest);
  ASSERT_TRUE(br.ok() && tr.ok());
  std::vector<uint8_t> scratch;
  // A chunk that spans both files is gathered; one inside a file is a view.
  const ByteRange spanning{30011 - 100, 200};
  auto v = br->Read(spanning, scratch);
  EXPECT_TRUE(std::equal(v.begin(), v.end(), base.bytes.begin() + spanning.offset));
  // Populated at once (read whole), the same bytes.
  auto whole = SnapshotReader::Open(dir / "1", base.manifest, ReadPattern::kWhole);
  ASSERT_TRUE(whole.ok());
  std::vector<uint8_t> scratch2;
  const ByteRange all{0, base.bytes.size()};
  auto w = whole->Read(all, scratch2);
  EXPECT_TRUE(std::equal(w.begin(), w.end(), base.bytes.begin(), base.bytes.end()));
  std::map<uint32_t, Bytes> payloads;
  auto info = EncodeVersion(base.manifest, *br, target.manifest, *tr,
                            [&](ChunkIndex i, std::span<const uint8_t> p) {
                              payloads[i.value()].assign(p.begin(), p.end());
                              return Status::Ok();
                            });
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  std::filesystem::remove_all(dir);
}

// A base is mapped whole when the delta changes most chunks (a dense RL step reads nearly all
// of it), page by page when it changes few.
TEST(VersionCodec, TheBaseIsReadWholeWhenMostChunksChanged) {
  DeltaInfo dense, sparse;
  for (int i = 0; i < 10; ++i) {
    dense.chunks.push_back({i < 6 ? ChunkEncoding::kXor : ChunkEncoding::kSame, 0, {}});
    sparse.chunks.push_back({i < 5 ? ChunkEncoding::kXor : ChunkEncoding::kSame, 0, {}});
  }
  EXPECT_EQ(BaseReadPattern(dense), ReadPattern::kWhole);
  EXPECT_EQ(BaseReadPattern(sparse), ReadPattern::kSparse);
  EXPECT_EQ(BaseReadPattern(DeltaInfo{}), ReadPattern::kSparse);
}

TEST(Segments, CoverTheChunkAndRealignCutElements) {
  ManifestTensor a{"a", DType::kBF16, {50}, 0, 10, 100};  // [10, 110)
  ManifestTensor b{"b", DType::kF32, {25}, 0, 110, 100};  // [110, 210)
  ManifestTensor c{"c", DType::kF32, {25}, 0, 213, 100};  // [213, 313)
  std::vector<const ManifestTensor*> ts{&a, &b, &c};
  // Chunk [15, 227): starts mid-element of a (odd offset), cuts c mid-element at the end.
  const auto segs = SegmentsForRange(ts, {15, 212});
  EXPECT_EQ(segs, (std::vector<Segment>{{1, 1}, {94, 2}, {100, 4}, {3, 1}, {14, 4}}));
  EXPECT_TRUE(ValidateSegments(segs, 212).ok());
  EXPECT_EQ(SegmentsForRange({}, {0, 7}), (std::vector<Segment>{{7, 1}}));
  EXPECT_TRUE(SegmentsForRange({}, {0, 0}).empty());
}

DeltaInfo Table(uint64_t base_version, std::vector<std::pair<ChunkEncoding, uint64_t>> chunks) {
  DeltaInfo d;
  d.base_version = Version(base_version);
  for (auto [enc, size] : chunks) d.chunks.push_back({enc, size, {}});
  return d;
}

TEST(PlanCatchUp, ChoosesTheCheaperOfChainAndFull) {
  using E = ChunkEncoding;
  std::vector<DeltaInfo> chain{
      Table(1, {{E::kSame, 0}, {E::kXor, 10}, {E::kXor, 400}, {E::kXor, 5}}),
      Table(2, {{E::kSame, 0}, {E::kXor, 20}, {E::kXor, 400}, {E::kFull, 90}, {E::kFull, 70}}),
      Table(3, {{E::kSame, 0}, {E::kXor, 30}, {E::kSame, 0}, {E::kXor, 8}, {E::kXor, 6}}),
  };
  const std::vector<uint64_t> full{100, 100, 100, 100, 100};
  auto plan = PlanCatchUp(chain, full);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto& c = plan->chunks;
  EXPECT_EQ(c[0].action, CatchUpAction::kKeep);
  EXPECT_EQ(c[1].action, CatchUpAction::kApplyChain);
  EXPECT_EQ(c[1].bytes, 60u);
  EXPECT_EQ(c[1].first_step, 0u);
  EXPECT_EQ(c[2].action, CatchUpAction::kFetchFull);   // 800 via the chain
  EXPECT_EQ(c[3].action, CatchUpAction::kApplyChain);  // restart at the full step: 90 + 8
  EXPECT_EQ(c[3].first_step, 1u);
  EXPECT_EQ(c[3].bytes, 98u);
  EXPECT_EQ(c[4].action, CatchUpAction::kApplyChain);  // born in version 2: 70 + 6
  EXPECT_EQ(c[4].bytes, 76u);
  EXPECT_EQ(plan->total_bytes, 0u + 60 + 100 + 98 + 76);
  EXPECT_EQ(plan->all_full_bytes, 500u);
}

TEST(PlanCatchUp, RejectsBadInput) {
  EXPECT_FALSE(PlanCatchUp({}, {}).ok());
  std::vector<DeltaInfo> chain{Table(2, {{ChunkEncoding::kSame, 0}}),
                               Table(1, {{ChunkEncoding::kSame, 0}})};
  EXPECT_FALSE(PlanCatchUp(chain, std::vector<uint64_t>{1}).ok());
  chain.pop_back();
  EXPECT_FALSE(PlanCatchUp(chain, std::vector<uint64_t>{1, 2}).ok());
}

}  // namespace
}  // namespace weightcast::codec
