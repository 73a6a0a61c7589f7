#!/usr/bin/env bash
# `weightcast rollback`: the fleet switches back to a kept version without fetching anything,
# runs its engine hooks, and refuses what cannot become current; a later version commits as
# usual; an engine hook that keeps failing under --hook-failure rollback rolls the fleet back.
source "$(dirname "$0")/rollout_lib.bash" "$1"

make_versions 4
start_coordinator --commit-policy all --prepare-deadline 30s
hook='echo "$WEIGHTCAST_VERSION" >>'
for a in a1 a2 a3; do start_agent "$a" --hook-command "$hook $work/$a.hooks #"; done
publish 1
wait_for 40 all_current 1 a1 a2 a3 || fail "v1 was not committed"
publish 2
wait_for 40 all_current 2 a1 a2 a3 || fail "v2 was not committed"

rollback() {
  "$wc" rollback --coordinator "$coord" --secret-file "$work/secret" "$channel" "$@"
}
out="$(rollback --wait --timeout 20s)" || fail "rollback failed: $out"
echo "$out"
grep -q 'the fleet switches to version 1' <<<"$out" || fail "rollback did not choose v1"
grep -q '3 of 3 live agents have version 1 current' <<<"$out" || fail "rollback --wait: $out"
all_current 1 a1 a2 a3 || fail "not every agent switched to v1"
for a in a1 a2 a3; do
  grep -q 'switched current to v1 (kept version, nothing fetched)' "$work/$a.log" ||
    fail "$a did not switch to the kept v1"
  # Fetched once, before the rollback: never again.
  [[ "$(grep -c 'fetching v1$' "$work/$a.log")" == 1 ]] || fail "$a fetched v1 again"
  wait_for 10 test "$(tail -n 1 "$work/$a.hooks")" == 1 || fail "$a's hook did not run for v1"
  same_files 1 "$a" || fail "$a's v1 differs"
done
[[ "$(fleet_current)" == 1 ]] || fail "the coordinator's current version is not 1"
# The rollout of v2 is over: the fleet settled on the version rolled back to.
"$wc" status --coordinator "$coord" --until-complete --timeout 20s --channel "$channel" \
  --secret-file "$work/secret" >"$work/status-after-rollback.out" 2>&1 ||
  fail "status --until-complete after a rollback: $(tail -n 2 "$work/status-after-rollback.out")"

# Refused: a version that is current, above the current one, or unknown. Nothing changes.
if rollback 1 2>"$work/refused.err"; then fail "rollback to the current version accepted"; fi
grep -q 'not below the current' "$work/refused.err" || fail "$(cat "$work/refused.err")"
if rollback 99 2>/dev/null; then fail "rollback to an unknown version accepted"; fi
[[ "$(fleet_current)" == 1 ]] || fail "a refused rollback changed the current version"

# The next version goes through the two phases as usual.
publish 3
wait_for 40 all_current 3 a1 a2 a3 || fail "v3 was not committed after the rollback"

# An engine that refuses v4 on a1: with --hook-failure rollback the fleet goes back to v3.
kill_process a1
start_agent a1 --hook-command "exit 3 #" --hook-retries 1 --hook-failure rollback
publish 4
wait_for 40 grep -q 'asked the coordinator to roll back to v3' "$work/a1.log" ||
  fail "a1 did not ask for a rollback after its hook failed"
wait_for 20 all_current 3 a1 a2 a3 || fail "the fleet did not roll back to v3"
[[ "$(decision_of 4)" == ABORT ]] || fail "v4 is not marked aborted after the rollback"
grep -q 'hook failed after 2 attempts' "$work/a1.log" "$work/coord.log" 2>/dev/null ||
  grep -q 'engine hook for v4 failed' "$work/a1.log" || fail "a1 did not report its hook failure"
echo "PASS rollout_rollback"
