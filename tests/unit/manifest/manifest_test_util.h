// Helpers for manifest tests: temporary directories and hand-built checkpoints (written as real
// files, with the Checkpoint struct filled in directly so the tests do not depend on
// OpenCheckpoint).
#pragma once

#include "testing/temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "format/safetensors.h"
#include "manifest/builder.h"
#include "manifest/manifest.h"

namespace weightcast::testing {

inline std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

inline void WriteBytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

inline CheckpointFile AddPlainFile(Checkpoint& ckpt, const std::string& rel, size_t size,
                                   uint32_t seed) {
  WriteBytes(ckpt.root / rel, RandomBytes(size, seed));
  CheckpointFile f;
  f.relative_path = rel;
  f.size = size;
  ckpt.files.push_back(f);
  return f;
}

struct TestTensor {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
};

// Writes a valid safetensors file: header padded with spaces to a multiple of 8, tensors laid
// out back to back in the given order, random data.
inline CheckpointFile AddSafetensorsFile(Checkpoint& ckpt, const std::string& rel,
                                         const std::vector<TestTensor>& tensors, uint32_t seed) {
  CheckpointFile f;
  f.relative_path = rel;
  f.is_safetensors = true;
  std::string json = "{";
  uint64_t pos = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TestTensor& t = tensors[i];
    const uint64_t bytes = TensorByteSize(t.dtype, t.shape).value();
    std::string shape;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      shape += (d ? "," : "") + std::to_string(t.shape[d]);
    }
    json += (i ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" +
            std::string(DTypeName(t.dtype)) + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
            std::to_string(pos) + "," + std::to_string(pos + bytes) + "]}";
    f.header.tensors.push_back({t.name, t.dtype, t.shape, pos, pos + bytes});
    pos += bytes;
  }
  json += "}";
  while (json.size() % 8 != 0) json += ' ';
  f.header.header_bytes = json.size();
  std::vector<uint8_t> file(8);
  for (int i = 0; i < 8; ++i) file[i] = static_cast<uint8_t>(json.size() >> (8 * i));
  file.insert(file.end(), json.begin(), json.end());
  std::vector<uint8_t> data = RandomBytes(pos, seed);
  file.insert(file.end(), data.begin(), data.end());
  f.size = file.size();
  WriteBytes(ckpt.root / rel, file);
  ckpt.files.push_back(f);
  return f;
}

// All files of a checkpoint concatenated in relative-path order: the flat byte space.
inline std::vector<uint8_t> FlatBytes(const Checkpoint& ckpt) {
  std::vector<const CheckpointFile*> order;
  for (const auto& f : ckpt.files) order.push_back(&f);
  std::sort(order.begin(), order.end(),
            [](auto* a, auto* b) { return a->relative_path < b->relative_path; });
  std::vector<uint8_t> out;
  for (const auto* f : order) {
    std::ifstream in(ckpt.root / f->relative_path, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  return out;
}

// A small checkpoint whose chunks (at kMinChunkSize) span file boundaries: two safetensors
// shards, a config file and an empty file, written out of order.
inline Checkpoint MakeSmallCheckpoint(const std::filesystem::path& root) {
  Checkpoint ckpt;
  ckpt.root = root;
  AddSafetensorsFile(ckpt, "model-00002.safetensors",
                     {{"layers.1.mlp.weight", DType::kBF16, {128, 300}},
                      {"layers.1.norm", DType::kF32, {128}},
                      {"lm_head.weight", DType::kBF16, {64, 256}}},
                     2);
  AddPlainFile(ckpt, "config.json", 1000, 3);
  AddPlainFile(ckpt, "empty.txt", 0, 4);
  AddSafetensorsFile(ckpt, "model-00001.safetensors",
                     {{"embed.weight", DType::kBF16, {256, 200}},
                      {"layers.0.mlp.weight", DType::kBF16, {128, 300}},
                      {"layers.0.norm", DType::kF32, {128}},
                      {"layers.0.scale", DType::kF8_E4M3, {0}}},
                     1);
  return ckpt;
}

}  // namespace weightcast::testing
