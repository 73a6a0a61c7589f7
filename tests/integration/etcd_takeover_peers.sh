#!/usr/bin/env bash
# A coordinator that takes over keeps the fleet's peer graph. Eight agents and a publisher at
# --degree 2 (lists far from a complete graph), two coordinators on a 3-member etcd; the leader
# is killed with SIGKILL twice. The agents and the publisher register with the new leader naming
# the peers they held, it waits until they are back and draws the graph they held: no node drops
# a connection ("no longer listed"), and a version published after the takeovers still reaches
# every agent. Bounded: about a minute.
source "$(dirname "$0")/etcd_lib.bash" "$1"

coordinator_flags+=(--degree 2)
agents=(a1 a2 a3 a4 a5 a6 a7 a8)
make_versions 2
start_etcd_cluster
start_leader_and_standby
for a in "${agents[@]}"; do start_agent "$a"; done
publish 1
wait_for 60 all_current 1 "${agents[@]}" || fail "v1 was not committed"
sleep 2  # a few heartbeats: every list is drawn and dialled

dropped() {
  local name n=0
  for name in "${agents[@]}" pub; do
    n=$((n + $(grep -c "no longer listed" "$work/$name.log" || true)))
  done
  echo "$n"
}
# At least N graphs drawn by a leader that waited for the fleet to register again.
redrawn() { (($(cat "$work"/c1.log "$work"/c2.log | grep -c "the fleet registered again") >= $1)); }
before=$(dropped)
for round in 1 2; do
  victim="$(leader_name)" || fail "round $round: no leader"
  echo "round $round: kill -9 the leader $victim"
  kill_process "$victim"
  start_coordinator "$victim"
  wait_for 30 redrawn "$round" || fail "round $round: the new leader drew no graph"
  echo "round $round: leader $(leader_name), graph drawn again"
done
sleep 2  # what the nodes were told travels with their next heartbeat
drops=$(($(dropped) - before))
((drops == 0)) || fail "$drops connections dropped as \"no longer listed\" across the takeovers"
publish 2
wait_for 60 all_current 2 "${agents[@]}" || fail "v2 was not committed after the takeovers"
echo "PASS etcd_takeover_peers"
