// SparseApplier: the run loop (changes patched in one tight loop per element width wherever the
// bytes lie contiguously) gives exactly what the change-by-change path gives, for every width,
// value form, gap form and density, with blocks and pieces that cut elements.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/transform.h"

namespace weightcast::codec {
namespace {

using Bytes = std::vector<uint8_t>;

// A chunk of segments of random widths (some with a tail that is not a whole element), a base
// and a target where a fraction `changed` of the elements moved.
struct RandomChunk {
  std::vector<Segment> segments;
  Bytes base, target;

  RandomChunk(std::mt19937_64& rng, double changed) {
    const uint8_t widths[] = {1, 2, 4, 8};
    const int count = 1 + static_cast<int>(rng() % 5);
    for (int s = 0; s < count; ++s) {
      const uint8_t w = widths[rng() % 4];
      const uint64_t size = 1 + rng() % 3000;
      segments.push_back({size, w});
    }
    uint64_t size = 0;
    for (const Segment& s : segments) size += s.size;
    base.resize(size);
    for (auto& x : base) x = static_cast<uint8_t>(rng());
    target = base;
    std::bernoulli_distribution pick(changed);
    uint64_t at = 0;
    for (const Segment& s : segments) {
      for (uint64_t e = 0; e + s.width <= s.size; e += s.width) {
        if (!pick(rng)) continue;
        // Small moves of the element as an integer, as an optimizer step makes them, carries
        // included; sometimes a wholly new value.
        uint64_t v = 0;
        std::memcpy(&v, &target[at + e], s.width);
        v = rng() % 8 == 0 ? rng() : v + 1 + rng() % 3;
        std::memcpy(&target[at + e], &v, s.width);
        if (std::memcmp(&target[at + e], &base[at + e], s.width) == 0) target[at + e] ^= 1;
      }
      for (uint64_t t = s.size - s.size % s.width; t < s.size; ++t) {
        if (pick(rng)) target[at + t] ^= static_cast<uint8_t>(1 + rng() % 255);
      }
      at += s.size;
    }
  }
};

// Pieces of the chunk [begin, end): held ones in `held` (copies of the base), others not.
struct Pieces {
  struct Piece {
    uint64_t begin, end;
    bool held;
  };
  std::vector<Piece> list;
  Bytes held;  // the chunk's bytes; only held pieces are meaningful

  Pieces(std::mt19937_64& rng, const Bytes& base) : held(base) {
    uint64_t at = 0;
    while (at < base.size()) {
      const uint64_t end = std::min<uint64_t>(base.size(), at + 1 + rng() % 5000);
      list.push_back({at, end, rng() % 4 != 0});
      at = end;
    }
  }
};

// A placement over Pieces that answers At only (every change goes through Advance), or Run too.
class TestPlacement final : public SparseApplier::Placement {
 public:
  TestPlacement(Pieces& pieces, bool runs) : pieces_(pieces), runs_(runs) {}
  uint8_t* At(uint64_t offset, uint64_t len) override {
    const Pieces::Piece* p = Find(offset);
    if (p == nullptr || !p->held || offset + len > p->end) return nullptr;
    return pieces_.held.data() + offset;
  }
  uint8_t* Run(uint64_t offset, uint64_t* begin, uint64_t* end) override {
    if (!runs_) return nullptr;
    const Pieces::Piece* p = Find(offset);
    if (p == nullptr || !p->held) return nullptr;
    *begin = p->begin;
    *end = p->end;
    return pieces_.held.data() + p->begin;
  }

