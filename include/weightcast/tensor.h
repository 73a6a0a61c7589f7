// Tensors as the public API passes them: a name, a safetensors dtype, a shape and the bytes,
// borrowed (never owned) from whoever holds them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

namespace weightcast {

// One tensor's bytes, C-contiguous and little-endian. `dtype` is spelled as in safetensors
// ("BF16", "F32", "F8_E4M3", ...). A TensorView owns nothing: `bytes` points into memory of the
// caller (Publisher) or of a ReceivedVersion (Subscriber), and is valid as long as that is.
//
// A sharded publisher (PublisherOptions::world > 1, docs/sharded_publish.md) may give a slice of
// a larger tensor: `slice.extent` set says this view holds indices [slice.start, slice.start +
// shape[slice.dim]) along `slice.dim` of the tensor `name`, which is `slice.extent` long along
// that dimension (the other dimensions as `shape`). The ranks' slices of one name must tile it;
// a Subscriber's version then offers the whole tensor under `name`.
struct TensorSliceOf {
  uint32_t dim = 0;
  uint64_t start = 0;
  uint64_t extent = 0;  // 0: not a slice
};

struct TensorView {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  std::span<const uint8_t> bytes;
  TensorSliceOf slice{};
};

// Bits per element of a safetensors dtype ("BF16" -> 16, "F4" -> 4; BOOL is stored as 8).
// kInvalidArgument for a name safetensors does not have. Pure; thread-safe.
Result<uint32_t> DTypeBitWidth(std::string_view dtype);

// The bytes a tensor of `dtype` and `shape` takes (sub-byte types rounded up to whole bytes).
// kInvalidArgument for an unknown dtype, kOutOfRange on overflow. Pure; thread-safe.
Result<uint64_t> TensorSizeInBytes(std::string_view dtype, std::span<const uint64_t> shape);

}  // namespace weightcast
