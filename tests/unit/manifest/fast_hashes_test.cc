// Fast hashes (docs/manifest_format.md): one XXH3-128 per chunk beside the SHA-256
// chunk hashes, built in the same pass, serialized as 16 bytes each, refused when the count or a
// length is wrong, outside the root and inside the signature. Delta payload hashes are SHA-256,
// and an older table (no payload algorithm) keeps its chunk algorithm.
#include <gtest/gtest.h>

#include <functional>

#include "manifest/builder.h"
#include "manifest/manifest.pb.h"
#include "manifest_test_util.h"
#include "trust/signed_manifest.h"

namespace weightcast {
namespace {

using testing::MakeSmallCheckpoint;
using testing::TempDir;

class FastHashes : public ::testing::Test {
 protected:
  void SetUp() override {
    ckpt_ = MakeSmallCheckpoint(dir_.path());
    Result<Manifest> m = BuildManifest(ckpt_, "policy", Version(7), {.chunk_size = kMinChunkSize});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    manifest_ = *m;
    ASSERT_GT(manifest_.chunk_count(), 1u);
  }

  Status ParseProto(const std::function<void(manifest::Manifest&)>& mutate) {
    manifest::Manifest p;
    EXPECT_TRUE(p.ParseFromString(SerializeManifest(manifest_)));
    mutate(p);
    return ParseManifest(AsBytes(p.SerializeAsString())).status();
  }

