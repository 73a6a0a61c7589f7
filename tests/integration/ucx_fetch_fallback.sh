#!/usr/bin/env bash
# `weightcast fetch` over UCX whose connection dies mid-transfer (the server's fault switch,
# WEIGHTCAST_UCX_FAIL_AFTER_BYTES) goes on over TCP from the chunks already verified, and the
# committed version is byte-identical to the trainer's files (docs/transport_ucx.md). Skipped
# (77) when the binary was built without UCX.
set -euo pipefail
wc="$1"
work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
if "$wc" net recv --listen 127.0.0.1:0 --transport ucx --timeout 0.2 2>&1 | grep -q "without UCX"; then
  echo "SKIP: built without UCX"
  exit 77
fi
export UCX_TLS=sm,tcp UCX_NET_DEVICES=lo

head -c 48 /dev/urandom | base64 >"$work/secret"
"$wc" synth model -o "$work/step-0000" --size 24MiB --seed 9 >/dev/null
# Small chunks: the record (persisted every 64 chunks) holds progress early.
"$wc" store import --root "$work/trainer" --channel policy --chunk-size 64KiB "$work/step-0000" >/dev/null

WEIGHTCAST_UCX_FAIL_AFTER_BYTES=$((10 << 20)) timeout 120 "$wc" serve --root "$work/trainer" \
  --channel policy --listen 127.0.0.1:0 --transport auto --secret-file "$work/secret" 2>"$work/serve.log" &
server_pid=$!
for _ in $(seq 100); do
  grep -q ' on 127.0.0.1:' "$work/serve.log" 2>/dev/null && break
  sleep 0.1
done
addr="$(grep -o '127.0.0.1:[0-9]*,ucx=[0-9]*' "$work/serve.log" | head -n 1)"
[ -n "$addr" ] || { echo "FAIL: the server offers no UCX"; cat "$work/serve.log"; exit 1; }

out="$(timeout 60 "$wc" fetch --from "$addr" --root "$work/sampler" --channel policy \
  --transport auto --secret-file "$work/secret" 2>"$work/fetch.err")" || {
  echo "FAIL: fetch failed"; cat "$work/fetch.err" "$work/serve.log"; exit 1; }
grep -q "resuming over TCP" "$work/fetch.err" || {
  echo "FAIL: the fetch never fell back to TCP"; cat "$work/fetch.err" "$work/serve.log"; exit 1; }
resumed="$(tail -n 1 <<<"$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["chunks_resumed"])')"
[ "$resumed" -gt 0 ] || { echo "FAIL: nothing resumed after the fallback: $out"; exit 1; }
for f in "$work/step-0000"/*; do
  cmp -s "$f" "$work/sampler/policy/versions/1/$(basename "$f")" || { echo "FAIL: $(basename "$f") differs"; exit 1; }
done
echo "ucx fetch fallback: ok ($resumed chunks resumed over TCP)"
