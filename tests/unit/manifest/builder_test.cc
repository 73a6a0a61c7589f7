#include "manifest/builder.h"

#include <gtest/gtest.h>

#include "manifest_test_util.h"

namespace weightcast {
namespace {

using testing::AddPlainFile;
using testing::FlatBytes;
using testing::MakeSmallCheckpoint;
using testing::TempDir;

std::vector<Digest> NaiveChunkHashes(const std::vector<uint8_t>& flat, uint64_t chunk_size,
                                     HashAlgorithm algorithm) {
  std::vector<Digest> out;
  for (uint64_t pos = 0; pos < flat.size(); pos += chunk_size) {
    const uint64_t n = std::min<uint64_t>(chunk_size, flat.size() - pos);
    out.push_back(HashBytes(algorithm, {flat.data() + pos, n}));
  }
  return out;
}

TEST(BuildManifest, ListsFilesInPathOrderAtContiguousOffsets) {
  TempDir dir;
  Checkpoint ckpt = MakeSmallCheckpoint(dir.path());
  Result<Manifest> m = BuildManifest(ckpt, "policy", Version(3), {.chunk_size = kMinChunkSize});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->files.size(), 4u);
  EXPECT_EQ(m->files[0].path, "config.json");
  EXPECT_EQ(m->files[1].path, "empty.txt");
  EXPECT_EQ(m->files[2].path, "model-00001.safetensors");
  EXPECT_EQ(m->files[3].path, "model-00002.safetensors");
  uint64_t offset = 0;
  for (const ManifestFile& f : m->files) {
    EXPECT_EQ(f.offset, offset) << f.path;
    offset += f.size;
  }
  EXPECT_EQ(m->total_size(), offset);
  EXPECT_EQ(m->total_size(), FlatBytes(ckpt).size());
  EXPECT_EQ(m->channel, "policy");
  EXPECT_EQ(m->version, Version(3));
  EXPECT_EQ(m->chunk_count(), (offset + kMinChunkSize - 1) / kMinChunkSize);
  EXPECT_EQ(m->root, ComputeRoot(*m));
  EXPECT_TRUE(ValidateManifest(*m).ok());
}

TEST(BuildManifest, TranslatesTensorsToAbsoluteSortedOffsets) {
  TempDir dir;
  Checkpoint ckpt = MakeSmallCheckpoint(dir.path());
  Result<Manifest> m = BuildManifest(ckpt, "policy", Version(1), {.chunk_size = kMinChunkSize});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->tensors.size(), 7u);
  for (size_t i = 1; i < m->tensors.size(); ++i) {
    EXPECT_LE(m->tensors[i - 1].offset + m->tensors[i - 1].size, m->tensors[i].offset);
  }
  // Each tensor's bytes in the flat space are the bytes the safetensors header points at.
  const std::vector<uint8_t> flat = FlatBytes(ckpt);
  for (const CheckpointFile& cf : ckpt.files) {
    if (!cf.is_safetensors) continue;
    std::vector<uint8_t> file;
    auto mf = std::find_if(m->files.begin(), m->files.end(),
                           [&](const ManifestFile& f) { return f.path == cf.relative_path; });
    ASSERT_NE(mf, m->files.end());
    const uint32_t file_index = static_cast<uint32_t>(mf - m->files.begin());
    for (const TensorInfo& t : cf.header.tensors) {
      auto mt = std::find_if(m->tensors.begin(), m->tensors.end(),
                             [&](const ManifestTensor& x) { return x.name == t.name; });
      ASSERT_NE(mt, m->tensors.end()) << t.name;
      EXPECT_EQ(mt->file_index, file_index);
      EXPECT_EQ(mt->offset, mf->offset + cf.header.data_offset() + t.begin);
      EXPECT_EQ(mt->size, t.byte_size());
      EXPECT_EQ(mt->dtype, t.dtype);
      EXPECT_EQ(mt->shape, t.shape);
    }
  }
  EXPECT_EQ(m->tensors.front().name, "embed.weight");
  EXPECT_EQ(m->tensors.back().name, "lm_head.weight");
}

