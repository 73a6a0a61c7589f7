#!/usr/bin/env bash
# `weightcast publish --watch`: a trainer saves checkpoints under a directory; each complete one is
# published once, in natural order, as a delta against the one before; 2 agents commit them
# byte-identical; a broken save is reported once; a restarted publisher publishes nothing twice.
set -euo pipefail
wc="$1"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "publish_watch: $*"; for f in "$work"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/secret"
export WEIGHTCAST_SECRET="$(cat "$work/secret")"

"$wc" synth model --out "$work/base" --size 6MiB --threads 2 >/dev/null
"$wc" synth steps --from "$work/base" --out "$work/steps" --steps 2 --threads 2 >/dev/null

"$wc" coordinator --listen 127.0.0.1:0 --state-dir "$work/coord" --address-file "$work/coord.addr" \
  --heartbeat-timeout 3s 2>"$work/coordinator.log" &
pids+=($!)
for _ in $(seq 1 100); do [[ -s "$work/coord.addr" ]] && break; sleep 0.1; done
coord="$(cat "$work/coord.addr")"
for i in 1 2; do
  "$wc" agent --coordinator "$coord" --store "$work/agent-$i" --channel policy \
    2>"$work/agent-$i.log" &
  pids+=($!)
done

start_publisher() {
  "$wc" publish --coordinator "$coord" --store "$work/publisher" --channel policy \
    --watch "$work/ckpt" --settle 300ms --chunk-size 256KiB --node-id 77 2>>"$work/publish.log" &
  publisher=$!
  pids+=($publisher)
}

# Published versions in the coordinator's log, as "version base" lines.
logged() {
  "$wc" status --coordinator "$coord" --channel policy --once --json |
    python3 -c 'import json,sys; d=json.load(sys.stdin)
for c in d.get("channels", []):
  for v in c.get("versions", []): print(v.get("version"), v.get("base_version", 0))'
}
wait_versions() {  # wait_versions N: until the log holds N versions
  for _ in $(seq 1 200); do
    [[ "$(logged | wc -l)" -ge "$1" ]] && return 0
    sleep 0.1
  done
  fail "the coordinator logged $(logged | wc -l) versions, not $1"
}
wait_committed() {  # wait_committed V: every agent has version V current
  for _ in $(seq 1 300); do
    local done=0
    for i in 1 2; do
      [[ "$(readlink "$work/agent-$i/policy/current" 2>/dev/null)" == *"/$1" ]] && done=$((done + 1))
    done
    [[ $done -eq 2 ]] && return 0
    sleep 0.1
  done
  fail "not every agent committed v$1"
}

mkdir -p "$work/ckpt"
start_publisher
# step_10 and step_9 appear together: step_9 must go first. A crashed save (empty) is reported.
cp -r "$work/base" "$work/ckpt/.tmp-step_9"
cp -r "$work/steps/step-0001" "$work/ckpt/step_10"
mv "$work/ckpt/.tmp-step_9" "$work/ckpt/step_9"
mkdir "$work/ckpt/step_11"
wait_versions 2
wait_committed 2
# The trainer saves one more; the empty one stays broken.
cp -r "$work/steps/step-0002" "$work/ckpt/step_12"
wait_versions 3
wait_committed 3

[[ "$(logged)" == "$(printf '1 0\n2 1\n3 2')" ]] || fail "unexpected log: $(logged)"
grep -q "dir=$work/ckpt/step_9 " "$work/publish.log" || fail "step_9 not published"
[[ "$(grep -c 'version=1 dir=' "$work/publish.log")" -eq 1 ]] || fail "v1 published more than once"
[[ "$(grep -c "not a complete checkpoint.*step_11" "$work/publish.log")" -eq 1 ]] ||
  fail "the broken step_11 was not reported exactly once"
for i in 1 2; do
  diff -rq "$work/agent-$i/policy/versions/3" "$work/steps/step-0002" >/dev/null ||
    fail "agent-$i's v3 differs from step_12"
done

# A restart publishes nothing again.
kill -TERM "$publisher"
wait "$publisher" || fail "the publisher did not stop cleanly on SIGTERM"
start_publisher
sleep 2
[[ "$(logged | wc -l)" -eq 3 ]] || fail "a restarted publisher published again: $(logged)"
grep -q "seeding the version logged before the restart" "$work/publish.log" ||
  fail "the restarted publisher does not seed v3"
echo "publish_watch: ok"
