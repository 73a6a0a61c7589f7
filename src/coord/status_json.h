// FleetStatus as JSON: one rendering shared by `weightcast status --json` and the coordinator's
// fleet page (/api/status), so the two always agree. Field names are the proto's
// (snake_case); every field is printed, defaults included; 64-bit integers are strings (the
// protobuf JSON mapping).
#pragma once

#include <string>

#include <weightcast/status.h>

#include "coord/coord.pb.h"

namespace weightcast::coord {

Result<std::string> FleetStatusJson(const wire::FleetStatus& status);

}  // namespace weightcast::coord
