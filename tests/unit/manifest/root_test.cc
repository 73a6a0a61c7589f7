#include <gtest/gtest.h>

#include <functional>

#include "manifest/builder.h"
#include "manifest_test_util.h"
#include "util/text.h"

namespace weightcast {
namespace {

using testing::MakeSmallCheckpoint;
using testing::TempDir;

// The smallest interesting manifest: one 3-byte file holding one U8 tensor, one chunk.
Manifest Tiny() {
  Manifest m;
  m.channel = "tiny";
  m.version = Version(1);
  m.chunk_size = 65536;
  m.files = {{"a", 3, 0}};
  m.tensors = {{"t", DType::kU8, {3}, 0, 0, 3}};
  Digest d{};
  d[0] = 0xab;
  m.chunk_hashes = {d};
  m.root = ComputeRoot(m);
  return m;
}

TEST(Root, CanonicalEncodingIsTheDocumentedBytes) {
  // docs/manifest_format.md, "Root hash", worked example; the hash was computed independently
  // (Python hashlib over the same bytes).
  const std::string e = CanonicalRootEncoding(Tiny());
  ASSERT_EQ(e.size(), 180u);
  EXPECT_EQ(e.substr(0, 8), std::string("\x1b\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(e.substr(8, 27), "weightcast/manifest-root/v1");
  EXPECT_EQ(ToHex(ComputeRoot(Tiny())),
            "4cd7985d7b92e23b48951b1f15ac3a90234bea86596e6868f53f9cd705e6f825");
  EXPECT_EQ(ComputeRoot(Tiny()), Sha256(AsBytes(e)));
}

TEST(Root, IsStableAcrossBuilds) {
  TempDir dir;
  Checkpoint ckpt = MakeSmallCheckpoint(dir.path());
  Result<Manifest> a = BuildManifest(ckpt, "policy", Version(1), {.chunk_size = kMinChunkSize});
  Result<Manifest> b =
      BuildManifest(ckpt, "policy", Version(1), {.chunk_size = kMinChunkSize, .threads = 1});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->root, b->root);
  EXPECT_EQ(SerializeManifest(*a), SerializeManifest(*b));
}

TEST(Root, IgnoresChannelVersionMetadataAndDelta) {
  Manifest m = Tiny();
  const Digest root = m.root;
  m.channel = "other";
  m.version = Version(42);
  m.metadata["step"] = "1234";
  m.delta = DeltaInfo{Version(41), Digest{}, {DeltaChunk{}}};
  m.format_version = kManifestFormatVersion;
  EXPECT_EQ(ComputeRoot(m), root);
}

TEST(Root, ChangesWithEveryContentField) {
  TempDir dir;
  Checkpoint ckpt = MakeSmallCheckpoint(dir.path());
  Result<Manifest> built = BuildManifest(ckpt, "policy", Version(1), {.chunk_size = kMinChunkSize});
  ASSERT_TRUE(built.ok());
  const Digest root = built->root;
  const std::vector<std::pair<std::string, std::function<void(Manifest&)>>> mutations = {
      {"hash algorithm", [](Manifest& m) { m.hash_algorithm = HashAlgorithm::kXxh3_128; }},
      {"chunk size", [](Manifest& m) { m.chunk_size *= 2; }},
      {"file path", [](Manifest& m) { m.files[0].path = "config.jsom"; }},
      {"file size", [](Manifest& m) { m.files[0].size += 1; }},
      {"file offset", [](Manifest& m) { m.files[1].offset += 1; }},
      {"add file",
       [](Manifest& m) {
         m.files.push_back({"zzz", 0, m.total_size()});
       }},
      {"tensor name", [](Manifest& m) { m.tensors[0].name += "x"; }},
      {"tensor dtype", [](Manifest& m) { m.tensors[0].dtype = DType::kF16; }},
      {"tensor shape",
       [](Manifest& m) { std::swap(m.tensors[0].shape[0], m.tensors[0].shape[1]); }},
      {"tensor rank", [](Manifest& m) { m.tensors[0].shape.push_back(1); }},
      {"tensor file", [](Manifest& m) { m.tensors[0].file_index += 1; }},
      {"tensor offset", [](Manifest& m) { m.tensors[0].offset += 2; }},
      {"tensor size", [](Manifest& m) { m.tensors[0].size += 2; }},
      {"drop tensor", [](Manifest& m) { m.tensors.pop_back(); }},
      {"chunk hash bit", [](Manifest& m) { m.chunk_hashes[1][31] ^= 1; }},
      {"drop chunk", [](Manifest& m) { m.chunk_hashes.pop_back(); }},
  };
  for (const auto& [what, mutate] : mutations) {
    Manifest m = *built;
    mutate(m);
    EXPECT_NE(ComputeRoot(m), root) << what;
  }
}

TEST(Root, LengthPrefixesKeepFieldBoundariesUnambiguous) {
  // "ab" + "c" and "a" + "bc" must not encode alike.
  Manifest x = Tiny();
  x.files = {{"ab", 1, 0}, {"c", 2, 1}};
  Manifest y = Tiny();
  y.files = {{"a", 1, 0}, {"bc", 2, 1}};
  EXPECT_NE(ComputeRoot(x), ComputeRoot(y));
}

}  // namespace
}  // namespace weightcast
