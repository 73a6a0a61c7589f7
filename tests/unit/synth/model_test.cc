#include "synth/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "synth/numeric.h"
#include "unit/synth/test_dir.h"
#include "unit/synth/tiny_shape.h"
#include "util/file.h"

namespace weightcast::synth {
namespace {

// A shape small enough for unit tests: about 1.3 M parameters.
ModelShape TinyShape() { return testing::TinyShape(3); }

TEST(SynthModelShape, LandsCloseToTheTargetFromMegabytesToTerabytes) {
  for (DType dtype : {DType::kBF16, DType::kF32, DType::kF8_E4M3}) {
    for (uint64_t target : {2'000'000ull, 10'000'000ull, 100'000'000ull, 1ull << 30,
                            10'000'000'000ull, 100'000'000'000ull, 1'000'000'000'000ull}) {
      auto shape = PickModelShape(target, dtype);
      ASSERT_TRUE(shape.ok()) << shape.status().ToString();
      double bytes = static_cast<double>(shape->ParamCount() * SynthElementBytes(dtype));
      EXPECT_NEAR(bytes / static_cast<double>(target), 1.0, 0.01) << target;
      EXPECT_TRUE(ValidateModelShape(*shape).ok());
      EXPECT_GE(shape->layers, 2u);
      EXPECT_GE(shape->vocab, std::min<uint64_t>(32000, 16 * shape->hidden));
    }
  }
}

TEST(SynthModelShape, LooksLikeLlama) {
  auto shape = PickModelShape(14'000'000'000ull, DType::kBF16);  // a "7B"
  ASSERT_TRUE(shape.ok());
  EXPECT_GE(shape->hidden, 3584u);
  EXPECT_LE(shape->hidden, 4608u);
  EXPECT_EQ(shape->head_dim(), 128u);
  EXPECT_GE(shape->layers, 28u);
  EXPECT_LE(shape->layers, 36u);
  auto tensors = ModelTensors(*shape, DType::kBF16);
  EXPECT_EQ(tensors.size(), shape->layers * 9 + 3);
  EXPECT_EQ(tensors.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(tensors.back().name, "lm_head.weight");
  EXPECT_EQ(tensors[1].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(tensors[7].name, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(tensors[7].shape, (std::vector<uint64_t>{shape->hidden, shape->intermediate}));
}

TEST(SynthModelShape, RejectsTooSmallTargets) {
  EXPECT_EQ(PickModelShape(10'000, DType::kBF16).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(PickModelShape(1 << 30, DType::kI32).status().code(), Code::kInvalidArgument);
}

TEST(SynthModel, WritesALoadableCheckpointNearTheTargetSize) {
  TempDir dir;
  SynthModelOptions o;
  o.out_dir = dir.path() / "m";
  o.target_bytes = 3'000'000;
  o.threads = 2;
  auto summary = WriteSynthModel(o);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_NEAR(static_cast<double>(summary->tensor_bytes) / 3e6, 1.0, 0.01);
  EXPECT_EQ(summary->files, (std::vector<std::string>{"config.json", "model.safetensors"}));

  auto ckpt = OpenCheckpoint(o.out_dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ASSERT_EQ(ckpt->files.size(), 2u);
  const CheckpointFile& f = ckpt->files[1];
  ASSERT_TRUE(f.is_safetensors);
  EXPECT_EQ(f.header.tensors.size(), summary->tensors);
  EXPECT_EQ(f.header.metadata.at("format"), "pt");

  auto config = nlohmann::json::parse(ReadAll(o.out_dir / "config.json"));
  EXPECT_EQ(config["hidden_size"], summary->shape.hidden);
  EXPECT_EQ(config["num_hidden_layers"], summary->shape.layers);
  EXPECT_EQ(config["torch_dtype"], "bfloat16");
}

TEST(SynthModel, ValuesAreNormalIshWithPerTensorScale) {
  TempDir dir;
  SynthModelOptions o;
  o.out_dir = dir.path() / "m";
  o.shape = TinyShape();
  o.threads = 2;
  ASSERT_TRUE(WriteSynthModel(o).ok());
  auto header = ReadSafetensorsHeader(o.out_dir / "model.safetensors");
  ASSERT_TRUE(header.ok());
  auto file = MappedFile::Open(o.out_dir / "model.safetensors");
  ASSERT_TRUE(file.ok());
  for (const TensorInfo& t : header->tensors) {
    const uint8_t* p = file->bytes().data() + header->data_offset() + t.begin;
    uint64_t n = t.byte_size() / 2;
    double sum = 0;
    double sq = 0;
    for (uint64_t i = 0; i < n; ++i) {
      double v = DecodeElement(DType::kBF16, p + 2 * i);
      sum += v;
      sq += v * v;
    }
    double mean = sum / n;
    double sd = std::sqrt(sq / n - mean * mean);
    if (t.name.find("norm") != std::string::npos) {
      EXPECT_NEAR(mean, 1.0, 0.02) << t.name;
      EXPECT_NEAR(sd, 0.05, 0.01) << t.name;
    } else {
      EXPECT_NEAR(mean, 0.0, 0.002) << t.name;
      EXPECT_GE(sd, 0.0145) << t.name;
      EXPECT_LE(sd, 0.0255) << t.name;
    }
  }
}

TEST(SynthModel, SameSeedGivesIdenticalBytesWhateverTheThreadCount) {
  TempDir dir;
  SynthModelOptions o;
  o.shape = TinyShape();
  o.out_dir = dir.path() / "a";
  o.threads = 1;
  ASSERT_TRUE(WriteSynthModel(o).ok());
  o.out_dir = dir.path() / "b";
  o.threads = 3;
  ASSERT_TRUE(WriteSynthModel(o).ok());
  o.out_dir = dir.path() / "c";
  o.seed = 7;
  ASSERT_TRUE(WriteSynthModel(o).ok());
  std::string a = ReadAll(dir.path() / "a" / "model.safetensors");
  EXPECT_EQ(a, ReadAll(dir.path() / "b" / "model.safetensors"));
  std::string c = ReadAll(dir.path() / "c" / "model.safetensors");
  ASSERT_EQ(a.size(), c.size());
  EXPECT_NE(a, c);
}

TEST(SynthModel, ShardsLikeHuggingFaceWithAValidIndex) {
  TempDir dir;
  SynthModelOptions o;
  o.out_dir = dir.path() / "m";
  o.shape = TinyShape();
  o.shard_bytes = 600'000;
  o.threads = 2;
  auto summary = WriteSynthModel(o);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  ASSERT_GT(summary->files.size(), 3u);
  size_t shards = summary->files.size() - 2;
  char first[64];
  std::snprintf(first, sizeof(first), "model-00001-of-%05zu.safetensors", shards);
  EXPECT_EQ(summary->files[1], first);
  EXPECT_EQ(summary->files.back(), "model.safetensors.index.json");

  auto index = nlohmann::json::parse(ReadAll(o.out_dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], summary->tensor_bytes);
  EXPECT_EQ(index["weight_map"].size(), summary->tensors);
  EXPECT_EQ(index["weight_map"]["lm_head.weight"], summary->files[shards]);

  // OpenCheckpoint checks the index against every header.
  auto ckpt = OpenCheckpoint(o.out_dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->weight_map.size(), summary->tensors);
  for (const CheckpointFile& f : ckpt->files) {
    if (!f.is_safetensors) continue;
    uint64_t data = f.size - f.header.data_offset();
    // A shard may exceed the limit only if it holds a single tensor.
    if (f.header.tensors.size() > 1) {
      EXPECT_LE(data, o.shard_bytes) << f.relative_path;
    }
  }
}

TEST(SynthModel, RefusesANonEmptyDirectory) {
  TempDir dir;
  ASSERT_TRUE(WriteFileAtomic(dir.path() / "x", "x").ok());
  SynthModelOptions o;
  o.out_dir = dir.path();
  o.shape = TinyShape();
  EXPECT_EQ(WriteSynthModel(o).status().code(), Code::kAlreadyExists);
}

TEST(SynthModel, WritesEveryDtype) {
  TempDir dir;
  for (DType dtype : {DType::kF16, DType::kF32, DType::kF8_E4M3}) {
    SynthModelOptions o;
    o.out_dir = dir.path() / std::string(DTypeName(dtype));
    o.shape = TinyShape();
    o.dtype = dtype;
    auto summary = WriteSynthModel(o);
    ASSERT_TRUE(summary.ok()) << summary.status().ToString();
    EXPECT_EQ(summary->tensor_bytes, TinyShape().ParamCount() * SynthElementBytes(dtype));
    auto header = ReadSafetensorsHeader(o.out_dir / "model.safetensors");
    ASSERT_TRUE(header.ok()) << header.status().ToString();
    EXPECT_EQ(header->tensors[0].dtype, dtype);
  }
}

}  // namespace
}  // namespace weightcast::synth
