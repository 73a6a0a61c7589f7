// The chunk size a version gets when the publisher is not told one (docs/publish.md, "Chunk
// size"). One function, so that `weightcast publish`, the library publisher and `weightcast sim`
// cut a version of a given size the same way.
#pragma once

#include <cstdint>
#include <string_view>

#include <weightcast/status.h>

namespace weightcast {

// A chunk-size option of 0 means "by the rule below", at every door: `weightcast publish`,
// `manifest`, `diff`, `store import` and `demo` (--chunk-size auto, their default), the C++ and
// Python Publisher and MemoryPublisher (chunk_size 0, their default). A channel's later versions
// keep the chunk size of the version before them (deltas need equal chunk sizes).
inline constexpr uint64_t kAutoChunkSize = 0;

// About this many chunks per version. Each receiver finishes about K·c/B after S/B (c the chunk
// size, B the link): a chunk takes source_slots·c/B to leave the source and about slots·c/B per
// further hop; measured in the simulator at the default tuning, K ≈ 75 for the slowest of 100
// nodes, ≈ 105 for the median and ≈ 150 for the slowest of 1,000 (docs/publish.md). The excess
// over the bound is then K/C of S/B for C chunks: 8,192 chunks keep it near 1-2%. More chunks
// cost per-chunk work (a request, HAVEs to the peers, a hash, a manifest entry of ~50 bytes) and
// simulator time for a gain of a percent or less.
inline constexpr uint64_t kAutoChunkTarget = 8192;
// The smallest automatic chunk. Each chunk costs the agent fixed work (a request, HAVEs, thread
// hand-offs, a hash call): on the emulated 16-host cluster (128 MiB at 50 Mbit/s, one binary,
// one loaded machine) the slowest host took 1.50x S/B at 64 KiB, 1.20x at 128 KiB, 1.26x at
// 256 KiB (docs/BENCHMARKS.md).
inline constexpr uint64_t kAutoChunkMin = 128ull << 10;
// The largest: each upload slot and request in flight holds up to a chunk, so memory per node
// grows with c (56 items at the default tuning); past 64 MiB a 500 GB version still has
// 7,451 chunks, the excess stays near 1%, and the bigger buffers would buy nothing.
inline constexpr uint64_t kAutoChunkMax = 64ull << 20;

// The smallest power of two c in [kAutoChunkMin, kAutoChunkMax] with total_bytes / c at most
// kAutoChunkTarget: between 4,097 and 8,192 chunks unless a bound holds. A pure function of the
// size, so versions of one size get one chunk size (deltas need equal chunk sizes; a channel's
// later versions keep the chunk size of the one before them, PrepareVersion).
uint64_t ChooseChunkSize(uint64_t total_bytes);

struct Manifest;

// The chunk size a version of a channel is cut into (docs/publish.md, "Chunk size"): `requested`
// unless it is kAutoChunkSize; then the chunk size of the channel's current version `current`
// (null: none), so that a delta against it pairs chunks cut alike whatever the new size; else
// ChooseChunkSize(total_bytes). What a publish, `store import` and a memory channel all use.
uint64_t ResolveChunkSize(uint64_t requested, uint64_t total_bytes, const Manifest* current);

// A --chunk-size as the CLI and Python take it: "auto" (kAutoChunkSize), or a size ("256KiB",
// "8MiB", "131072") between kMinChunkSize and kMaxChunkSize; kInvalidArgument naming the text
// otherwise.
Result<uint64_t> ParseChunkSize(std::string_view text);

}  // namespace weightcast
