#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for SECONDS (default 20).
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds="${1:-20}"
./scripts/install-deps.sh
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target fuzz_all
shopt -s nullglob
for target in build/fuzz/fuzz/fuzz_*; do
  [ -x "$target" ] || continue
  name="$(basename "$target")"
  corpus="build/fuzz/corpus/$name"
  mkdir -p "$corpus"
  seeds=""
  [ -d "fuzz/seeds/${name#fuzz_}" ] && seeds="fuzz/seeds/${name#fuzz_}"
  echo "fuzz: $name for ${seconds}s"
  log="build/fuzz/$name.log"
  if ! "$target" -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="build/fuzz/$name-" \
      "$corpus" $seeds >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $name FAILED (crash input saved beside the log; full log $log)"
    exit 1
  fi
  grep -E '^stat::(number_of_executed_units|new_units_added)' "$log" || tail -n 2 "$log"
done
