#!/usr/bin/env bash
# Issue 21 (1, 2): a rollback to a version no agent keeps any more is refused, saying what the
# agents keep, and changes nothing; a version committed once and rolled back past may be returned
# to; agents serve the version they switched back to, so a late joiner gets it; a rollback that
# only some agents can switch to is fetched by the others from them; every later version
# commits.
source "$(dirname "$0")/rollout_lib.bash" "$1"

make_versions 4
start_coordinator --commit-policy all --prepare-deadline 30s
for a in a1 a2 a3; do start_agent "$a"; done
rollback() {
  "$wc" rollback --coordinator "$coord" --secret-file "$work/secret" "$channel" "$@"
}
publish 1
wait_for 40 all_current 1 a1 a2 a3 || fail "v1 was not committed"
publish 2
wait_for 40 all_current 2 a1 a2 a3 || fail "v2 was not committed"
rollback 1 >/dev/null || fail "rollback to v1 refused"
wait_for 20 all_current 1 a1 a2 a3 || fail "the fleet did not switch to v1"
publish 3
wait_for 40 all_current 3 a1 a2 a3 || fail "v3 was not committed after the rollback"
# The stores keep v2 and v3 now (two newest committed): v1 is gone everywhere.
for a in a1 a2 a3; do
  [[ ! -d "$work/$a/$channel/versions/1" ]] || fail "$a still keeps v1 (the test needs it gone)"
done

# 1. Refused, with what the agents keep; nothing changes.
wait_for 10 bash -c "! '$wc' rollback --coordinator '$coord' --secret-file '$work/secret' \
  '$channel' 1 2>'$work/refused.err'" || fail "a rollback to v1, which no agent keeps, was accepted"
cat "$work/refused.err"
grep -q 'is kept by none of the 3 live agents' "$work/refused.err" || fail "unclear refusal"
grep -q 'v2 on 3, v3 on 3' "$work/refused.err" || fail "the refusal does not say what is kept"
[[ "$(fleet_current)" == 3 ]] || fail "a refused rollback changed the current version"

# v2 was committed, then rolled back past: it may be returned to (it said "never committed").
out="$(rollback 2)" || fail "rollback to v2 refused: $out"
wait_for 20 all_current 2 a1 a2 a3 || fail "the fleet did not switch to the kept v2"

# 2. A node joining after the rollback gets v2 from the agents that switched back to it.
start_agent a4
wait_for 40 all_current 2 a4 || fail "a4, joining after the rollback, did not get v2"
same_files 2 a4 || fail "a4's v2 differs"

# The next version commits under `all` with the late joiner.
publish 4
wait_for 60 all_current 4 a1 a2 a3 a4 || fail "v4 was not committed after the rollback"

# Now only a4 keeps v2 (the others keep v3 and v4): the rollback is accepted, and the others
# fetch v2 from a4.
for a in a1 a2 a3; do
  [[ ! -d "$work/$a/$channel/versions/2" ]] || fail "$a still keeps v2 (the test needs it gone)"
done
[[ -d "$work/a4/$channel/versions/2" ]] || fail "a4 does not keep v2"
out="$(rollback 2)" || fail "rollback to v2, kept by a4, refused: $out"
wait_for 60 all_current 2 a1 a2 a3 a4 || fail "the agents that lacked v2 did not fetch it"
# a4's v2 was compared with the publisher's above (which no longer keeps it).
for a in a1 a2 a3; do
  diff -r "$work/a4/$channel/versions/2" "$work/$a/$channel/versions/2" >/dev/null ||
    fail "$a's v2 differs"
done
# Agents restarted with nothing to fetch serve their current version: with the publisher gone
# and every agent restarted, a new node still gets v2.
kill_process pub
for a in a1 a2 a3 a4; do
  kill_process "$a"
  echo "--- restarted" >>"$work/$a.log"
  start_agent "$a"
done
for a in a1 a2 a3 a4; do
  wait_for 20 bash -c "sed -n '/^--- restarted/,\$p' '$work/$a.log' | grep -q 'serving v2 to peers'" ||
    fail "$a, restarted with v2 current, does not serve it"
done
start_agent a5
wait_for 60 all_current 2 a5 || fail "a5 did not get v2 from the restarted agents"
diff -r "$work/a4/$channel/versions/2" "$work/a5/$channel/versions/2" >/dev/null ||
  fail "a5's v2 differs"
echo "PASS rollout_unkept"
