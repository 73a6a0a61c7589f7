#!/usr/bin/env bash
# A rollout that cannot prepare by its deadline aborts with the counts in the reason; the old
# version keeps serving on every agent, the fast one included.
source "$(dirname "$0")/rollout_lib.bash" "$1"
# The slow agent's download limit also slows its heartbeats: small chunks and a patient
# coordinator keep it alive (a silent agent would be excluded, not waited for).
HEARTBEAT_TIMEOUT=10s
CHUNK_SIZE=256KiB

make_versions 1
# v2 is another model altogether: nothing of v1 helps, every chunk crosses the wire.
"$wc" synth model -o "$work/ckpt/2" --size 6MiB --seed 99 >/dev/null
start_coordinator --commit-policy all --prepare-deadline 8s
start_agent fast
start_agent slow
publish 1
wait_for 40 all_current 1 fast slow || fail "v1 was not committed on both agents"

# The slow agent now receives 200 KiB/s: v2 (6 MiB) cannot be prepared in 8 s.
kill_process slow
start_agent slow --download-limit 200KiB
publish 2
wait_for 30 decided 2 ABORT || fail "v2 was not aborted at its deadline"
reason="$(abort_reason_of 2)"
echo "abort reason: $reason"
[[ "$reason" == *"prepare deadline passed: 1 of 2 live followers prepared, 2 needed"* ]] ||
  fail "unexpected abort reason: $reason"
sleep 1
all_current 1 fast slow || fail "an agent left v1 although v2 was aborted"
grep -q 'prepared v2' "$work/fast.log" || fail "the fast agent never prepared v2"
[[ ! -e "$work/fast/$channel/versions/2" ]] || fail "the fast agent committed the aborted v2"
echo "PASS rollout_deadline"
