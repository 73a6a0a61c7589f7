// Which tensor bytes differ between two versions, from their manifests alone: what
// Subscriber::Changed reports.
#pragma once

#include <vector>

#include <weightcast/subscriber.h>

#include "manifest/manifest.h"

namespace weightcast::client {

// Tensors of `to` whose bytes may differ from `from`, at chunk granularity: a tensor at the same
// flat offset with the same dtype and shape reports only its bytes inside chunks whose hashes
// (and ranges) differ; a new tensor, or one whose place, dtype or shape changed, reports all its
// bytes. Tensors only in `from` are not reported (there is nothing to update them to). Tensors
// with no changed byte are left out. Pure function.
std::vector<TensorChange> ChangedTensors(const Manifest& from, const Manifest& to);

}  // namespace weightcast::client
