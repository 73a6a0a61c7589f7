#!/usr/bin/env bash
# The README's demo at a small size: every committed version must be byte-identical.
set -euo pipefail
wc="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
out="$("$wc" demo --work-dir "$work/demo" --size 24MiB --steps 2)"
echo "$out"
grep -q "every committed version is byte-identical" <<<"$out"
grep -q "rollback: current -> v2" <<<"$out"
grep -q "delta applied onto v2" <<<"$out"
