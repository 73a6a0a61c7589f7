// The simulator's network model reproduces the textbook schedules' formulas.
#include "sim/reference.h"

#include <gtest/gtest.h>

#include <cmath>

namespace weightcast::sim {
namespace {

ReferenceSetup MakeSetup(uint32_t n, uint64_t chunks) {
  ReferenceSetup s;
  s.receivers = n;
  s.chunk_bytes = 64 << 20;
  s.total_bytes = chunks * s.chunk_bytes;
  s.bandwidth = 1.25e9;
  return s;
}

TEST(Reference, ChainMatchesItsFormula) {
  for (uint32_t n : {1u, 7u, 50u}) {
    const ReferenceSetup s = MakeSetup(n, 100);
    EXPECT_NEAR(SimulateChain(s) / ChainFormula(s), 1.0, 0.01) << n << " receivers";
  }
}

TEST(Reference, BinomialPipelineMatchesItsFormula) {
  for (uint32_t k = 1; k <= 7; ++k) {
    const uint32_t n = (1u << k) - 1;
    const ReferenceSetup s = MakeSetup(n, 100);
    uint32_t rounds = 0;
    const double t = SimulateBinomial(s, &rounds);
    EXPECT_EQ(rounds, 100 + k - 1) << n << " receivers";
    // The formula's log2(N) is for N receivers; the hypercube takes k-1 = log2(N+1)-1 extra
    // rounds, so compare with that exact count and with the formula within 1%.
    EXPECT_NEAR(t, (100.0 + k - 1) * double(s.chunk_bytes) / s.bandwidth, 1e-6);
    EXPECT_NEAR(t / BinomialFormula(s), 1.0, 0.01) << n << " receivers";
  }
}

TEST(Reference, SourceToAllMatchesItsFormula) {
  const ReferenceSetup s = MakeSetup(20, 10);
  EXPECT_NEAR(SimulateSourceToAll(s) / SourceToAllFormula(s), 1.0, 0.01);
}

}  // namespace
}  // namespace weightcast::sim
