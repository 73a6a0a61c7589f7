#!/usr/bin/env bash
# A fleet on loopback: 1 coordinator, 1 publisher, 8 agents. A full version, then 3 deltas; each
# version must reach every agent byte-identical to the publisher's files. The publisher stops once
# every chunk is replicated, and agents finish from each other. One agent is SIGKILLed in the
# middle of a transfer and restarted (it resumes); one joins late, after the last version.
source "$(dirname "$0")/swarm_lib.bash" "$1"

agents=(a1 a2 a3 a4 a5 a6 a7)
start_coordinator
make_versions 4
for a in "${agents[@]}"; do start_agent "$a"; done

publish 1
wait_for 40 all_current 1 "${agents[@]}" || fail "v1 did not reach every agent"
same_files 1 "${agents[@]}"
# --until replicated (the default for --dir): the publisher leaves on its own, successfully.
wait "${pids[pub]}" || fail "the publisher of v1 failed"
unset "pids[pub]"

for v in 2 3 4; do
  publish "$v"
  if [[ "$v" == 3 ]]; then
    # Kill a3 as soon as it has started on v3, restart it a moment later: it resumes its staging.
    wait_for 20 grep -q "fetching v3" "$work/a3.log" || fail "a3 never started v3"
    kill_process a3 KILL
    sleep 0.5
    start_agent a3
  fi
  wait_for 40 all_current "$v" "${agents[@]}" || fail "v$v did not reach every agent"
  same_files "$v" "${agents[@]}"
done
grep -q "fetching delta payloads" "$work/a1.log" || fail "a1 never fetched a delta"

# The publisher is gone once v4 is replicated; a late joiner gets v4 from the agents alone.
wait_for 30 bash -c "! kill -0 ${pids[pub]} 2>/dev/null" || fail "the publisher did not stop"
start_agent a8
wait_for 40 all_current 4 a8 || fail "the late joiner did not get v4"
same_files 4 a8
echo "PASS: 8 agents, v1 full + 3 deltas, kill/restart, publisher gone, late joiner"
