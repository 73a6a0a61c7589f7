// A version built from a model at an HTTP origin (a fake one here; nginx in
// tests/integration/origin_publish.sh) is the version a directory with the same files gives.
#include "publish/origin_version.h"

#include <gtest/gtest.h>

#include "../origin/fake_origin.h"
#include "manifest/builder.h"
#include "synth/model.h"
#include "testing/temp_dir.h"
#include "trust/signed_manifest.h"
#include "unit/synth/tiny_shape.h"
#include "util/file.h"

namespace weightcast::publish {
namespace {

namespace fs = std::filesystem;
using origin::testing::FakeOrigin;
using ::weightcast::testing::TempDir;

constexpr std::string_view kSecret = "origin-test-secret-0123456789abc";

// A small sharded model in Hugging Face's layout (config.json, shards, index), served by
// `origin` under the same names.
fs::path WriteAndServe(const TempDir& dir, FakeOrigin& origin) {
  synth::SynthModelOptions model;
  model.out_dir = dir.path() / "model";
  model.shape = synth::testing::TinyShape();
  model.shard_bytes = 400'000;
  model.threads = 2;
  auto summary = synth::WriteSynthModel(model);
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  for (const std::string& name : summary->files) {
    auto text = ReadFileToString(model.out_dir / name, 1 << 30);
    EXPECT_TRUE(text.ok());
    origin.Put(name, *text);
  }
  return model.out_dir;
}

PrepareOptions Options() {
  PrepareOptions o;
  o.channel = "policy";
  o.secret = std::string(kSecret);
  o.build.chunk_size = kMinChunkSize;
  o.build.threads = 2;
  o.min_version = Version(3);
  return o;
}

std::string ListOf(const FakeOrigin& origin, const fs::path& dir) {
  std::string list;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    list += name + " " + origin.url(name) + "?X-Signature=abc\n";
  }
  return list;
}

TEST(OriginVersion, AListedModelHasTheRootOfTheSameDirectory) {
  TempDir dir;
  FakeOrigin origin;
  const fs::path model = WriteAndServe(dir, origin);
  ASSERT_TRUE(WriteFileAtomic(dir.path() / "urls.txt", ListOf(origin, model)).ok());
  auto spec = origin::ResolveOriginSpec((dir.path() / "urls.txt").string());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto http = std::make_shared<origin::HttpClient>(origin::HttpOptions{});
  auto described = origin::DescribeOriginModel(*http, *spec);
  ASSERT_TRUE(described.ok()) << described.status().ToString();
  auto built = PrepareOriginVersion(*described, http, "urls.txt", Options());
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  const Manifest& m = built->prepared.manifest;

  auto checkpoint = OpenCheckpoint(model);
  ASSERT_TRUE(checkpoint.ok());
  BuildOptions build;
  build.chunk_size = kMinChunkSize;
  auto local = BuildManifest(*checkpoint, "policy", Version(3), build);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_EQ(m.root, local->root);
  EXPECT_EQ(m.chunk_hashes, local->chunk_hashes);
  EXPECT_EQ(m.fast_hashes, local->fast_hashes);
  EXPECT_EQ(m.version, Version(3));
  EXPECT_FALSE(m.delta.has_value());
  EXPECT_NE(m.metadata.at(std::string(origin::kObjectsMetadataKey)).find("\"e"), std::string::npos);
  auto verified = VerifySignedManifest(built->prepared.signed_manifest, {std::string(kSecret)});
  ASSERT_TRUE(verified.ok()) << verified.status().ToString();
  EXPECT_EQ(verified->root, m.root);

  // Each byte was streamed once, beside the first bytes each file's probe read.
  EXPECT_GE(built->origin_bytes, m.total_size());
  // The reader gives back any chunk.
  const ByteRange range = m.ChunkRange(ChunkIndex(m.chunk_count() - 1));
  std::vector<uint8_t> chunk(range.size);
  ASSERT_TRUE(built->reader->Read(range.offset, chunk).ok());
  EXPECT_EQ(HashBytes(m.hash_algorithm, chunk), m.chunk_hashes.back());
}

TEST(OriginVersion, AnIndexUrlBringsItsShards) {
  TempDir dir;
  FakeOrigin origin;
  WriteAndServe(dir, origin);
  auto spec = origin::ParseOriginUrl(origin.url(""));  // the directory: its index
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto http = std::make_shared<origin::HttpClient>(origin::HttpOptions{});
  auto described = origin::DescribeOriginModel(*http, *spec);
  ASSERT_TRUE(described.ok()) << described.status().ToString();
  std::vector<std::string> names;
  for (const auto& o : described->objects) names.push_back(o.name);
  ASSERT_GE(names.size(), 3u);
  EXPECT_EQ(names.back(), "model.safetensors.index.json");
  EXPECT_EQ(std::count(names.begin(), names.end(), "config.json"), 0);
  size_t tensors = 0;
  for (const CheckpointFile& f : described->checkpoint.files) tensors += f.header.tensors.size();
  EXPECT_GT(tensors, 0u);
  EXPECT_EQ(described->checkpoint.weight_map.size(), tensors);
  auto built = PrepareOriginVersion(*described, http, origin.url(""), Options());
  ASSERT_TRUE(built.ok()) << built.status().ToString();
}

TEST(OriginVersion, ContentChangedWhileStreamedFailsThePublish) {
  TempDir dir;
  FakeOrigin origin;
  const fs::path model = WriteAndServe(dir, origin);
  auto spec = origin::ParseOriginUrl(origin.url("model.safetensors.index.json"));
  ASSERT_TRUE(spec.ok());
  auto http = std::make_shared<origin::HttpClient>(origin::HttpOptions{});
  auto described = origin::DescribeOriginModel(*http, *spec);
  ASSERT_TRUE(described.ok()) << described.status().ToString();
  // A shard is replaced (same size, new bytes and ETag) between its probe and its stream.
  const std::string shard = described->objects.front().name;
  auto text = ReadFileToString(model / shard, 1 << 30);
  ASSERT_TRUE(text.ok());
  std::string changed = *text;
  changed.back() ^= 1;
  origin.Put(shard, changed);
  auto built = PrepareOriginVersion(*described, http, "m", Options());
  EXPECT_EQ(built.status().code(), Code::kFailedPrecondition) << built.status().ToString();
  EXPECT_NE(built.status().message().find("changed at the origin"), std::string::npos);
}

TEST(OriginVersion, AModelWithoutTensorsIsRefused) {
  FakeOrigin origin;
  origin.Put("config.json", std::string("{}"));
  origin::OriginSpec spec;
  spec.files.push_back({"config.json", origin.url("config.json")});
  auto http = std::make_shared<origin::HttpClient>(origin::HttpOptions{});
  auto described = origin::DescribeOriginModel(*http, spec);
  ASSERT_TRUE(described.ok()) << described.status().ToString();
  auto built = PrepareOriginVersion(*described, http, "m", Options());
  EXPECT_EQ(built.status().code(), Code::kInvalidArgument);
  EXPECT_NE(built.status().message().find("holds no tensors"), std::string::npos);
}

TEST(OriginVersion, ABadHeaderAtTheOriginIsRefusedNamingTheFile) {
  FakeOrigin origin;
  origin.Put("m.safetensors", std::string("\x10\0\0\0\0\0\0\0{not json}xxxxxx", 24));
  auto spec = origin::ParseOriginUrl(origin.url("m.safetensors"));
  ASSERT_TRUE(spec.ok());
  origin::HttpClient http(origin::HttpOptions{});
  auto described = origin::DescribeOriginModel(http, *spec);
  EXPECT_EQ(described.status().code(), Code::kCorrupt) << described.status().ToString();
  EXPECT_NE(described.status().message().find("m.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace weightcast::publish