TEST(BuildManifestLayout, PlusItsHashesIsTheManifestBuildManifestGives) {
  TempDir dir;
  Checkpoint ckpt = MakeSmallCheckpoint(dir.path());
  const BuildOptions options{.chunk_size = kMinChunkSize};
  Result<Manifest> full = BuildManifest(ckpt, "policy", Version(2), options);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  Result<Manifest> layout = BuildManifestLayout(ckpt, "policy", Version(2), options);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  // Chunk ranges work before the hashes are known; the hashes are placeholders.
  ASSERT_EQ(layout->chunk_count(), full->chunk_count());
  EXPECT_EQ(layout->ChunkRange(ChunkIndex(1)).offset, kMinChunkSize);
  for (const Digest& d : layout->chunk_hashes) EXPECT_EQ(d, Digest{});
  EXPECT_FALSE(ValidateManifest(*layout).ok());

  Manifest m = *layout;
  EXPECT_EQ(FinishManifest(m, {}).code(), Code::kInvalidArgument);  // wrong count
  // BuildManifest adds the fast hashes; the root does not depend on them.
  ASSERT_TRUE(FinishManifest(m, full->chunk_hashes, full->fast_hashes).ok());
  EXPECT_EQ(m.root, full->root);
  EXPECT_EQ(SerializeManifest(m), SerializeManifest(*full));
  EXPECT_EQ(BuildManifestLayout(ckpt, "policy", Version(2), {.chunk_size = 1}).status().code(),
            Code::kInvalidArgument);
}

TEST(HashChunks, EqualsNaiveSingleThreadComputation) {
  TempDir dir;
  Checkpoint ckpt = MakeSmallCheckpoint(dir.path());
  Result<Manifest> m = BuildManifest(ckpt, "policy", Version(1), {.chunk_size = kMinChunkSize});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::vector<uint8_t> flat = FlatBytes(ckpt);
  for (HashAlgorithm algorithm : {HashAlgorithm::kSha256, HashAlgorithm::kXxh3_128}) {
    for (uint64_t chunk_size : {kMinChunkSize, kMinChunkSize + 4097, 3 * kMinChunkSize}) {
      for (size_t threads : {1u, 2u, 5u}) {
        Result<std::vector<Digest>> got =
            HashChunks(dir.path(), m->files, chunk_size, algorithm, threads);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        EXPECT_EQ(*got, NaiveChunkHashes(flat, chunk_size, algorithm))
            << HashAlgorithmName(algorithm) << " chunk " << chunk_size << " threads " << threads;
      }
    }
  }
}

TEST(HashChunks, HashesChunksThatSpanManySmallFiles) {
  TempDir dir;
  Checkpoint ckpt;
  ckpt.root = dir.path();
  // 40 files of 5000 bytes: every 64 KiB chunk covers parts of 14 files.
  for (int i = 0; i < 40; ++i) {
    AddPlainFile(ckpt, "shard/" + std::string(i < 10 ? "0" : "") + std::to_string(i), 5000,
                 static_cast<uint32_t>(i));
  }
  Result<Manifest> m = BuildManifest(ckpt, "tiny", Version(1), {.chunk_size = kMinChunkSize});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->chunk_count(), 4u);
  EXPECT_EQ(m->chunk_hashes,
            NaiveChunkHashes(FlatBytes(ckpt), kMinChunkSize, HashAlgorithm::kSha256));
}

