#!/usr/bin/env bash
# A fetch killed with SIGKILL mid-transfer resumes from the store's chunk record when rerun, and
# the committed version is byte-identical to the trainer's files.
set -euo pipefail
wc="$1"
work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

head -c 48 /dev/urandom | base64 >"$work/secret"
"$wc" synth model -o "$work/step-0000" --size 40MiB --seed 9 >/dev/null
# Small chunks, so that the record (persisted every 64 chunks) holds progress early.
"$wc" store import --root "$work/trainer" --channel policy --chunk-size 64KiB "$work/step-0000" >/dev/null

timeout 120 "$wc" serve --root "$work/trainer" --channel policy --listen 127.0.0.1:0 \
  --secret-file "$work/secret" 2>"$work/serve.log" &
server_pid=$!
for _ in $(seq 100); do
  grep -q ' on 127.0.0.1:' "$work/serve.log" 2>/dev/null && break
  sleep 0.1
done
addr="$(grep -o '127.0.0.1:[0-9]*' "$work/serve.log" | head -n 1)"
[ -n "$addr" ] || { echo "FAIL: server did not start"; cat "$work/serve.log"; exit 1; }

# 40 MiB at 8 MiB/s takes about 5 s; kill it after 2.
# (no `timeout` wrapper: the SIGKILL must reach weightcast itself)
WEIGHTCAST_SECRET="$(cat "$work/secret")" "$wc" fetch --from "$addr" \
  --root "$work/sampler" --channel policy --download-limit 8MiB >"$work/first.out" 2>&1 &
fetch_pid=$!
sleep 2
kill -0 "$fetch_pid" || { echo "FAIL: the fetch ended before it could be killed"; cat "$work/first.out"; exit 1; }
kill -KILL "$fetch_pid"
wait "$fetch_pid" 2>/dev/null || true
[ ! -e "$work/sampler/policy/current" ] || { echo "FAIL: a killed fetch committed"; exit 1; }

out="$(timeout 60 "$wc" fetch --from "$addr" --root "$work/sampler" --channel policy \
  --secret-file "$work/secret" 2>"$work/second.err")" || { cat "$work/second.err"; exit 1; }
echo "$out"
json="$(tail -n 1 <<<"$out")"
resumed="$(grep -o '"chunks_resumed":[0-9]*' <<<"$json" | cut -d: -f2)"
raw="$(grep -o '"chunks_raw":[0-9]*' <<<"$json" | cut -d: -f2)"
chunks="$(grep -o '"chunks":[0-9]*' <<<"$json" | cut -d: -f2)"
[ "$resumed" -gt 0 ] || { echo "FAIL: nothing was resumed"; exit 1; }
[ $((resumed + raw)) -eq "$chunks" ] || { echo "FAIL: resumed $resumed + fetched $raw != $chunks"; exit 1; }
for f in "$work"/step-0000/*; do cmp "$f" "$work/sampler/policy/current/$(basename "$f")"; done
"$wc" store verify --root "$work/sampler" --channel policy
echo "p2p resume: ok ($resumed of $chunks chunks resumed)"
