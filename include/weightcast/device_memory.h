// Device memory behind the live tensors (docs/gpu.md): the calls an apply makes to tensors that
// sit in a GPU's memory. LiveTensors::Register (live.h) takes one.
#pragma once

#include <cstdint>
#include <span>

#include <weightcast/status.h>

namespace weightcast {

// Memory the live tensors sit in when it is not this process's host memory (a GPU's), reached
// only through these calls (docs/gpu.md). Addresses are the device's own (a tensor's data
// pointer plus an offset, as given in LiveTensorView::data) and are never dereferenced on the
// host. An apply decodes every payload on the host into the changes below, so the device only
// gathers, combines and scatters; each chunk written is then checked where it lies with
// WeightedSums against the version's device checks (PublisherOptions::device_checks), or, for a
// version without them, read back and hashed on the host. A call may be made from any thread, one
// at a time per LiveTensors; an error fails the apply (the tensors then hold no known version).
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Host bytes into device memory at `address`.
  virtual Status Write(uint64_t address, std::span<const uint8_t> from) = 0;
  // Device memory at `address` into host bytes.
  virtual Status Read(uint64_t address, std::span<uint8_t> to) = 0;
  // `size` bytes from `from` to `to`, both device addresses of ranges that do not overlap.
  virtual Status Copy(uint64_t to, uint64_t from, uint64_t size) = 0;
  // For each i, the `width`-byte element at address + offsets[i] becomes itself XOR the
  // `width` bytes values[i * width ...], or with `add` itself plus them, as little-endian
  // integers mod 2^(8 width). Offsets are distinct; width is 1, 2, 4 or 8.
  virtual Status Change(uint64_t address, uint8_t width, bool add,
                        std::span<const uint64_t> offsets, std::span<const uint8_t> values) = 0;
  // XORs `bytes` into device memory at `address`.
  virtual Status XorBytes(uint64_t address, std::span<const uint8_t> bytes) = 0;
  // The weighted sums of the `size` bytes b_j at `address`: A = sum of b_j and B = sum of
  // (j + 1) * b_j, both mod 2^64.
  struct Sums {
    uint64_t a = 0;
    uint64_t b = 0;
  };
  virtual Result<Sums> WeightedSums(uint64_t address, uint64_t size) = 0;
};

}  // namespace weightcast