TEST(HashChunks, RunsOfChunksAcrossFilesHashLikeOneChunkAtATime) {
  TempDir dir;
  Checkpoint ckpt;
  ckpt.root = dir.path();
  // ~21 MiB over files of odd sizes, an empty one among them: a worker's run of chunks (8 MiB)
  // starts and ends inside files, and chunks span file boundaries inside and across runs.
  const size_t sizes[] = {3'000'001, 0, 7'340'033, 65'537, 5'000'000, 6'291'459};
  for (size_t i = 0; i < std::size(sizes); ++i) {
    AddPlainFile(ckpt, "f" + std::to_string(i), sizes[i], static_cast<uint32_t>(i + 7));
  }
  Result<Manifest> m = BuildManifest(ckpt, "runs", Version(1), {.chunk_size = kMinChunkSize});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::vector<uint8_t> flat = FlatBytes(ckpt);
  for (uint64_t chunk_size : {kMinChunkSize + 4097, uint64_t{3} << 20, uint64_t{16} << 20}) {
    for (size_t threads : {1u, 3u}) {
      std::vector<Digest> fast;
      Result<std::vector<Digest>> got =
          HashChunks(dir.path(), m->files, chunk_size, HashAlgorithm::kSha256, threads, &fast);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(*got, NaiveChunkHashes(flat, chunk_size, HashAlgorithm::kSha256))
          << "chunk " << chunk_size << " threads " << threads;
      EXPECT_EQ(fast, NaiveChunkHashes(flat, chunk_size, HashAlgorithm::kXxh3_128))
          << "chunk " << chunk_size << " threads " << threads;
    }
  }
}

TEST(HashChunks, FailsWhenAFileSizeDiffersFromItsEntry) {
  TempDir dir;
  Checkpoint ckpt = MakeSmallCheckpoint(dir.path());
  Result<Manifest> m = BuildManifest(ckpt, "policy", Version(1), {.chunk_size = kMinChunkSize});
  ASSERT_TRUE(m.ok());
  testing::WriteBytes(dir.path() / "config.json", testing::RandomBytes(999, 3));
  Result<std::vector<Digest>> got =
      HashChunks(dir.path(), m->files, kMinChunkSize, HashAlgorithm::kSha256, 2);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("config.json"), std::string::npos)
      << got.status().message();
  EXPECT_NE(got.status().message().find("999"), std::string::npos) << got.status().message();
}

TEST(HashChunks, FailsWhenAFileIsMissing) {
  TempDir dir;
  Checkpoint ckpt = MakeSmallCheckpoint(dir.path());
  std::filesystem::remove(dir.path() / "model-00002.safetensors");
  Result<Manifest> m = BuildManifest(ckpt, "policy", Version(1), {.chunk_size = kMinChunkSize});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model-00002.safetensors"), std::string::npos);
}

TEST(BuildManifest, XxhOptionIsRecordedAndChangesTheHashes) {
  TempDir dir;
  Checkpoint ckpt = MakeSmallCheckpoint(dir.path());
  Result<Manifest> sha = BuildManifest(ckpt, "policy", Version(1), {.chunk_size = kMinChunkSize});
  Result<Manifest> xxh = BuildManifest(
      ckpt, "policy", Version(1),
      {.chunk_size = kMinChunkSize, .algorithm = HashAlgorithm::kXxh3_128, .threads = 2});
  ASSERT_TRUE(sha.ok() && xxh.ok());
  EXPECT_EQ(xxh->hash_algorithm, HashAlgorithm::kXxh3_128);
  EXPECT_NE(sha->root, xxh->root);
  const std::vector<uint8_t> flat = FlatBytes(ckpt);
  EXPECT_EQ(xxh->chunk_hashes, NaiveChunkHashes(flat, kMinChunkSize, HashAlgorithm::kXxh3_128));
  Result<Manifest> parsed = ParseManifest(AsBytes(SerializeManifest(*xxh)));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->hash_algorithm, HashAlgorithm::kXxh3_128);
}

TEST(BuildManifest, RejectsBadOptions) {
  TempDir dir;
  Checkpoint ckpt = MakeSmallCheckpoint(dir.path());
  EXPECT_EQ(BuildManifest(ckpt, "policy", Version(1), {.chunk_size = 1000}).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(BuildManifest(ckpt, "bad/channel", Version(1)).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(BuildManifest(ckpt, "policy", Version(0)).status().code(), Code::kInvalidArgument);
  Checkpoint empty;
  empty.root = dir.path();
  EXPECT_EQ(BuildManifest(empty, "policy", Version(1)).status().code(), Code::kInvalidArgument);
}

TEST(BuildManifest, RejectsAHandBuiltTensorOutsideItsFile) {
  TempDir dir;
  Checkpoint ckpt = MakeSmallCheckpoint(dir.path());
  for (CheckpointFile& f : ckpt.files) {
    if (f.is_safetensors) f.header.tensors.back().end += 1 << 20;
  }
  Result<Manifest> m = BuildManifest(ckpt, "policy", Version(1), {.chunk_size = kMinChunkSize});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("outside"), std::string::npos) << m.status().message();
}

}  // namespace
}  // namespace weightcast
