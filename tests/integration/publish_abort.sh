#!/usr/bin/env bash
# One-shot waits end when their version can no longer get there: `publish --until
# complete` and `status --until-complete` exit 1 with the abort reason when the rollout aborts the
# version at its prepare deadline, instead of waiting forever; `publish --until complete` also
# ends when the coordinator goes away for 30 s while it waits.
source "$(dirname "$0")/rollout_lib.bash" "$1"
# The slow agent's download limit also slows its heartbeats: small chunks and a patient
# coordinator keep it alive (a silent agent would be excluded, not waited for).
HEARTBEAT_TIMEOUT=10s
CHUNK_SIZE=256KiB

bounded=()  # run under `timeout`: SIGTERM first, which timeout passes on
trap 'for p in "${bounded[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; cleanup' EXIT

chmod 600 "$work/secret"
make_versions 2
start_coordinator --commit-policy all --prepare-deadline 3s
# 6 MiB at 100 KiB/s: v1 cannot be prepared within 3 s, so `all` aborts it at the deadline.
start_agent slow --download-limit 100KiB
wait_for 20 grep -q 'registered with the coordinator' "$work/slow.log" ||
  fail "the agent did not register"

start=$SECONDS
rc=0
timeout 60 "$wc" publish --coordinator "$coord" --store "$work/pub" --channel "$channel" \
  --dir "$work/ckpt/1" --chunk-size "$CHUNK_SIZE" --until complete \
  --secret-file "$work/secret" >"$work/pub.out" 2>"$work/pub.log" || rc=$?
took=$((SECONDS - start))
[[ "$rc" == 1 ]] || fail "publish --until complete of an aborted version: exit $rc (124: it hung)"
grep -q 'v1 was aborted: prepare deadline passed' "$work/pub.log" ||
  fail "publish did not give the abort reason: $(tail -n 2 "$work/pub.log")"
((took <= 20)) || fail "publish took $took s to notice the abort"
echo "ok   publish --until complete: exit 1 after $took s: $(tail -n 1 "$work/pub.log")"

# status --until-complete (watching, and --once) says the same instead of waiting.
rc=0
out="$(timeout 20 "$wc" status --coordinator "$coord" --channel "$channel" --until-complete \
  --secret-file "$work/secret" 2>&1 >/dev/null)" || rc=$?
[[ "$rc" == 1 ]] || fail "status --until-complete of an aborted version: exit $rc: $out"
grep -q 'v1 was aborted: prepare deadline passed' <<<"$out" || fail "status: $out"
rc=0
out="$(timeout 20 "$wc" status --coordinator "$coord" --channel "$channel" --until-complete \
  --once --secret-file "$work/secret" 2>&1 >/dev/null)" || rc=$?
[[ "$rc" == 1 ]] && grep -q 'v1 was aborted' <<<"$out" || fail "status --once: exit $rc: $out"
echo "ok   status --until-complete: $out"

# A coordinator that dies while `publish --until complete` waits: exit 1 within the 30 s bound.
# Restarted with a long deadline first, so that v2 is still pending when it dies.
kill_process coord
start_coordinator --commit-policy all --prepare-deadline 10m
timeout 90 "$wc" publish --coordinator "$coord" --store "$work/pub" --channel "$channel" \
  --dir "$work/ckpt/2" --chunk-size "$CHUNK_SIZE" --until complete \
  --secret-file "$work/secret" >>"$work/pub.out" 2>"$work/pub2.log" &
pids[pub]=$!
bounded+=($!)
wait_for 30 grep -q 'published' "$work/pub2.log" || fail "v2 was not published"
kill_process coord
start=$SECONDS
rc=0
wait "${pids[pub]}" || rc=$?
unset "pids[pub]"
took=$((SECONDS - start))
[[ "$rc" == 1 ]] || fail "publish with a dead coordinator: exit $rc (124: it hung)"
grep -q 'was unreachable for 30s while waiting for v2' "$work/pub2.log" ||
  fail "publish with a dead coordinator: $(tail -n 2 "$work/pub2.log")"
((took <= 45)) || fail "publish took $took s after the coordinator died"
echo "ok   publish --until complete, dead coordinator: exit 1 after $took s"
echo "PASS publish_abort"
