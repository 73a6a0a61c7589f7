// Concatenating a sharded publish's slices of one tensor into the whole (docs/sharded_publish.md,
// "Slices of a tensor"): what ReceivedVersion::whole_tensor and Python's v[name] offer. Pure.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/tensor.h>

namespace weightcast::client {

// The C-contiguous tensor made of `slices` (ordered by start) laid side by side along `dim`:
// every slice has the same dtype, rank and extents except along `dim`. kInvalidArgument when
// they do not fit (or a sub-byte dtype's rows do not end on a byte).
Result<std::vector<uint8_t>> ConcatAlong(uint32_t dim, std::span<const TensorView> slices);

}  // namespace weightcast::client
