#!/usr/bin/env bash
# A one-shot publish says what it waits for and does not pretend to succeed: with no agent
# following the channel it logs that nothing fetches the version, and Ctrl-C (SIGINT) before its
# --until holds exits non-zero saying what the fleet is left with; an agent that joins once no
# live node holds the version says so.
source "$(dirname "$0")/rollout_lib.bash" "$1"

make_versions 1
start_coordinator
"$wc" publish --coordinator "$coord" --store "$work/pub" --channel "$channel" \
  --dir "$work/ckpt/1" --secret-file "$work/secret" >"$work/pub.out" 2>"$work/pub.log" &
pub=$!
wait_for 30 grep -q "0 agents follow channel $channel: nothing fetches v1" "$work/pub.log" ||
  fail "the publisher did not say that no agent follows the channel: $(cat "$work/pub.log")"
kill -INT "$pub"
rc=0
wait "$pub" || rc=$?
[[ $rc != 0 ]] || fail "an interrupted publish exited 0"
grep -q "interrupted by Interrupt before v1 was replicated" "$work/pub.log" ||
  fail "the interrupted publish did not say why: $(tail -n 3 "$work/pub.log")"
[[ "$(cat "$work/pub.out")" == 1 ]] || fail "the version number is not on stdout"
fleet_status() {
  COLUMNS=200 "$wc" status --coordinator "$coord" --secret-file "$work/secret" \
    --channel "$channel" --once >"$work/status.txt" 2>&1 || true
}
fleet_status
grep -q "waiting: 0 agents follow channel $channel" "$work/status.txt" ||
  fail "status did not say that no agent follows the channel: $(cat "$work/status.txt")"
# The only holder of v1 is gone: an agent that joins now says so instead of waiting silently, in
# its log and in `weightcast status`.
start_agent late
wait_for 30 grep -q "no live node holds v1: no peer is connected" "$work/late.log" ||
  fail "the late agent did not say that no live node holds v1: $(tail -n 5 "$work/late.log")"
wait_for 15 bash -c "$(declare -f fleet_status); wc='$wc' coord='$coord' work='$work' \
  channel='$channel' fleet_status; grep -q 'waiting: node .* no live node holds v1' \
  '$work/status.txt'" ||
  fail "status did not say what the late agent waits for: $(cat "$work/status.txt")"
echo "PASS publish_interrupt (exit $rc)"
