// The coordinator's Prometheus metrics (docs/coordinator.md, "Metrics"), read from its counters
// when the page is rendered.
#pragma once

#include "coord/coordinator.h"
#include "metrics/registry.h"

namespace weightcast::coord {

// Registers callback metrics on `registry` that read `coordinator`'s counters. The coordinator
// must outlive the registry's use of them: call RemoveCoordinatorMetrics before it goes away if
// the registry lives longer.
void ExportCoordinatorMetrics(const Coordinator& coordinator, metrics::Registry& registry);
void RemoveCoordinatorMetrics(metrics::Registry& registry);

}  // namespace weightcast::coord
