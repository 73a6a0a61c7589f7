#!/usr/bin/env bash
# A fleet on loopback: 1 coordinator, 1 publisher, 8 agents. A full version, then 3 deltas; each
# version must reach every agent byte-identical to the publisher's files. The publisher stops once
# every chunk is replicated, and agents finish from each other. One agent is SIGKILLed in the
# middle of a transfer and restarted (it resumes); one joins late, after the last version, and
# exits by itself with --exit-after.
# shellcheck source=tests/integration/swarm_lib.bash
source "$(dirname "$0")/swarm_lib.bash" "$1"

agents=(a1 a2 a3 a4 a5 a6 a7)
start_coordinator
make_versions 4
for a in "${agents[@]}"; do
  # a3 receives slowly (2 MiB/s), so that it is surely in the middle of v1 when it is killed.
  if [[ "$a" == a3 ]]; then start_agent a3 --download-limit 2MiB; else start_agent "$a"; fi
done

# v1 is seeded until complete: with the default (until replicated) the publisher may leave while
# a3, about to be killed, is the only holder of a chunk it verified but had not yet recorded;
# that chunk then dies with a3 and nobody can finish (seen once on a loaded machine).
publish 1 --until complete
# SIGKILL a3 in the middle of v1 and restart it (without the limit): it resumes its staging.
wait_for 20 grep -q "fetching v1" "$work/a3.log" || fail "a3 never started v1"
sleep 1.5
kill_process a3 KILL
[[ "$(current_of a3)" == 0 ]] || fail "a3 finished v1 before it was killed"
start_agent a3
wait_for 40 all_current 1 "${agents[@]}" || fail "v1 did not reach every agent"
grep -Eq "target v1: [0-9]+ chunks, [1-9][0-9]* resumed" "$work/a3.log" ||
  fail "a3 did not resume its staging of v1"
same_files 1 "${agents[@]}"
wait "${pids[pub]}" || fail "the publisher of v1 failed"
unset "pids[pub]"

# --until replicated (the default for --dir) from here: the publisher leaves on its own.
for v in 2 3 4; do
  publish "$v"
  wait_for 40 all_current "$v" "${agents[@]}" || fail "v$v did not reach every agent"
  same_files "$v" "${agents[@]}"
done
grep -q "fetching delta payloads" "$work/a1.log" || fail "a1 never fetched a delta"

# The publisher is gone once v4 is replicated; a late joiner gets v4 from the agents alone.
wait_for 30 bash -c "! kill -0 ${pids[pub]} 2>/dev/null" || fail "the publisher did not stop"
start_agent a8 --exit-after 4
wait_for 40 all_current 4 a8 || fail "the late joiner did not get v4"
same_files 4 a8
wait "${pids[a8]}" || fail "the late joiner with --exit-after 4 did not exit 0"
unset "pids[a8]"
echo "PASS: 8 agents, v1 full + 3 deltas, kill/restart, publisher gone, late joiner"
