// A version announced before its store commit: PrepareVersionFromMemory with commit_behind signs
// the version and leaves the store alone until PreparedVersion::commit; CommitBehind serves its
// chunks from the image until then, from the store after, and never again from the image once
// Finish returned.
#include "publish/commit_behind.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <vector>

#include "format/safetensors.h"
#include "publish/version_builder.h"
#include "testing/temp_dir.h"
#include "trust/signed_manifest.h"

namespace weightcast::publish {
namespace {

using ::weightcast::testing::TempDir;

constexpr char kSecret[] = "commit-behind-secret";

// One safetensors file's bytes: two bf16 tensors of `fill`.
std::vector<uint8_t> Image(uint8_t fill) {
  const std::vector<TensorSpec> specs = {{"a", DType::kBF16, {256, 256}},
                                         {"b", DType::kBF16, {300}}};
  auto header = EncodeSafetensorsHeader(specs, {});
  EXPECT_TRUE(header.ok()) << header.status().ToString();
  std::vector<uint8_t> out(header->bytes.begin(), header->bytes.end());
  out.resize(out.size() + (256 * 256 + 300) * 2, fill);
  return out;
}

PrepareOptions Options() {
  PrepareOptions o;
  o.channel = "policy";
  o.secret = kSecret;
  o.build.chunk_size = kMinChunkSize;
  o.build.threads = 1;
  o.codec.threads = 1;
  o.commit_behind = true;
  return o;
}

Store OpenStore(const std::filesystem::path& root) {
  auto s = Store::Open(root);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(*s);
}

TEST(CommitBehind, TheVersionIsSignedBeforeTheStoreHoldsIt) {
  TempDir dir;
  Store store = OpenStore(dir.path() / "store");
  const std::vector<uint8_t> image = Image(3);
  auto prepared = PrepareVersionFromMemory(store, {"model.safetensors", image}, nullptr, Options());
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  ASSERT_TRUE(prepared->commit);
  EXPECT_TRUE(VerifySignedManifestWithSecret(prepared->signed_manifest, kSecret).ok());
  EXPECT_EQ(store.Current("policy").status().code(), Code::kNotFound);

  CommitBehind behind(store, "policy", prepared->manifest.version, image,
                      std::move(prepared->commit));
  node::ChunkReader read = behind.Reader();
  ASSERT_TRUE(behind.Finish().ok());
  EXPECT_EQ(*store.Current("policy"), prepared->manifest.version);
  EXPECT_TRUE(store.Verify("policy", prepared->manifest.version).ok());
  // From the store now: the same bytes as the image's.
  const ByteRange range = prepared->manifest.ChunkRange(ChunkIndex(1));
  auto chunk = read(range);
  ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
  EXPECT_TRUE(std::equal(chunk->bytes.begin(), chunk->bytes.end(), image.begin() + range.offset));
  EXPECT_TRUE(behind.Finish().ok());  // the same answer again
}

TEST(CommitBehind, FinishHurriesTheImagesIdleWrite) {
  TempDir dir;
  Store store = OpenStore(dir.path() / "store");
  const std::vector<uint8_t> image = Image(4);
  auto prepared = PrepareVersionFromMemory(store, {"model.safetensors", image}, nullptr, Options());
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  // The write runs at idle priority; the commit behind the announce is handed the way to hurry it.
  ASSERT_TRUE(prepared->hurry_commit);
  CommitBehind behind(store, "policy", prepared->manifest.version, image,
                      std::move(prepared->commit), std::move(prepared->hurry_commit));
  ASSERT_TRUE(behind.Finish().ok());
  EXPECT_EQ(*store.Current("policy"), prepared->manifest.version);
  EXPECT_TRUE(store.Verify("policy", prepared->manifest.version).ok());
}

TEST(CommitBehind, ChunksComeFromTheImageUntilTheCommit) {
  TempDir dir;
  Store store = OpenStore(dir.path() / "store");
  const std::vector<uint8_t> image = Image(5);
  auto prepared = PrepareVersionFromMemory(store, {"model.safetensors", image}, nullptr, Options());
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  std::mutex gate;
  gate.lock();  // the commit waits here until the reads below are done
  std::function<Status()> commit = std::move(prepared->commit);
  CommitBehind behind(store, "policy", prepared->manifest.version, image, [&] {
    std::lock_guard wait(gate);
    return commit();
  });
  const ByteRange range = prepared->manifest.ChunkRange(ChunkIndex(0));
  auto chunk = behind.Reader()(range);
  ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
  EXPECT_TRUE(std::equal(chunk->bytes.begin(), chunk->bytes.end(), image.begin()));
  EXPECT_EQ(store.Current("policy").status().code(), Code::kNotFound);
  EXPECT_EQ(behind.Reader()({image.size(), 1}).status().code(), Code::kOutOfRange);
  gate.unlock();
  EXPECT_TRUE(behind.Finish().ok());
}

TEST(CommitBehind, AFailedCommitIsReportedAndTheImageIsNoLongerRead) {
  TempDir dir;
  Store store = OpenStore(dir.path() / "store");
  std::vector<uint8_t> image = Image(7);
  CommitBehind behind(store, "policy", Version(4), image,
                      [] { return IoError("no space left on device"); });
  Status s = behind.Finish();
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_NE(s.message().find("no space"), std::string::npos);
  EXPECT_EQ(behind.Finish().code(), Code::kIoError);
  image.assign(image.size(), 0);  // the caller may reuse its memory now
  EXPECT_EQ(behind.Reader()({0, 16}).status().code(), Code::kUnavailable);
}

TEST(CommitBehind, AnUncalledCommitLeavesTheStoreAsItWas) {
  TempDir dir;
  Store store = OpenStore(dir.path() / "store");
  const std::vector<uint8_t> image = Image(9);
  {
    auto prepared =
        PrepareVersionFromMemory(store, {"model.safetensors", image}, nullptr, Options());
    ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  }  // dropped: the write is waited for, nothing is committed
  EXPECT_EQ(store.Current("policy").status().code(), Code::kNotFound);
  auto again = PrepareVersionFromMemory(store, {"model.safetensors", image}, nullptr, Options());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->manifest.version, Version(1));
  ASSERT_TRUE(again->commit().ok());
  EXPECT_EQ(*store.Current("policy"), Version(1));
}

}  // namespace
}  // namespace weightcast::publish
