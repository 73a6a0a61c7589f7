#!/usr/bin/env bash
# Installs missing Debian packages, then configures and builds one CMake preset (default release).
#   scripts/build.sh [PRESET]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
preset="${1:-release}"
./scripts/install-deps.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
