#!/usr/bin/env bash
# The main job of the README: builds weightcast, then runs the local demo (weightcast demo).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/build.sh release
exec ./build/release/src/cli/weightcast demo --work-dir "${WC_DEMO_DIR:-build/demo}" "$@"
