#!/usr/bin/env bash
# weightcast serve / fetch over loopback: v1 whole into an empty sampler store, then v3 as a delta
# onto v1, each compared byte for byte with the trainer's files; a wrong secret is refused.
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
"$wc" synth model -o "$work/step-0000" --size 24MiB --seed 5 >/dev/null
"$wc" synth steps --from "$work/step-0000" -o "$work" --steps 2 --seed 5 >/dev/null
# The trainer's store keeps two versions: v1 (step 0) and v3 (step 2), so v3 travels as a delta
# onto v1, two steps apart.
"$wc" store import --root "$work/trainer" --channel policy --chunk-size 1MiB --version 1 \
  "$work/step-0000" >/dev/null
"$wc" store import --root "$work/trainer" --channel policy --chunk-size 1MiB --version 3 \
  "$work/step-0002" >/dev/null

# A channel the store does not have is refused at once (exit 2), naming the ones it has.
rc=0
"$wc" serve --root "$work/trainer" --channel nope --listen 127.0.0.1:0 \
  --secret-file "$work/secret" 2>"$work/nope.log" || rc=$?
[ "$rc" = 2 ] && grep -q "has no channel nope (it has: policy)" "$work/nope.log" ||
  { echo "FAIL: serve --channel nope: exit $rc: $(cat "$work/nope.log")"; exit 1; }

# Listen on a free port; the server names it on stderr.
timeout 120 "$wc" serve --root "$work/trainer" --channel policy --listen 127.0.0.1:0 \
  --secret-file "$work/secret" 2>"$work/serve.log" &
server_pid=$!
for _ in $(seq 100); do
  grep -q ' on 127.0.0.1:' "$work/serve.log" 2>/dev/null && break
  sleep 0.1
done
addr="$(grep -o '127.0.0.1:[0-9]*' "$work/serve.log" | head -n 1)"
[ -n "$addr" ] || { echo "FAIL: server did not start"; cat "$work/serve.log"; exit 1; }

fetch() { timeout 60 "$wc" fetch --from "$addr" --root "$work/sampler" --channel policy --secret-file "$work/secret" "$@"; }

# v1 whole.
out1="$(fetch --version 1)"
echo "$out1"
tail -n 1 <<<"$out1" | grep -q '"chunks_raw":[1-9]'
for f in "$work"/step-0000/*; do cmp "$f" "$work/sampler/policy/versions/1/$(basename "$f")"; done

# v3 (the current one) as a delta onto v1.
out3="$(fetch)"
echo "$out3"
json="$(tail -n 1 <<<"$out3")"
grep -q '"version":3' <<<"$json"
grep -q '"base":1' <<<"$json"
grep -q '"chunks_delta":[1-9]' <<<"$json"
grep -q '"chunks_raw":0' <<<"$json"
for f in "$work"/step-0002/*; do cmp "$f" "$work/sampler/policy/current/$(basename "$f")"; done
"$wc" store verify --root "$work/sampler" --channel policy 3

# Fetching again says it is held.
fetch | grep -q 'already held'

# A wrong secret is refused and stages nothing.
head -c 48 /dev/urandom | base64 >"$work/wrong"
if timeout 60 "$wc" fetch --from "$addr" --root "$work/other" --channel policy \
    --secret-file "$work/wrong" --timeout 5 2>"$work/wrong.log"; then
  echo "FAIL: fetch with a wrong secret succeeded"; exit 1
fi
cat "$work/wrong.log"
echo "p2p fetch: ok"
