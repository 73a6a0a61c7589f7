#!/usr/bin/env bash
# The test command of the README: installs what is missing, builds the release preset and runs
# every test (unit, integration; netns tests skip with a message where namespaces are not allowed).
#   scripts/test.sh [ctest args...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/build.sh release
ctest --preset release --output-on-failure -j "$(nproc)" "$@"
