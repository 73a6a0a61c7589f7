#!/usr/bin/env bash
# A commit makes a version durable and current and collects the versions no longer kept (here
# the third version's commit deletes the first: 1.2-1.4 s on the development VM, where page-cache
# pages are dear): longer than a short heartbeat timeout. The agent commits on a thread of its
# own and goes on heartbeating meanwhile (agent/rollout_driver.h), so the coordinator never
# declares a committing agent dead. Before, the loop that heartbeats ran the commit itself: both
# agents here were declared dead during the third commit, and in the local demo every agent was
# "dead" for a second or more after each commit decision from v3 on. Two agents, three 1 GiB
# versions in 8 MiB chunks (a full one, two delta steps), a 1 s heartbeat timeout.
# shellcheck source=tests/integration/swarm_lib.bash
source "$(dirname "$0")/swarm_lib.bash" "$1"

HEARTBEAT_TIMEOUT=1s start_coordinator

agents=(a1 a2)
MODEL_SIZE=1GiB make_versions 3
for a in "${agents[@]}"; do start_agent "$a" --log-format text; done
wait_for 20 all_registered "${agents[@]}" || fail "the agents did not register"
sleep 2  # past the rollout decider's recovery grace (one heartbeat timeout)

for v in 1 2 3; do
  CHUNK_SIZE=8MiB publish "$v" --log-format text
  wait_for 120 all_current "$v" "${agents[@]}" || fail "v$v did not reach every agent"
  same_files "$v" "${agents[@]}"
  grep -q "policy v$v: DECISION_COMMIT" "$work/coord.log" || fail "the coordinator never committed v$v"
  kill_process pub
done

for a in "${agents[@]}"; do
  grep -q "committed v3" "$work/$a.log" || fail "$a did not log its commit of v3"
  if grep -q "node $(node_id_of "$a") .*dead" "$work/coord.log"; then
    grep "dead" "$work/coord.log" >&2
    fail "$a was declared dead (it stopped heartbeating, e.g. while committing)"
  fi
done
echo "PASS: three 1 GiB commits on each agent (the last collects the first), no agent declared dead with a 1 s heartbeat timeout"
