#include "manifest/chunk_size.h"

#include <gtest/gtest.h>

#include "manifest/builder.h"

namespace weightcast {
namespace {

constexpr uint64_t KiB = 1ull << 10, MiB = 1ull << 20, GiB = 1ull << 30;

TEST(ChooseChunkSize, TheFiguresOfDocsPublish) {
  EXPECT_EQ(ChooseChunkSize(128 * MiB), 128 * KiB);  // 1,024 chunks (the floor)
  EXPECT_EQ(ChooseChunkSize(1 * GiB), 128 * KiB);    // 8,192
  EXPECT_EQ(ChooseChunkSize(8 * GiB), 1 * MiB);      // 8,192
  EXPECT_EQ(ChooseChunkSize(70'000'000'000), 16 * MiB);
  EXPECT_EQ(ChooseChunkSize(500'000'000'000), 64 * MiB);  // 7,451 chunks (the ceiling)
}

TEST(ChooseChunkSize, StaysInsideTheBoundsAndTheManifestLimits) {
  for (uint64_t size : {uint64_t{0}, uint64_t{1}, 64 * KiB, 100 * MiB, 4 * GiB, 100 * GiB,
                        uint64_t{10'000'000'000'000}, ~uint64_t{0}}) {
    const uint64_t c = ChooseChunkSize(size);
    EXPECT_GE(c, kAutoChunkMin) << size;
    EXPECT_LE(c, kAutoChunkMax) << size;
    EXPECT_GE(c, kMinChunkSize) << size;
    EXPECT_LE(c, kMaxChunkSize) << size;
    EXPECT_EQ(c & (c - 1), 0u) << size << ": a power of two";
  }
}

TEST(ChooseChunkSize, AimsAtTheTargetChunkCountBetweenTheBounds) {
  for (uint64_t size = 600 * MiB; size <= 400 * GiB; size = size * 3 / 2) {
    const uint64_t c = ChooseChunkSize(size);
    const uint64_t chunks = (size + c - 1) / c;
    EXPECT_GT(chunks, kAutoChunkTarget / 2) << size;
    EXPECT_LE(chunks, kAutoChunkTarget + 1) << size;
  }
}

TEST(ChooseChunkSize, IsMonotonicAndAFunctionOfTheSizeOnly) {
  uint64_t previous = 0;
  for (uint64_t size = 1 * MiB; size <= 1024 * GiB; size += size / 7 + 1) {
    const uint64_t c = ChooseChunkSize(size);
    EXPECT_GE(c, previous) << size;
    EXPECT_EQ(c, ChooseChunkSize(size)) << size;
    previous = c;
  }
  // A few bytes more (metadata in a header) do not move it, except across a power of two.
  EXPECT_EQ(ChooseChunkSize(1 * GiB + 1), ChooseChunkSize(1 * GiB));
  EXPECT_EQ(ChooseChunkSize(3 * GiB + 4096), ChooseChunkSize(3 * GiB));
}

}  // namespace
}  // namespace weightcast
