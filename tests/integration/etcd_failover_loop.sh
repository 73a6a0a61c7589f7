#!/usr/bin/env bash
# A 3-member etcd cluster, 2 coordinators on it (one leads, one stands by), a
# publisher and 4 agents that follow the leader (--coordinator A,B). Each iteration publishes the
# next version and kill -9s the leading coordinator at a random point of the rollout, then
# starts it again (as a standby). Every time: exactly one decision per version in the log in
# etcd, and every agent ends with current = the committed version, byte-identical to what was
# published. Bounded: ITERATIONS (default 20) and a wall-clock budget of 400 s.
source "$(dirname "$0")/etcd_lib.bash" "$1"

iterations="${ITERATIONS:-20}"
budget=400
seed="${SEED:-$RANDOM}"
RANDOM=$seed
echo "seed $seed"
agents=(a1 a2 a3 a4)

make_versions $((iterations + 1))
start_etcd_cluster
start_leader_and_standby
for a in "${agents[@]}"; do start_agent "$a"; done
publish 1
wait_for 60 all_current 1 "${agents[@]}" || fail "v1 was not committed"

# The rollout of v settled: v is decided, every agent has the fleet's current version, and that
# version is byte-identical on every agent.
settled() {
  local v="$1" d cur a
  d="$(decision_of "$v")"
  [[ "$d" == COMMIT || "$d" == ABORT ]] || return 1
  cur="$(fleet_current)"
  all_current "$cur" "${agents[@]}" || return 1
  for a in "${agents[@]}"; do same_files "$cur" "$a" || return 1; done
}

start=$SECONDS
done_iterations=0
for ((i = 2; i <= iterations + 1; i++)); do
  ((SECONDS - start < budget)) || { echo "budget spent after $done_iterations iterations"; break; }
  publish "$i"
  sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
  victim="$(leader_name)" || fail "iteration $i: no leader"
  echo "iteration $i: kill -9 the leader $victim"
  kill_process "$victim"
  start_coordinator "$victim"
  wait_for 40 settled "$i" || fail "iteration $i did not settle (leader now $(leader_name || echo none))"
  twice="$(versions_not_decided_once)"
  [[ -z "$twice" ]] || fail "iteration $i: versions not decided exactly once: $twice"
  echo "iteration $i: v$i $(decision_of "$i"), fleet on v$(fleet_current), leader $(leader_name)"
  done_iterations=$((done_iterations + 1))
done
((done_iterations >= iterations || done_iterations >= 5)) || fail "only $done_iterations iterations"
# With "all", a kill may cost a version its commit (the prepare deadline), never its uniqueness.
etcd_log | awk '$2 == "decision"' | sort -k3n | tail -n 3
echo "PASS etcd_failover_loop ($done_iterations iterations, $((SECONDS - start)) s)"
