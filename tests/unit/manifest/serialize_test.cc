#include <gtest/gtest.h>

#include <functional>

#include "manifest/builder.h"
#include "manifest/manifest.pb.h"
#include "manifest_test_util.h"

namespace weightcast {
namespace {

using testing::MakeSmallCheckpoint;
using testing::TempDir;

class ManifestSerialization : public ::testing::Test {
 protected:
  void SetUp() override {
    Checkpoint ckpt = MakeSmallCheckpoint(dir_.path());
    Result<Manifest> m = BuildManifest(ckpt, "policy", Version(7), {.chunk_size = kMinChunkSize});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    manifest_ = *m;
  }

  // Applies `mutate` to the struct, recomputes the root (so the check under test, not the root,
  // is what fails), serializes and parses.
  Status ParseMutated(const std::function<void(Manifest&)>& mutate, bool fix_root = true) {
    Manifest m = manifest_;
    mutate(m);
    if (fix_root) m.root = ComputeRoot(m);
    return ParseManifest(AsBytes(SerializeManifest(m))).status();
  }

  // Same, but mutating the protobuf message directly (for values the struct cannot hold).
  Status ParseMutatedProto(const std::function<void(manifest::Manifest&)>& mutate) {
    manifest::Manifest p;
    EXPECT_TRUE(p.ParseFromString(SerializeManifest(manifest_)));
    mutate(p);
    return ParseManifest(AsBytes(p.SerializeAsString())).status();
  }

  TempDir dir_;
  Manifest manifest_;
};

void ExpectCorrupt(const Status& s, std::string_view needle) {
  EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos)
      << "message \"" << s.message() << "\" does not mention \"" << needle << "\"";
}

bool SameManifest(const Manifest& a, const Manifest& b) {
  auto file_eq = [](const ManifestFile& x, const ManifestFile& y) {
    return x.path == y.path && x.size == y.size && x.offset == y.offset;
  };
  auto tensor_eq = [](const ManifestTensor& x, const ManifestTensor& y) {
    return x.name == y.name && x.dtype == y.dtype && x.shape == y.shape &&
           x.file_index == y.file_index && x.offset == y.offset && x.size == y.size;
  };
  auto delta_eq = [](const std::optional<DeltaInfo>& x, const std::optional<DeltaInfo>& y) {
    if (x.has_value() != y.has_value()) return false;
    if (!x.has_value()) return true;
    if (x->base_version != y->base_version || x->base_root != y->base_root) return false;
    return std::equal(x->chunks.begin(), x->chunks.end(), y->chunks.begin(), y->chunks.end(),
                      [](const DeltaChunk& c, const DeltaChunk& d) {
                        return c.encoding == d.encoding && c.payload_size == d.payload_size &&
                               c.payload_hash == d.payload_hash;
                      });
  };
  return a.format_version == b.format_version && a.channel == b.channel && a.version == b.version &&
         a.hash_algorithm == b.hash_algorithm && a.chunk_size == b.chunk_size &&
         std::equal(a.files.begin(), a.files.end(), b.files.begin(), b.files.end(), file_eq) &&
         std::equal(a.tensors.begin(), a.tensors.end(), b.tensors.begin(), b.tensors.end(),
                    tensor_eq) &&
         a.chunk_hashes == b.chunk_hashes && a.metadata == b.metadata &&
         delta_eq(a.delta, b.delta) && a.root == b.root;
}

TEST_F(ManifestSerialization, RoundTripsAFullVersion) {
  manifest_.metadata = {{"step", "1234"}, {"trainer", "node-3"}};
  const std::string bytes = SerializeManifest(manifest_);
  Result<Manifest> parsed = ParseManifest(AsBytes(bytes));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(SameManifest(*parsed, manifest_));
  EXPECT_FALSE(parsed->delta.has_value());
  EXPECT_EQ(SerializeManifest(*parsed), bytes);  // deterministic
}

TEST_F(ManifestSerialization, RoundTripsADelta) {
  DeltaInfo delta;
  delta.base_version = Version(6);
  delta.base_root[5] = 9;
  for (uint32_t i = 0; i < manifest_.chunk_count(); ++i) {
    DeltaChunk c;
    c.encoding = static_cast<ChunkEncoding>(i % 3);
    c.payload_size = c.encoding == ChunkEncoding::kSame ? 0 : 1000 + i;
    c.payload_hash[0] = static_cast<uint8_t>(i);
    delta.chunks.push_back(c);
  }
  manifest_.delta = delta;
  Result<Manifest> parsed = ParseManifest(AsBytes(SerializeManifest(manifest_)));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(SameManifest(*parsed, manifest_));
}

TEST_F(ManifestSerialization, WritesAndReadsFiles) {
  const auto path = dir_.path() / "v7.manifest";
  ASSERT_TRUE(WriteManifestFile(path, manifest_).ok());
  Result<Manifest> read = ReadManifestFile(path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(SameManifest(*read, manifest_));

  const std::string bytes = SerializeManifest(manifest_);
  testing::WriteBytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 2));
  Result<Manifest> truncated = ReadManifestFile(path);
  EXPECT_EQ(truncated.status().code(), Code::kCorrupt);
  EXPECT_NE(truncated.status().message().find(path.string()), std::string::npos);
  EXPECT_EQ(ReadManifestFile(dir_.path() / "missing").status().code(), Code::kNotFound);
}

