#!/usr/bin/env bash
# Faults on loopback: an agent that uploads corrupted chunks (a hidden test-only flag) is caught
# by the hash check and dropped by its peers (which report the ban to the coordinator), and they
# still commit byte-identical files; then the coordinator is restarted in the middle of a
# rollout, and agents and publisher re-register and
# finish it, and the next version goes through the restarted coordinator.
# shellcheck source=tests/integration/swarm_lib.bash
source "$(dirname "$0")/swarm_lib.bash" "$1"

start_coordinator
make_versions 3

# The bad agent gets v1 first (the publisher keeps seeding), then two good agents join: both the
# publisher and the bad agent hold every chunk, so the good agents ask the bad one too.
start_agent bad --corrupt-uploads-for-testing
publish 1 --until never
wait_for 30 all_current 1 bad || fail "the bad agent did not get v1"
start_agent g1
start_agent g2
wait_for 40 all_current 1 g1 g2 || fail "v1 did not reach the good agents"
same_files 1 g1 g2
bad_id="$(node_id_of bad)"
grep -q "bad data from peer $bad_id" "$work/g1.log" "$work/g2.log" ||
  fail "no good agent caught the corrupted uploads"
grep -q "dropping peer $bad_id: bad_chunk" "$work/g1.log" "$work/g2.log" ||
  fail "the bad agent was not dropped"
# The good agents' heartbeats tell the coordinator, which keeps them apart from the bad one.
wait_for 10 grep -q "bans node $bad_id (it sent bad data)" "$work/coord.log" ||
  fail "the coordinator did not hear of the ban"
kill_process bad

# Coordinator restart mid-rollout: v2 is published, the coordinator dies at once and comes back
# on the same address a second later (its state dir keeps the version log).
publish 2 --until never
wait_for 20 grep -q "fetching v2" "$work/g1.log" || fail "g1 never started v2"
kill_process coord KILL
sleep 1
start_coordinator
wait_for 40 all_current 2 g1 g2 || fail "v2 did not complete after the coordinator restart"
same_files 2 g1 g2
grep -q "lost the coordinator" "$work/g1.log" || fail "g1 did not notice the restart"
# Registered again: v3 goes through the new coordinator process.
publish 3
wait_for 40 all_current 3 g1 g2 || fail "v3 did not go through the restarted coordinator"
same_files 3 g1 g2
echo "PASS: corrupt uploader dropped, coordinator restart mid-rollout"