  TempDir dir_;
  Checkpoint ckpt_;
  Manifest manifest_;
};

TEST_F(FastHashes, BuildComputesTheXxh3OfEveryChunkInTheSamePass) {
  ASSERT_EQ(manifest_.fast_hashes.size(), manifest_.chunk_count());
  std::vector<Digest> fast;
  auto sha = HashChunks(ckpt_.root, manifest_.files, manifest_.chunk_size, HashAlgorithm::kSha256,
                        1, &fast);
  ASSERT_TRUE(sha.ok());
  auto xxh =
      HashChunks(ckpt_.root, manifest_.files, manifest_.chunk_size, HashAlgorithm::kXxh3_128, 1);
  ASSERT_TRUE(xxh.ok());
  EXPECT_EQ(*sha, manifest_.chunk_hashes);
  EXPECT_EQ(fast, *xxh);
  EXPECT_EQ(manifest_.fast_hashes, *xxh);
}

TEST_F(FastHashes, AreOptionalAndNotPartOfTheRoot) {
  Result<Manifest> without = BuildManifest(ckpt_, "policy", Version(7),
                                           {.chunk_size = kMinChunkSize, .fast_hashes = false});
  ASSERT_TRUE(without.ok());
  EXPECT_TRUE(without->fast_hashes.empty());
  EXPECT_EQ(without->root, manifest_.root) << "the same bytes are the same version";
  Result<Manifest> xxh =
      BuildManifest(ckpt_, "policy", Version(7),
                    {.chunk_size = kMinChunkSize, .algorithm = HashAlgorithm::kXxh3_128});
  ASSERT_TRUE(xxh.ok());
  EXPECT_TRUE(xxh->fast_hashes.empty()) << "an xxh3-128 manifest's chunk hashes are fast already";
}

TEST_F(FastHashes, RoundTripAs16BytesEach) {
  const std::string bytes = SerializeManifest(manifest_);
  manifest::Manifest p;
  ASSERT_TRUE(p.ParseFromString(bytes));
  ASSERT_EQ(p.fast_hashes_size(), static_cast<int>(manifest_.chunk_count()));
  for (const std::string& h : p.fast_hashes()) EXPECT_EQ(h.size(), 16u);
  Result<Manifest> back = ParseManifest(AsBytes(bytes));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->fast_hashes, manifest_.fast_hashes);
}

TEST_F(FastHashes, WrongCountOrLengthIsRefused) {
  EXPECT_TRUE(ParseProto([](manifest::Manifest&) {}).ok());
  const auto refused = [](const Status& s, std::string_view what) {
    EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  refused(ParseProto([](manifest::Manifest& p) { p.mutable_fast_hashes()->RemoveLast(); }),
          "fast hashes for");
  refused(ParseProto([](manifest::Manifest& p) { p.add_fast_hashes(std::string(16, 'x')); }),
          "fast hashes for");
  refused(ParseProto([](manifest::Manifest& p) { p.mutable_fast_hashes(1)->pop_back(); }),
          "fast hash 1 is 15 bytes");
  refused(ParseProto([](manifest::Manifest& p) { p.mutable_fast_hashes(0)->append(16, '\0'); }),
          "fast hash 0 is 32 bytes");
  refused(ParseProto([](manifest::Manifest& p) {
            p.set_hash_algorithm(manifest::HASH_ALGORITHM_XXH3_128);
            for (auto& h : *p.mutable_chunk_hashes()) h.replace(16, 16, std::string(16, '\0'));
          }),
          "fast hashes in an xxh3-128 manifest");
  // The struct holds 32-byte digests: the tail must be zero (ValidateManifest).
  Manifest m = manifest_;
  m.fast_hashes[0][20] = 1;
  refused(ValidateManifest(m), "last 16 bytes zero");
  m = manifest_;
  m.fast_hashes.pop_back();
  refused(ValidateManifest(m), "fast hashes for");
}

TEST_F(FastHashes, TheSignatureCoversThem) {
  const std::string secret = "fast hashes test secret";
  std::vector<uint8_t> signed_bytes = SignManifestWithSecret(manifest_, secret);
  ASSERT_TRUE(VerifySignedManifestWithSecret(signed_bytes, secret).ok());
  // Find the first fast hash in the serialized body and flip one of its bits.
  const std::string needle(reinterpret_cast<const char*>(manifest_.fast_hashes[0].data()), 16);
  const std::string body(signed_bytes.begin() + kSignedManifestHeaderSize, signed_bytes.end());
  const size_t at = body.find(needle);
  ASSERT_NE(at, std::string::npos);
  signed_bytes[kSignedManifestHeaderSize + at + 3] ^= 1;
  EXPECT_EQ(VerifySignedManifestWithSecret(signed_bytes, secret).status().code(),
            Code::kUnauthenticated);
}

TEST_F(FastHashes, DeltaPayloadHashesAreSha256AndOldTablesKeepTheirAlgorithm) {
  Manifest m = manifest_;
  m.delta = DeltaInfo{Version(6), Digest{}, {}};
  m.delta->chunks.assign(m.chunk_count(), DeltaChunk{ChunkEncoding::kSame, 0, Digest{}});
  Result<Manifest> back = ParseManifest(AsBytes(SerializeManifest(m)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->delta->payload_hash_algorithm, HashAlgorithm::kSha256);
  // A SHA-256 manifest with xxh3-128 payload hashes: never written, refused.
  m.delta->payload_hash_algorithm = HashAlgorithm::kXxh3_128;
  EXPECT_EQ(ValidateManifest(m).code(), Code::kCorrupt);

  // An xxh3-128 manifest from before the rule: the field is absent and means the chunk algorithm.
  Result<Manifest> x =
      BuildManifest(ckpt_, "policy", Version(7),
                    {.chunk_size = kMinChunkSize, .algorithm = HashAlgorithm::kXxh3_128});
  ASSERT_TRUE(x.ok());
  x->delta = DeltaInfo{Version(6), Digest{}, {}};
  x->delta->chunks.assign(x->chunk_count(), DeltaChunk{ChunkEncoding::kSame, 0, Digest{}});
  manifest::Manifest p;
  ASSERT_TRUE(p.ParseFromString(SerializeManifest(*x)));
  p.mutable_delta()->clear_payload_hash_algorithm();
  Result<Manifest> old = ParseManifest(AsBytes(p.SerializeAsString()));
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->delta->payload_hash_algorithm, HashAlgorithm::kXxh3_128);
  // And one of a SHA-256 manifest: SHA-256, exactly as before.
  ASSERT_TRUE(p.ParseFromString(SerializeManifest(m)));
  p.mutable_delta()->clear_payload_hash_algorithm();
  Result<Manifest> old_sha = ParseManifest(AsBytes(p.SerializeAsString()));
  ASSERT_TRUE(old_sha.ok()) << old_sha.status().ToString();
  EXPECT_EQ(old_sha->delta->payload_hash_algorithm, HashAlgorithm::kSha256);
}

TEST_F(FastHashes, FinishManifestTakesThemOrNone) {
  Result<Manifest> layout =
      BuildManifestLayout(ckpt_, "policy", Version(7), {.chunk_size = kMinChunkSize});
  ASSERT_TRUE(layout.ok());
  Manifest a = *layout;
  EXPECT_EQ(FinishManifest(a, manifest_.chunk_hashes, {manifest_.fast_hashes[0]}).code(),
            Code::kInvalidArgument);
  Manifest b = *layout;
  ASSERT_TRUE(FinishManifest(b, manifest_.chunk_hashes, manifest_.fast_hashes).ok());
  EXPECT_EQ(b.fast_hashes, manifest_.fast_hashes);
  EXPECT_EQ(b.root, manifest_.root);
  Manifest c = *layout;
  ASSERT_TRUE(FinishManifest(c, manifest_.chunk_hashes).ok());
  EXPECT_TRUE(c.fast_hashes.empty());
}

}  // namespace
}  // namespace weightcast
