#!/usr/bin/env bash
# Runs the curated clang-tidy checks (.clang-tidy) over FILES (default: every src/ .cc file),
# using the compile database of the asan preset (configured here if missing). Exits non-zero on
# any finding. clang-tidy costs ~10-70 s a file on 2 cores (asio-heavy files the most); files run
# in parallel, one per core. CI runs it on a fixed subset of layers.
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
# One clang-tidy per file, as many at once as there are cores (a file takes 10-70 s here).
start=$(date +%s)
printf '%s\0' "${files[@]}" |
  xargs -0 -n 1 -P "$(nproc)" clang-tidy -p build/asan --quiet --warnings-as-errors='*' \
    --extra-arg=-Wno-unknown-warning-option >build/tidy.log 2>&1 || rc=$?
grep -v -E "warnings? (and [0-9]+ errors? )?generated|^Suppressed|^Use -header-filter" build/tidy.log || true
[ $rc -eq 0 ] && echo "tidy: ${#files[@]} files clean in $(( $(date +%s) - start )) s"
exit $rc
