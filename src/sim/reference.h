// Fixed reference schedules run through the same network model as the swarm, so a swarm figure
// can be read next to what known schedules reach in the same run. Each returns the time the
// last receiver holds every byte, in seconds.
#pragma once

#include <cstdint>

namespace weightcast::sim {

struct ReferenceSetup {
  uint32_t receivers = 1;
  uint64_t total_bytes = 0;
  uint64_t chunk_bytes = 0;
  double bandwidth = 1.25e9;  // bytes/s per node
  bool shared = false;
  double latency = 0;  // one-way, added per hop
};

// Formulas (full duplex, no latency).
double SourceToAllFormula(const ReferenceSetup& s);  // N*S/B
double ChainFormula(const ReferenceSetup& s);        // S/B + (N-1)c/B
double BinomialFormula(const ReferenceSetup& s);     // S/B + log2(N)c/B

// The source sends the whole snapshot to every receiver at once; its upload is shared N ways.
double SimulateSourceToAll(const ReferenceSetup& s);
// Source -> 1 -> 2 -> ... -> N; each node forwards a chunk as soon as it holds it.
double SimulateChain(const ReferenceSetup& s);
// The binomial pipeline on a hypercube of 2^k nodes (source included), k = ceil(log2(N+1)):
// in round r nodes pair across dimension r mod k; the source sends chunk r, every other node
// sends its partner the globally rarest chunk the partner lacks. Finishes in C+k-1 rounds.
// `rounds` (if not null) receives the round count.
double SimulateBinomial(const ReferenceSetup& s, uint32_t* rounds = nullptr);

}  // namespace weightcast::sim
