#!/usr/bin/env bash
# Offline deltas: diff two steps, patch the base back to the new step bit-exactly, refuse a wrong
# base and a corrupted payload without leaving an output directory behind.
set -euo pipefail
wc="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$wc" synth model -o "$work/step-0000" --size 12MiB --seed 5 >/dev/null
"$wc" synth steps --from "$work/step-0000" -o "$work" --steps 2 --seed 5 >/dev/null

out="$("$wc" diff "$work/step-0000" "$work/step-0001" -o "$work/d1")"
echo "$out" | tail -n 3
tail -n 1 <<<"$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["ratio"] > 10, d'

"$wc" patch "$work/step-0000" "$work/d1" -o "$work/rebuilt" | tail -n 1
for f in "$work"/step-0001/*; do cmp "$f" "$work/rebuilt/$(basename "$f")"; done
echo "patched version is byte-identical"

# The delta of step 2 applies only onto step 1.
"$wc" diff "$work/step-0001" "$work/step-0002" -o "$work/d2" >/dev/null
if "$wc" patch "$work/step-0000" "$work/d2" -o "$work/wrong" 2>"$work/err"; then
  echo "FAIL: patch accepted a wrong base"; exit 1
fi
echo "wrong base refused: $(cat "$work/err")"
[ ! -e "$work/wrong" ] || { echo "FAIL: output left behind"; exit 1; }

# A flipped byte in a payload is refused.
payload="$(find "$work/d1" -type f ! -name '*.wcm' ! -name '*.json' -size +1k | head -n 1)"
[ -n "$payload" ] || { echo "FAIL: no payload file found in $(ls "$work/d1")"; exit 1; }
printf '\x5a' | dd of="$payload" bs=1 seek=200 conv=notrunc status=none
if "$wc" patch "$work/step-0000" "$work/d1" -o "$work/bad" 2>"$work/err"; then
  echo "FAIL: patch accepted a corrupted payload"; exit 1
fi
echo "corrupt payload refused: $(cat "$work/err")"
[ ! -e "$work/bad" ] || { echo "FAIL: output left behind"; exit 1; }
