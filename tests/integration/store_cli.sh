#!/usr/bin/env bash
# weightcast store from the command line: import two versions, list, verify, roll back, and see
# verify catch a flipped byte in a committed file.
set -euo pipefail
wc="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$wc" synth model -o "$work/step-0000" --size 6MiB --seed 3 >/dev/null
"$wc" synth steps --from "$work/step-0000" -o "$work" --steps 1 --seed 3 >/dev/null
"$wc" store import --root "$work/store" --channel policy "$work/step-0000"
"$wc" store import --root "$work/store" --channel policy "$work/step-0001"

list="$("$wc" store list --root "$work/store" --channel policy)"
echo "$list"
grep -Eq '^ *\* 2 ' <<<"$list"
"$wc" store verify --root "$work/store" --channel policy 2

"$wc" store rollback --root "$work/store" --channel policy
[ "$(readlink "$work/store/policy/current")" != "" ]
"$wc" store list --root "$work/store" --channel policy | grep -Eq '^ *\* 1 '
# The current directory is a plain checkpoint any engine can load: the files are all there.
cmp "$work/store/policy/current/config.json" "$work/step-0000/config.json"

# Flip one byte of a committed file: verify must fail and name the file.
victim="$(ls "$work"/store/policy/versions/2/*.safetensors | head -n 1)"
printf '\x55' | dd of="$victim" bs=1 seek=4096 conv=notrunc status=none
if err="$("$wc" store verify --root "$work/store" --channel policy 2 2>&1)"; then
  echo "FAIL: verify passed over a flipped byte"; exit 1
fi
echo "verify caught it: $err"
grep -q "$(basename "$victim")" <<<"$err"
