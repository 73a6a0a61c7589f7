#include "sim/reference.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "sim/network.h"
#include "swarm/chunk_set.h"

namespace weightcast::sim {
namespace {

uint32_t ChunkCount(const ReferenceSetup& s) {
  return static_cast<uint32_t>((s.total_bytes + s.chunk_bytes - 1) / s.chunk_bytes);
}

double ChunkSize(const ReferenceSetup& s, uint32_t c) {
  const double start = double(c) * double(s.chunk_bytes);
  return std::min(double(s.chunk_bytes), double(s.total_bytes) - start);
}

Network MakeNetwork(const ReferenceSetup& s, uint32_t nodes) {
  std::vector<NodeLink> links(nodes, NodeLink{s.bandwidth, s.bandwidth, s.shared, -1});
  return Network(std::move(links), {});
}

}  // namespace

double SourceToAllFormula(const ReferenceSetup& s) {
  return double(s.receivers) * double(s.total_bytes) / s.bandwidth;
}
double ChainFormula(const ReferenceSetup& s) {
  return (double(s.total_bytes) + (double(s.receivers) - 1) * double(s.chunk_bytes)) / s.bandwidth;
}
double BinomialFormula(const ReferenceSetup& s) {
  return (double(s.total_bytes) + std::log2(double(s.receivers)) * double(s.chunk_bytes)) /
         s.bandwidth;
}

double SimulateSourceToAll(const ReferenceSetup& s) {
  Network net = MakeNetwork(s, s.receivers + 1);
  for (uint32_t r = 1; r <= s.receivers; ++r) net.Start(0, 0, r, double(s.total_bytes), r);
  double t = 0;
  while (net.active_flows() > 0) {
    t = net.NextEvent();
    net.Step();
  }
  return t + s.latency;
}

double SimulateChain(const ReferenceSetup& s) {
  const uint32_t n = s.receivers + 1, chunks = ChunkCount(s);
  Network net = MakeNetwork(s, n);
  // held[i]: chunks node i holds (a prefix); sent[i]: chunks node i has forwarded.
  std::vector<uint32_t> held(n, 0), sent(n, 0);
  std::vector<uint8_t> busy(n, 0);
  held[0] = chunks;
  auto try_send = [&](double now, uint32_t i) {
    if (i + 1 >= n || busy[i] || sent[i] >= held[i]) return;
    busy[i] = 1;
    net.Start(now + s.latency, i, i + 1, ChunkSize(s, sent[i]), sent[i]);
  };
  try_send(0, 0);
  double t = 0;
  while (net.active_flows() > 0) {
    t = net.NextEvent();
    const std::optional<FlowId> done = net.Step();
    if (!done) continue;
    const FlowId f = *done;
    const uint32_t from = net.src(f), to = net.dst(f);
    busy[from] = 0;
    ++sent[from];
    ++held[to];
    try_send(t, from);
    try_send(t, to);
  }
  return t;
}

double SimulateBinomial(const ReferenceSetup& s, uint32_t* rounds_out) {
  uint32_t k = 0;
  while ((uint64_t{1} << k) < uint64_t{s.receivers} + 1) ++k;
  const uint32_t n = 1u << k, chunks = ChunkCount(s);
  Network net = MakeNetwork(s, n);
  std::vector<swarm::ChunkSet> have(n, swarm::ChunkSet(chunks));
  have[0] = swarm::ChunkSet::Full(chunks);
  std::vector<uint32_t> holders(chunks, 1);
  // Chunks some but not all nodes hold; in this schedule only about k of them at a time.
  std::vector<uint32_t> open;
  uint32_t next_new = 0, done_nodes = 1, rounds = 0;
  double t = 0;
  struct Send {
    uint32_t from, to, chunk;
  };
  std::vector<Send> sends;
  while (done_nodes < n && k > 0) {
    const uint32_t d = rounds % k;
    sends.clear();
    for (uint32_t u = 0; u < n; ++u) {
      const uint32_t v = u ^ (1u << d);
      uint32_t pick = chunks;
      if (u == 0 && next_new < chunks) {
        pick = next_new;
      } else {
        for (uint32_t c : open) {
          if (!have[u].Contains(ChunkIndex(c)) || have[v].Contains(ChunkIndex(c))) continue;
          if (pick == chunks || holders[c] < holders[pick] ||
              (holders[c] == holders[pick] && c < pick)) {
            pick = c;
          }
        }
      }
      if (pick < chunks) sends.push_back(Send{u, v, pick});
    }
    if (next_new < chunks) open.push_back(next_new++);
    for (const Send& x : sends) net.Start(t, x.from, x.to, ChunkSize(s, x.chunk), x.chunk);
    while (net.active_flows() > 0) {
      t = net.NextEvent();
      net.Step();
    }
    t += s.latency;
    for (const Send& x : sends) {
      if (!have[x.to].Insert(ChunkIndex(x.chunk))) continue;
      ++holders[x.chunk];
      if (have[x.to].full()) ++done_nodes;
    }
    open.erase(
        std::remove_if(open.begin(), open.end(), [&](uint32_t c) { return holders[c] >= n; }),
        open.end());
    ++rounds;
  }
  if (rounds_out != nullptr) *rounds_out = rounds;
  return t;
}

}  // namespace weightcast::sim