TEST_F(ManifestSerialization, RefusesToWriteAnInvalidManifest) {
  manifest_.root[0] ^= 1;
  EXPECT_FALSE(WriteManifestFile(dir_.path() / "bad", manifest_).ok());
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "bad"));
}

TEST_F(ManifestSerialization, RejectsGarbageAndEmptyInput) {
  ExpectCorrupt(ParseManifest({}).status(), "empty");
  const std::string junk = "\xff\xff\xff\xff not a manifest";
  ExpectCorrupt(ParseManifest(AsBytes(junk)).status(), "not a valid protobuf");
}

TEST_F(ManifestSerialization, RejectsFutureAndMissingFormatVersions) {
  ExpectCorrupt(ParseMutatedProto([](manifest::Manifest& p) { p.set_format_version(2); }),
                "newer than this build");
  ExpectCorrupt(ParseMutatedProto([](manifest::Manifest& p) { p.set_format_version(0); }),
                "no format_version");
  // A future schema that no longer parses as this one still gets the clear message.
  std::string future = "\x08\x09";
  future += "\x12\xff";  // field 2, length beyond the input
  ExpectCorrupt(ParseManifest(AsBytes(future)).status(), "format version 9 is newer");
}

TEST_F(ManifestSerialization, RejectsARootMismatch) {
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.root[3] ^= 1; }, /*fix_root=*/false),
                "root hash mismatch");
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.chunk_hashes[0][0] ^= 1; }, false),
                "root hash mismatch");
  ExpectCorrupt(ParseMutatedProto([](manifest::Manifest& p) { p.set_root("short"); }),
                "root hash is 5 bytes");
}

TEST_F(ManifestSerialization, RejectsAChunkHashThatIsNot32Bytes) {
  ExpectCorrupt(
      ParseMutatedProto([](manifest::Manifest& p) { p.mutable_chunk_hashes(1)->pop_back(); }),
      "chunk hash 1 is 31 bytes");
  ExpectCorrupt(
      ParseMutatedProto([](manifest::Manifest& p) { p.mutable_chunk_hashes(0)->append("x"); }),
      "chunk hash 0 is 33 bytes");
}

TEST_F(ManifestSerialization, RejectsDTypeAndEnumsOutOfRange) {
  ExpectCorrupt(ParseMutatedProto([](manifest::Manifest& p) {
                  p.mutable_tensors(0)->set_dtype(static_cast<manifest::DType>(77));
                }),
                "dtype 77 is out of range");
  ExpectCorrupt(ParseMutatedProto([](manifest::Manifest& p) {
                  p.mutable_tensors(0)->set_dtype(manifest::DTYPE_UNSPECIFIED);
                }),
                "dtype 0 is out of range");
  ExpectCorrupt(ParseMutatedProto([](manifest::Manifest& p) {
                  p.set_hash_algorithm(manifest::HASH_ALGORITHM_UNSPECIFIED);
                }),
                "unknown chunk hash algorithm");
}

TEST_F(ManifestSerialization, RejectsShapesThatDisagreeWithSizes) {
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.tensors[0].shape[0] += 1; }),
                "make 102800 bytes, but its size is 102400");
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.tensors[0].dtype = DType::kF32; }),
                "shape and dtype F32");
  ExpectCorrupt(ParseMutated([](Manifest& m) {
                  m.tensors[0].shape = {1ull << 40, 1ull << 40};
                }),
                "overflows");
}

TEST_F(ManifestSerialization, RejectsOffsetsThatAreNotContiguous) {
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.files[2].offset += 1; }),
                "file 2 (model-00001.safetensors) starts at offset");
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.files[0].offset = 5; }), "expected 0");
}

