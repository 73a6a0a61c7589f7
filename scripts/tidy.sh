#!/usr/bin/env bash
# Runs the curated clang-tidy checks (.clang-tidy) over FILES (default: every src/ .cc file),
# using the compile database of the asan preset (configured here if missing). Exits non-zero on
# any finding. clang-tidy costs ~5-10 s a file on 2 cores; CI runs it on a fixed subset.
#   scripts/tidy.sh [FILES...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -f build/asan/compile_commands.json ] || cmake --preset asan >/dev/null
# Generated protobuf headers must exist for files that include them.
cmake --build build/asan --target wc_manifest wc_net >/dev/null
if [ $# -eq 0 ]; then
  mapfile -t files < <(git ls-files 'src/*.cc')
else
  files=("$@")
fi
rc=0
clang-tidy -p build/asan --quiet --warnings-as-errors='*' \
  --extra-arg=-Wno-unknown-warning-option "${files[@]}" >build/tidy.log 2>&1 || rc=$?
grep -v -E "warnings? (and [0-9]+ errors? )?generated|^Suppressed|^Use -header-filter" build/tidy.log || true
[ $rc -eq 0 ] && echo "tidy: ${#files[@]} files clean"
exit $rc
