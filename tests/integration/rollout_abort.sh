#!/usr/bin/env bash
# An agent that cannot prepare a version aborts it under policy `all`: the coordinator logs ABORT
# with the failing node's error, every agent drops its staging and keeps the old version current;
# the next version commits once the agent is healthy again.
source "$(dirname "$0")/rollout_lib.bash" "$1"

make_versions 3
start_coordinator --commit-policy all --prepare-deadline 30s
for a in a1 a2 a3; do start_agent "$a"; done
publish 1
wait_for 40 all_current 1 a1 a2 a3 || fail "v1 was not committed on every agent"

# a3's store can no longer stage: its staging directory is replaced by a file.
rm -rf "$work/a3/$channel/staging"
touch "$work/a3/$channel/staging"
publish 2
wait_for 30 decided 2 ABORT || fail "v2 was not aborted"
reason="$(abort_reason_of 2)"
echo "abort reason: $reason"
[[ "$reason" == *"failed"* ]] || fail "the abort reason does not name the failure: $reason"
# Everyone keeps v1; nobody keeps v2's staging.
sleep 1
all_current 1 a1 a2 a3 || fail "an agent left v1 after the abort"
no_staging() { [[ ! -e "$work/$1/$channel/staging/2" ]]; }
for a in a1 a2; do
  wait_for 10 no_staging "$a" || fail "$a kept the staging of the aborted v2"
done
[[ ! -e "$work/a1/$channel/versions/2" ]] || fail "a1 has an aborted version committed"
# (An agent may never have started v2: a3's failure can abort it before their next heartbeat.)

# Healthy again: v3 goes everywhere.
rm -f "$work/a3/$channel/staging"
publish 3
wait_for 40 all_current 3 a1 a2 a3 || fail "v3 was not committed after the repair"
[[ "$(decision_of 3)" == COMMIT ]] || fail "v3 is not COMMIT"
for a in a1 a2 a3; do same_files 3 "$a" || fail "$a's v3 differs from the publisher's"; done
echo "PASS rollout_abort"
