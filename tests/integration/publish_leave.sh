#!/usr/bin/env bash
# A node that stops on purpose leaves the fleet (coord.proto Leave): a finished
# `publish --dir ... --until complete` and an agent stopped with SIGTERM are listed as left, not
# dead, and `weightcast status` hides them (`--all` shows them); an agent killed with SIGKILL
# still shows as dead.
source "$(dirname "$0")/rollout_lib.bash" "$1"

make_versions 2
start_coordinator --commit-policy all --prepare-deadline 30s
start_agent a1
start_agent a2

for i in 1 2; do
  rc=0
  timeout 60 "$wc" publish --coordinator "$coord" --store "$work/pub" --channel "$channel" \
    --dir "$work/ckpt/$i" --chunk-size 1MiB --until complete --secret-file "$work/secret" \
    >>"$work/pub.out" 2>>"$work/pub.log" || rc=$?
  [[ "$rc" == 0 ]] || fail "publish --until complete of v$i: exit $rc: $(tail -n 3 "$work/pub.log")"
done
all_current 2 a1 a2 || fail "the agents do not have v2"
# Past the heartbeat timeout (1.5 s): a publisher that only disconnected would be dead by now.
sleep 3

view() {
  COLUMNS=120 "$wc" status --coordinator "$coord" --once --secret-file "$work/secret" "$@"
}
out="$(view)"
grep -q 'nodes 2 (2 live, 0 dead), 2 left (--all shows them)' <<<"$out" ||
  fail "status after two finished publishes: $out"
grep -q 'DEAD\|(source)' <<<"$out" && fail "a finished publisher is listed: $out"
out="$(view --all)"
[[ "$(grep -c '(source)' <<<"$out")" == 2 ]] || fail "status --all: $out"
left="$(view --all --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(sum(1 for n in s["nodes"] if n["left"] and n["source"] and not n["alive"]))')"
[[ "$left" == 2 ]] || fail "status --all --json: $left publishers marked left, not 2"
grep -q 'left' "$work/coord.log" || fail "the coordinator did not log the leaves"
echo "ok   finished publishes are left, not dead: $(head -n 1 <<<"$out")"

# An agent stopped normally leaves too; one killed outright is dead.
kill_process a2 TERM
kill_process a1 KILL
sleep 3
out="$(view --all)"
grep -q 'nodes 1 (0 live, 1 dead), 3 left' <<<"$out" || fail "after stopping the agents: $out"
echo "ok   SIGTERM: left, SIGKILL: dead: $(head -n 1 <<<"$out")"
