// The pure assembly of a sharded version from its parts (manifest/part_assembly.h).
#include "manifest/part_assembly.h"

#include <gtest/gtest.h>

#include "manifest/builder.h"
#include "unit/coord/coord_test_util.h"

namespace weightcast {
namespace {

using coord::testing::AsDelta;
using coord::testing::TestManifest;

constexpr uint32_t kWorld = 4;

// Rank `rank`'s part of `version`: `chunks` chunks, one tensor "w@R" holding rows
// [rank*8, rank*8+8) of a 32 x 1024 F32 tensor "w", and step `step`.
Manifest Part(uint64_t version, uint32_t rank, uint64_t seed, int step = 7, uint32_t chunks = 3,
              uint32_t world = kWorld) {
  Manifest m = TestManifest("policy", version, seed * 100 + rank, chunks);
  ManifestTensor t;
  t.name = "w@" + std::to_string(rank);
  t.dtype = DType::kF32;
  t.shape = {8, 1024};
  t.offset = 1024;
  t.size = 8 * 1024 * 4;
  m.tensors.push_back(t);
  m.metadata[std::string(kPartKey)] = PartValue({rank, world});
  m.metadata["step"] = std::to_string(step);
  m.metadata["weightcast.publish.source"] = "/ckpt/rank" + std::to_string(rank);
  m.metadata[std::string(kPartSlicesKey)] = SlicesText({{.whole = "w",
                                                         .dim = 0,
                                                         .slice = t.name,
                                                         .start = rank * 8ull,
                                                         .length = 8,
                                                         .extent = 8ull * world}});
  m.root = ComputeRoot(m);
  return m;
}

PartAssembly NewAssembly(uint64_t version = 5) {
  return PartAssembly("policy", Version(version), kWorld,
                      PartDeadline{} + std::chrono::seconds(30));
}

Manifest Complete(PartAssembly& a, uint64_t seed, const Manifest* base = nullptr,
                  std::string* why = nullptr) {
  for (uint32_t r = 0; r < kWorld; ++r) {
    auto added = a.Add({r, kWorld}, Part(a.version().value(), r, seed));
    EXPECT_TRUE(added.ok()) << added.status().ToString();
  }
  auto m = a.Assemble(base, why);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : Manifest{};
}

TEST(PartAssembly, ReadsThePartKey) {
  Manifest m = TestManifest("policy", 1, 1);
  EXPECT_EQ(*PartOf(m), std::nullopt);
  m.metadata[std::string(kPartKey)] = "2/4";
  EXPECT_EQ(**PartOf(m), (PartId{2, 4}));
  for (const char* bad : {"4/4", "1/1", "x/4", "1/", "1/4/5", "0/5000"}) {
    m.metadata[std::string(kPartKey)] = bad;
    EXPECT_EQ(PartOf(m).status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(PartAssembly, AssemblesOnlyWhenEveryPartIsIn) {
  PartAssembly a = NewAssembly();
  for (uint32_t r : {2u, 0u, 3u}) {
    ASSERT_EQ(*a.Add({r, kWorld}, Part(5, r, 1)), PartAssembly::Added::kNew);
    EXPECT_FALSE(a.complete());
    EXPECT_EQ(a.Assemble(nullptr).status().code(), Code::kFailedPrecondition);
  }
  EXPECT_EQ(a.Missing(), std::vector<uint32_t>{1});
  ASSERT_TRUE(a.Add({1, kWorld}, Part(5, 1, 1)).ok());
  ASSERT_TRUE(a.complete());
  auto m = a.Assemble(nullptr);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->chunk_count(), 12u);
  EXPECT_EQ(m->files.size(), 4u);
  EXPECT_EQ(m->files[1].path, "rank-00001-of-00004/model.safetensors");
  EXPECT_EQ(m->files[1].offset, 3 * kMinChunkSize);
  EXPECT_EQ(m->tensors[2].name, "w@2");
  EXPECT_EQ(m->tensors[2].offset, 6 * kMinChunkSize + 1024);
  EXPECT_EQ(m->tensors[2].file_index, 2u);
  EXPECT_EQ(m->chunk_hashes[4], Part(5, 1, 1).chunk_hashes[1]);
  EXPECT_EQ(m->root, ComputeRoot(*m));
  EXPECT_FALSE(m->delta.has_value());
  EXPECT_EQ(m->metadata.at("step"), "7");
  EXPECT_EQ(m->metadata.at("weightcast.publish.source"), "/ckpt/rank0");
  EXPECT_FALSE(m->metadata.contains(std::string(kPartKey)));

  auto parts = PartsOf(*m);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->size(), 4u);
  EXPECT_EQ((*parts)[3].first_chunk, 9u);
  EXPECT_EQ((*parts)[3].root, Part(5, 3, 1).root);

  auto slices = SlicesOf(*m, kSlicesKey);
  ASSERT_TRUE(slices.ok()) << slices.status().ToString();
  ASSERT_EQ(slices->size(), 4u);
  EXPECT_EQ((*slices)[1], (TensorSlice{"w", 0, "w@1", 8, 8, 32}));
}

TEST(PartAssembly, ADuplicatePartIsARetryAndAnotherPartOfTheSameRankIsRefused) {
  PartAssembly a = NewAssembly();
  ASSERT_EQ(*a.Add({1, kWorld}, Part(5, 1, 1)), PartAssembly::Added::kNew);
  EXPECT_EQ(*a.Add({1, kWorld}, Part(5, 1, 1)), PartAssembly::Added::kDuplicate);
  auto other = a.Add({1, kWorld}, Part(5, 1, 2));
  EXPECT_EQ(other.status().code(), Code::kAlreadyExists);
  EXPECT_NE(
      other.status().message().find("rank 1's part of policy v5: this rank already gave a part"),
      std::string::npos);
  EXPECT_EQ(a.parts_in(), 1u);
  EXPECT_EQ(a.Part(1)->root, Part(5, 1, 1).root);
}

TEST(PartAssembly, RanksAtDifferentStepsCanNeverBeOneVersion) {
  PartAssembly a = NewAssembly();
  ASSERT_TRUE(a.Add({0, kWorld}, Part(5, 0, 1, /*step=*/7)).ok());
  auto late = a.Add({1, kWorld}, Part(5, 1, 1, /*step=*/8));
  EXPECT_EQ(late.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(late.status().message().find("step is '8' but rank 0 gave '7'"), std::string::npos)
      << late.status().message();
  EXPECT_EQ(a.parts_in(), 1u);
}

TEST(PartAssembly, RefusesPartsThatDoNotFit) {
  PartAssembly a = NewAssembly();
  ASSERT_TRUE(a.Add({0, kWorld}, Part(5, 0, 1)).ok());
  EXPECT_EQ(a.Add({1, kWorld}, Part(6, 1, 1)).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(a.Add({1, 2}, Part(5, 1, 1, 7, 3, 2)).status().code(), Code::kInvalidArgument);
  Manifest other_chunks = Part(5, 1, 1);
  other_chunks.chunk_size *= 2;
  other_chunks.files[0].size = other_chunks.chunk_size * 2;
  other_chunks.chunk_hashes.resize(2);
  other_chunks.root = ComputeRoot(other_chunks);
  auto refused = a.Add({1, kWorld}, other_chunks);
  EXPECT_EQ(refused.status().code(), Code::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--chunk-size"), std::string::npos);
  // Every part but the last is a whole number of chunks (the publisher pads it).
  Manifest ragged = Part(5, 2, 1);
  ragged.files[0].size -= 100;
  ragged.root = ComputeRoot(ragged);
  EXPECT_EQ(a.Add({2, kWorld}, ragged).status().code(), Code::kInvalidArgument);
  Manifest ragged_last = Part(5, 3, 1);
  ragged_last.files[0].size -= 100;
  ragged_last.root = ComputeRoot(ragged_last);
  EXPECT_TRUE(a.Add({3, kWorld}, ragged_last).ok());
  // A tensor name two ranks share.
  Manifest clash = Part(5, 1, 1);
  clash.tensors[0].name = "w@0";
  clash.root = ComputeRoot(clash);
  EXPECT_EQ(a.Add({1, kWorld}, clash).status().code(), Code::kFailedPrecondition);
}

TEST(PartAssembly, ExpiresAtItsDeadlineNamingTheMissingRanks) {
  PartAssembly a = NewAssembly();
  ASSERT_TRUE(a.Add({0, kWorld}, Part(5, 0, 1)).ok());
  ASSERT_TRUE(a.Add({3, kWorld}, Part(5, 3, 1)).ok());
  EXPECT_FALSE(a.Expired(PartDeadline{} + std::chrono::seconds(29)));
  EXPECT_TRUE(a.Expired(PartDeadline{} + std::chrono::seconds(30)));
  EXPECT_EQ(a.ExpiredReason("30s"),
            "sharded v5: the parts of ranks 1, 2 did not arrive within 30s of the first (2 of 4 "
            "in)");
}

TEST(PartAssembly, DeltaPerPartOnTheSameRankOfTheBase) {
  PartAssembly first = NewAssembly(4);
  const Manifest base = Complete(first, 1);
  ASSERT_EQ(base.chunk_count(), 12u);

  PartAssembly next = NewAssembly(5);
  for (uint32_t r = 0; r < kWorld; ++r) {
    Manifest part = AsDelta(Part(5, r, 2), Part(4, r, 1));
    ASSERT_TRUE(next.Add({r, kWorld}, part).ok());
  }
  std::string why;
  auto m = next.Assemble(&base, &why);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE(m->delta.has_value()) << why;
  EXPECT_EQ(m->delta->base_version, Version(4));
  EXPECT_EQ(m->delta->base_root, base.root);
  ASSERT_EQ(m->delta->chunks.size(), 12u);
  EXPECT_EQ(m->delta->chunks[3].encoding, ChunkEncoding::kSame);  // rank 1's first chunk
  EXPECT_EQ(m->delta->chunks[4].encoding, ChunkEncoding::kXor);

  // One part full: the version is full, and says why.
  PartAssembly mixed = NewAssembly(5);
  for (uint32_t r = 0; r < kWorld; ++r) {
    Manifest part = r == 2 ? Part(5, r, 2) : AsDelta(Part(5, r, 2), Part(4, r, 1));
    ASSERT_TRUE(mixed.Add({r, kWorld}, part).ok());
  }
  auto full = mixed.Assemble(&base, &why);
  ASSERT_TRUE(full.ok());
  EXPECT_FALSE(full->delta.has_value());
  EXPECT_EQ(why, "rank 2's part is full");

  // A part that is a delta on something other than the base's part of its rank.
  PartAssembly wrong = NewAssembly(5);
  for (uint32_t r = 0; r < kWorld; ++r) {
    Manifest part = AsDelta(Part(5, r, 2), Part(4, r == 1 ? 2 : r, 1));
    ASSERT_TRUE(wrong.Add({r, kWorld}, part).ok());
  }
  auto off = wrong.Assemble(&base, &why);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->delta.has_value());
  EXPECT_NE(why.find("rank 1"), std::string::npos) << why;
}

TEST(PartAssembly, SlicesMustTileTheirWholeTensor) {
  PartAssembly a = NewAssembly();
  for (uint32_t r = 0; r < kWorld; ++r) {
    Manifest part = Part(5, r, 1);
    if (r == 2) {
      // Rows 16..24 claimed as 17..25: a gap at 16 and an overlap.
      part.metadata[std::string(kPartSlicesKey)] = SlicesText(
          {{.whole = "w", .dim = 0, .slice = "w@2", .start = 17, .length = 8, .extent = 32}});
      part.root = ComputeRoot(part);
    }
    ASSERT_TRUE(a.Add({r, kWorld}, part).ok());
  }
  auto m = a.Assemble(nullptr);
  EXPECT_EQ(m.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(m.status().message().find("gap or overlap"), std::string::npos) << m.status().message();
}

TEST(PartAssembly, CorruptPartTablesAreRefused) {
  PartAssembly a = NewAssembly();
  Manifest m = Complete(a, 1);
  m.metadata[std::string(kPartsKey)] = "0\t0\t3\t0\t196608\tzz\n";
  EXPECT_EQ(PartsOf(m).status().code(), Code::kCorrupt);
  m.metadata[std::string(kPartsKey)] = "1\t0\t12\t0\t786432\t" + std::string(64, 'a') + "\n";
  EXPECT_EQ(PartsOf(m).status().code(), Code::kCorrupt);
  m.metadata.erase(std::string(kPartsKey));
  EXPECT_TRUE(PartsOf(m)->empty());
}

}  // namespace
}  // namespace weightcast
