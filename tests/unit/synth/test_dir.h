// Synth tests use the shared temporary directory of tests/testing.
#pragma once

#include "testing/temp_dir.h"

namespace weightcast::synth {

using TempDir = ::weightcast::testing::TempDir;

}  // namespace weightcast::synth
