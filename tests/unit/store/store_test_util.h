// Helpers for the store tests: deterministic file contents and manifests built over them.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hash/digest.h"
#include "manifest/builder.h"
#include "manifest/manifest.h"
#include "store/store.h"

namespace weightcast::store_test {

struct TestFile {
  std::string path;
  std::string bytes;
};

inline std::string RandomBytes(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(rng() & 0xff);
  return out;
}

// Three files, one chunk spanning a file boundary, one empty file; contents depend on `seed`.
inline std::vector<TestFile> SampleFiles(uint64_t seed, size_t scale = 1) {
  return {
      {"a.safetensors", RandomBytes(seed * 7 + 1, 100'000 * scale)},
      {"b/config.json", RandomBytes(seed * 7 + 2, 10)},
      {"b/empty.bin", ""},
      {"c.safetensors", RandomBytes(seed * 7 + 3, 150'001 * scale)},
  };
}

inline std::string Flat(const std::vector<TestFile>& files) {
  std::string out;
  for (const TestFile& f : files) out += f.bytes;
  return out;
}

// A manifest for `files` (sorted by path), with chunk hashes over their concatenation.
inline Manifest MakeManifest(const std::string& channel, Version version,
                             const std::vector<TestFile>& files,
                             uint64_t chunk_size = kMinChunkSize) {
  Manifest m;
  m.channel = channel;
  m.version = version;
  m.chunk_size = chunk_size;
  uint64_t offset = 0;
  for (const TestFile& f : files) {
    m.files.push_back({f.path, f.bytes.size(), offset});
    offset += f.bytes.size();
  }
  std::string flat = Flat(files);
  for (uint64_t at = 0; at < flat.size(); at += chunk_size) {
    m.chunk_hashes.push_back(
        HashBytes(m.hash_algorithm, AsBytes(std::string_view(flat).substr(at, chunk_size))));
  }
  m.root = ComputeRoot(m);
  return m;
}

inline std::span<const uint8_t> ChunkOf(const std::string& flat, const Manifest& m, ChunkIndex i) {
  ByteRange r = m.ChunkRange(i);
  return AsBytes(std::string_view(flat).substr(r.offset, r.size));
}

inline void WriteFiles(const std::filesystem::path& dir, const std::vector<TestFile>& files) {
  for (const TestFile& f : files) {
    std::filesystem::create_directories((dir / f.path).parent_path());
    std::ofstream out(dir / f.path, std::ios::binary | std::ios::trunc);
    out.write(f.bytes.data(), static_cast<std::streamsize>(f.bytes.size()));
  }
}

inline std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A fresh directory under the test temp dir, removed when the fixture ends.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::path(::testing::TempDir()) / "wcstore-XXXXXX").string();
    char* made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Stages and commits `files` as `version` through the chunk API.
inline Status StageAndCommit(Store& store, const std::string& channel, Version version,
                             const std::vector<TestFile>& files) {
  Manifest m = MakeManifest(channel, version, files);
  WC_ASSIGN_OR_RETURN(StagedVersion staged, store.BeginStaging(channel, m));
  std::string flat = Flat(files);
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    WC_RETURN_IF_ERROR(staged.PutChunk(ChunkIndex(i), ChunkOf(flat, m, ChunkIndex(i))));
  }
  return store.Commit(channel, version);
}

inline Store OpenOrDie(const std::filesystem::path& root, StoreOptions options = {}) {
  auto store = Store::Open(root, options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return std::move(store).value();
}

}  // namespace weightcast::store_test
