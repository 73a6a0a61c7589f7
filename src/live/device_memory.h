// Live tensors in device memory: the TensorMemory of a LiveSet whose tensors sit where only a
// DeviceMemory reaches them (a GPU), docs/gpu.md.
//
// The host does what needs the codec: it decodes each payload into the changes of its chunk
// (codec::DecodeChanges) and hands the device only gathers, combines and scatters, a piece of the
// chunk at a time. Checks run where the bytes lie: the weighted sums of HashAlgorithm::
// kWeightedSum128 are linear in the bytes, so a chunk's check is the sum of its pieces' (device
// sums for live pieces, host sums for bytes read from the version's files). Any other algorithm
// (a version without device checks, an attestation) reads the live bytes back to hash them.
#pragma once

#include <weightcast/device_memory.h>

#include <memory>

#include "live/live_set.h"

namespace weightcast::live {

std::unique_ptr<TensorMemory> DeviceTensorMemory(std::shared_ptr<DeviceMemory> device);

}  // namespace weightcast::live