 private:
  const Pieces::Piece* Find(uint64_t offset) const {
    for (const Pieces::Piece& p : pieces_.list) {
      if (offset >= p.begin && offset < p.end) return &p;
    }
    return nullptr;
  }
  Pieces& pieces_;
  bool runs_;
};

struct Form {
  SparseValues values;
  bool varint_gaps;
};

class SparseApplierRuns : public ::testing::TestWithParam<Form> {};

TEST_P(SparseApplierRuns, FillWithBlocksThatCutElementsGivesTheTarget) {
  std::mt19937_64 rng(7);
  for (double changed : {0.0, 0.001, 0.05, 0.5, 1.0}) {
    for (int round = 0; round < 20; ++round) {
      RandomChunk c(rng, changed);
      Bytes stream;
      SparseForward(c.target, c.base, c.segments, GetParam().values, GetParam().varint_gaps,
                    stream);
      SparseApplier applier(stream, c.base, c.segments, GetParam().values);
      Bytes out(c.base.size());
      uint64_t at = 0;
      while (at < out.size()) {
        const uint64_t n = std::min<uint64_t>(out.size() - at, 1 + rng() % 777);
        ASSERT_TRUE(applier.Fill(at, std::span<uint8_t>(out).subspan(at, n)).ok());
        at += n;
      }
      ASSERT_TRUE(applier.Finish().ok());
      ASSERT_EQ(out, c.target) << "changed " << changed << " round " << round;
    }
  }
}

TEST_P(SparseApplierRuns, InPlaceRunsEqualChangeByChange) {
  std::mt19937_64 rng(8);
  for (double changed : {0.001, 0.05, 0.5, 1.0}) {
    for (int round = 0; round < 20; ++round) {
      RandomChunk c(rng, changed);
      Bytes stream;
      SparseForward(c.target, c.base, c.segments, GetParam().values, GetParam().varint_gaps,
                    stream);
      std::mt19937_64 cut(rng());
      Pieces by_runs(cut, c.base);
      Pieces one_by_one = by_runs;
      for (auto [pieces, runs] : {std::pair<Pieces*, bool>{&by_runs, true}, {&one_by_one, false}}) {
        SparseApplier applier(stream, {}, c.segments, GetParam().values);
        TestPlacement placement(*pieces, runs);
        uint64_t end = 0;
        while (end < c.base.size()) {
          end = std::min<uint64_t>(c.base.size(), end + 1 + rng() % 4096);
          ASSERT_TRUE(applier.ApplyInPlaceUntil(placement, end).ok());
        }
        ASSERT_TRUE(applier.Finish().ok());
      }
      ASSERT_EQ(by_runs.held, one_by_one.held) << "changed " << changed << " round " << round;
      // One held piece over the whole chunk is the target.
      Pieces whole(cut, c.base);
      whole.list = {{0, c.base.size(), true}};
      SparseApplier applier(stream, {}, c.segments, GetParam().values);
      TestPlacement placement(whole, true);
      ASSERT_TRUE(applier.ApplyInPlace(placement).ok());
      ASSERT_EQ(whole.held, c.target);
    }
  }
}

TEST_P(SparseApplierRuns, AGapPastTheSegmentIsCorruptOnEitherPath) {
  // One bf16 segment of 8 elements, one change (the last element) whose gap is rewritten to
  // point past the segment.
  const std::vector<Segment> segs = {{16, 2}};
  Bytes base(16, 0), target(16, 0);
  target[14] = 1;
  Bytes stream;
  SparseForward(target, base, segs, GetParam().values, GetParam().varint_gaps, stream);
  // count (varint 1), gap width, then the gap 7: a varint, or a plane header (4 bits) and the
  // packed byte.
  const size_t gap_at = GetParam().varint_gaps ? 2 : 3;
  ASSERT_EQ(stream[gap_at], 7);
  stream[gap_at] = 9;
  std::mt19937_64 rng(1);
  for (bool runs : {true, false}) {
    Pieces pieces(rng, base);
    pieces.list = {{0, 16, true}};
    SparseApplier applier(stream, {}, segs, GetParam().values);
    TestPlacement placement(pieces, runs);
    EXPECT_EQ(applier.ApplyInPlace(placement).code(), Code::kCorrupt);
  }
  SparseApplier applier(stream, base, segs, GetParam().values);
  Bytes out(16);
  EXPECT_EQ(applier.Fill(0, out).code(), Code::kCorrupt);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, SparseApplierRuns,
    ::testing::Values(Form{SparseValues::kDiff, false}, Form{SparseValues::kXor, false},
                      Form{SparseValues::kDiff, true}, Form{SparseValues::kXor, true}),
    [](const ::testing::TestParamInfo<Form>& info) {
      return std::string(info.param.values == SparseValues::kDiff ? "Diff" : "Xor") +
             (info.param.varint_gaps ? "VarintGaps" : "PlaneGaps");
    });

}  // namespace
}  // namespace weightcast::codec
