#!/usr/bin/env bash
# Rollbacks and what agents keep: after a rollback the stores keep the known-good version a
# rollback goes to, not the one rolled back from, so the fleet rolls back again after the next
# commit; a rollback to a version no agent keeps is refused, saying what the agents keep, and
# changes nothing; agents serve the version they switched back to, so a late joiner gets it; a
# version committed once and rolled back past may be returned to, and the agents that no longer
# keep it fetch it from one that does; every later version commits.
source "$(dirname "$0")/rollout_lib.bash" "$1"

make_versions 4
start_coordinator --commit-policy all --prepare-deadline 30s
for a in a1 a2 a3; do start_agent "$a"; done
rollback() {
  "$wc" rollback --coordinator "$coord" --secret-file "$work/secret" "$channel" "$@"
}
kept() {  # kept AGENT: the versions its store holds, sorted
  ls "$work/$1/$channel/versions" 2>/dev/null | sort -n | tr '\n' ' '
}
publish 1
wait_for 40 all_current 1 a1 a2 a3 || fail "v1 was not committed"
publish 2
wait_for 40 all_current 2 a1 a2 a3 || fail "v2 was not committed"
rollback 1 >/dev/null || fail "rollback to v1 refused"
wait_for 20 all_current 1 a1 a2 a3 || fail "the fleet did not switch to v1"
publish 3
wait_for 40 all_current 3 a1 a2 a3 || fail "v3 was not committed after the rollback"
# The stores keep v3 and the known-good v1; v2, rolled back from, is gone everywhere.
for a in a1 a2 a3; do
  [[ "$(kept "$a")" == "1 3 " ]] || fail "$a keeps $(kept "$a"), not v1 and v3"
done

# 1. Refused, with what the agents keep; nothing changes.
wait_for 10 bash -c "! '$wc' rollback --coordinator '$coord' --secret-file '$work/secret' \
  '$channel' 2 2>'$work/refused.err'" || fail "a rollback to v2, which no agent keeps, was accepted"
cat "$work/refused.err"
grep -q 'is kept by none of the 3 live agents' "$work/refused.err" || fail "unclear refusal"
grep -q 'v1 on 3, v3 on 3' "$work/refused.err" || fail "the refusal does not say what is kept"
[[ "$(fleet_current)" == 3 ]] || fail "a refused rollback changed the current version"

# 2. The fleet rolls back a second time, to the version it kept for that; a3 is away meanwhile
# (it keeps v3, which it never rolled back from).
kill_process a3
out="$(rollback)" || fail "the second rollback was refused: $out"
wait_for 20 all_current 1 a1 a2 || fail "the fleet did not roll back to v1 again"

# 3. A node joining after the rollback gets v1 from the agents that switched back to it.
start_agent a4
wait_for 40 all_current 1 a4 || fail "a4, joining after the rollback, did not get v1"
diff -r "$work/a1/$channel/versions/1" "$work/a4/$channel/versions/1" >/dev/null ||
  fail "a4's v1 differs from a1's"

# 4. v3 was committed, then rolled back past. The others commit v4 and drop v3 (rolled back
# from); a3 comes back, takes v4 and still keeps v3.
publish 4
wait_for 60 all_current 4 a1 a2 a4 || fail "v4 was not committed without a3"
start_agent a3
wait_for 60 all_current 4 a3 || fail "a3 did not take v4 when it came back"
for a in a1 a2 a4; do
  [[ ! -d "$work/$a/$channel/versions/3" ]] || fail "$a still keeps v3 (the test needs it gone)"
done
[[ -d "$work/a3/$channel/versions/3" ]] || fail "a3 does not keep v3 ($(kept a3))"
# Only a3 keeps v3: the rollback is accepted, and the others fetch v3 from a3.
out="$(rollback 3)" || fail "rollback to v3, kept by a3, refused: $out"
wait_for 60 all_current 3 a1 a2 a3 a4 || fail "the agents that lacked v3 did not fetch it"
for a in a1 a2 a4; do
  diff -r "$work/a3/$channel/versions/3" "$work/$a/$channel/versions/3" >/dev/null ||
    fail "$a's v3 differs"
done
# Agents restarted with nothing to fetch serve their current version: with the publisher gone
# and every agent restarted, a new node still gets v3.
kill_process pub
for a in a1 a2 a3 a4; do
  kill_process "$a"
  echo "--- restarted" >>"$work/$a.log"
  start_agent "$a"
done
for a in a1 a2 a3 a4; do
  wait_for 20 bash -c "sed -n '/^--- restarted/,\$p' '$work/$a.log' | grep -q 'serving v3 to peers'" ||
    fail "$a, restarted with v3 current, does not serve it"
done
start_agent a5
wait_for 60 all_current 3 a5 || fail "a5 did not get v3 from the restarted agents"
diff -r "$work/a3/$channel/versions/3" "$work/a5/$channel/versions/3" >/dev/null ||
  fail "a5's v3 differs"
echo "PASS rollout_unkept"