TEST_F(ManifestSerialization, RejectsFilesOutOfOrderDuplicatedOrWithBadPaths) {
  ExpectCorrupt(ParseMutated([](Manifest& m) { std::swap(m.files[0].path, m.files[1].path); }),
                "sorted by path");
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.files[1].path = m.files[0].path; }),
                "without duplicates");
  for (const char* bad : {"../etc/passwd", "/abs", "a//b", "a/./b", "dir/", ""}) {
    ExpectCorrupt(ParseMutated([&](Manifest& m) { m.files[0].path = bad; }), "file 0");
  }
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.files.clear(); }), "no files");
}

TEST_F(ManifestSerialization, RejectsTensorsOutsideTheirFileOrOverlapping) {
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.tensors[0].file_index = 0; }),
                "are outside file 0 (config.json)");
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.tensors[0].file_index = 99; }),
                "file index 99 is beyond");
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.tensors[0].offset = ~uint64_t{0} - 4; }),
                "outside");
  ExpectCorrupt(ParseMutated([](Manifest& m) { std::swap(m.tensors[0], m.tensors[1]); }),
                "overlaps or precedes");
}

TEST_F(ManifestSerialization, RejectsAChunkCountThatDisagreesWithTheTotalSize) {
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.chunk_hashes.push_back({}); }),
                "chunk hashes, but");
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.chunk_size *= 2; }), "chunk hashes, but");
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.chunk_size = 4096; }), "chunk size 4096");
}

TEST_F(ManifestSerialization, RejectsBadChannelVersionMetadataAndDelta) {
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.channel = "../x"; }), "channel name");
  ExpectCorrupt(ParseMutated([](Manifest& m) { m.version = Version(0); }), "version is 0");
  ExpectCorrupt(ParseMutated([](Manifest& m) {
                  for (size_t i = 0; i <= kMaxMetadataEntries; ++i) {
                    m.metadata["k" + std::to_string(i)] = "v";
                  }
                }),
                "metadata entries");
  auto with_delta = [](Manifest& m) {
    m.delta = DeltaInfo{Version(6), Digest{}, std::vector<DeltaChunk>(m.chunk_count())};
  };
  EXPECT_TRUE(ParseMutated(with_delta).ok());
  ExpectCorrupt(ParseMutated([&](Manifest& m) {
                  with_delta(m);
                  m.delta->base_version = Version(7);
                }),
                "delta base version 7");
  ExpectCorrupt(ParseMutated([&](Manifest& m) {
                  with_delta(m);
                  m.delta->chunks.pop_back();
                }),
                "delta describes");
  ExpectCorrupt(ParseMutated([&](Manifest& m) {
                  with_delta(m);
                  m.delta->chunks[0] = {ChunkEncoding::kSame, 10, {}};
                }),
                "is 'same' but has a payload");
  ExpectCorrupt(ParseMutatedProto([](manifest::Manifest& p) {
                  p.mutable_delta()->set_base_version(1);
                  p.mutable_delta()->set_base_root(std::string(32, '\0'));
                  for (int i = 0; i < p.chunk_hashes_size(); ++i) {
                    auto* c = p.mutable_delta()->add_chunks();
                    c->set_payload_hash(std::string(32, '\0'));
                    c->set_encoding(static_cast<manifest::ChunkEncoding>(i == 0 ? 5 : 0));
                  }
                }),
                "encoding 5 is out of range");
}

TEST_F(ManifestSerialization, RefusesTooManyEntriesBeforeParsingThem) {
  // A million and one empty File entries: 2 bytes each on the wire.
  std::string bytes = SerializeManifest(manifest_);
  for (size_t i = 0; i <= kMaxManifestFiles; ++i) bytes += std::string("\x32\x00", 2);
  ExpectCorrupt(ParseManifest(AsBytes(bytes)).status(), "1000005 files, over the limit");
  // Counting walks into the delta section too; 100,001 empty delta chunks are under the limit
  // (a test over it would need 200 MB) and are then refused by validation, not by a crash.
  std::string delta;
  for (size_t i = 0; i <= kMaxManifestChunks / 1000; ++i) delta += std::string("\x1a\x00", 2);
  std::string prefix = "\x52";  // field 10, length-delimited
  uint64_t n = delta.size();
  while (n >= 0x80) {
    prefix += static_cast<char>((n & 0x7f) | 0x80);
    n >>= 7;
  }
  prefix += static_cast<char>(n);
  EXPECT_TRUE(
      ParseManifest(AsBytes(SerializeManifest(manifest_) + prefix + delta)).status().code() ==
      Code::kCorrupt);
}

TEST_F(ManifestSerialization, RejectsXxhHashesWithANonZeroTail) {
  ExpectCorrupt(ParseMutated([](Manifest& m) {
                  m.hash_algorithm = HashAlgorithm::kXxh3_128;
                  m.chunk_hashes[0][20] = 1;
                }),
                "last 16 bytes zero");
}

}  // namespace
}  // namespace weightcast
