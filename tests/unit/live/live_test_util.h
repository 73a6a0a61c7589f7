// The live layer's test model and store: a small safetensors model published into a store
// version after version, and a sampler's own copy of it.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <optional>
#include <random>

#include "format/safetensors.h"
#include "live/delta_file.h"
#include "live/live_set.h"
#include "live/store_view.h"
#include "publish/version_builder.h"
#include "store/store.h"
#include "testing/temp_dir.h"

namespace weightcast::live::testing {

namespace fs = std::filesystem;
using ::weightcast::testing::TempDir;

// A small model: two bf16 matrices around an f32 vector, so chunks hold several tensors and the
// file header, and tensors cross chunk boundaries (64 KiB chunks).
struct Model {
  std::vector<uint16_t> a = std::vector<uint16_t>(256 * 512);
  std::vector<float> b = std::vector<float>(1000);
  std::vector<uint16_t> c = std::vector<uint16_t>(300 * 333);
};

inline Model FirstModel() {
  Model m;
  std::mt19937 rng(7);
  for (auto& x : m.a) x = static_cast<uint16_t>(0x3c00 + rng() % 0x400);
  for (auto& x : m.b) x = static_cast<float>(rng() % 1000) / 7.0f;
  for (auto& x : m.c) x = static_cast<uint16_t>(0x3c00 + rng() % 0x400);
  return m;
}

// An RL-like step: ~1% of the bf16 elements move by one ulp.
inline void Step(Model& m, uint32_t seed) {
  std::mt19937 rng(seed);
  for (auto& x : m.a)
    if (rng() % 100 == 0) ++x;
  for (auto& x : m.c)
    if (rng() % 100 == 0) --x;
}

template <typename T>
inline std::span<const uint8_t> Bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

inline void WriteModel(const fs::path& dir, const Model& m) {
  fs::create_directories(dir);
  std::vector<TensorSpec> specs = {
      {"a", DType::kBF16, {256, 512}}, {"b", DType::kF32, {1000}}, {"c", DType::kBF16, {300, 333}}};
  auto w = SafetensorsWriter::Create(dir / "model.safetensors", specs);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_TRUE((*w)->Append(Bytes(m.a)).ok());
  ASSERT_TRUE((*w)->Append(Bytes(m.b)).ok());
  ASSERT_TRUE((*w)->Append(Bytes(m.c)).ok());
  ASSERT_TRUE((*w)->Finish().ok());
}

struct Fixture {
  TempDir dir;
  fs::path root = dir.path() / "store";
  std::optional<Store> store;
  Model model = FirstModel();
  uint32_t steps = 0;
  HashAlgorithm algorithm = HashAlgorithm::kXxh3_128;
  bool device_checks = false;

  Fixture() {
    auto s = Store::Open(root);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    store.emplace(std::move(*s));
  }

  // Publishes the model as the next version, with a delta file when it is a delta.
  Version Publish(bool delta_file = true) {
    const fs::path src = dir.path() / ("step-" + std::to_string(steps++));
    WriteModel(src, model);
    publish::PrepareOptions o;
    o.channel = "policy";
    o.secret = "test";
    o.build.chunk_size = kMinChunkSize;
    o.build.algorithm = algorithm;
    o.build.threads = 1;
    o.build.device_checks = device_checks;
    o.codec.threads = 1;
    o.import = publish::ImportPolicy::kCopy;
    if (delta_file) {
      o.before_commit = [this](const Manifest& m, const node::PayloadCache* payloads) -> Status {
        if (payloads == nullptr) return Status::Ok();
        return WriteDeltaFile(root, m, [&](ChunkIndex i) -> std::span<const uint8_t> {
          auto p = payloads->Get(i);
          return p ? p->bytes : std::span<const uint8_t>();
        });
      };
    }
    auto v = publish::PrepareVersion(*store, src, o);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v->manifest.version;
  }
};

// The sampler's own copy of the weights.
struct Live {
  Model m;
  std::unique_ptr<LiveSet> set;
  explicit Live(std::unique_ptr<TensorMemory> memory = nullptr) {
    std::vector<LiveTensor> t = {
        {"a", DType::kBF16, {256, 512}, {reinterpret_cast<uint8_t*>(m.a.data()), m.a.size() * 2}},
        {"b", DType::kF32, {1000}, {reinterpret_cast<uint8_t*>(m.b.data()), m.b.size() * 4}},
        {"c", DType::kBF16, {300, 333}, {reinterpret_cast<uint8_t*>(m.c.data()), m.c.size() * 2}}};
    auto s = LiveSet::Create(std::move(t), std::move(memory));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    set = std::move(*s);
  }
  bool Equals(const Model& other) const {
    return m.a == other.a && m.b == other.b && m.c == other.c;
  }
};

}  // namespace weightcast::live::testing
