#!/usr/bin/env bash
# Commit policies side by side with a fast and a slow agent: under `each` the fast one switches
# as soon as it has prepared, under `quorum:0.5` once half the fleet prepared, under `all` only
# when the slow one prepared too. Every agent ends on the version in each case.
source "$(dirname "$0")/rollout_lib.bash" "$1"
# The slow agent's download limit also slows its heartbeats: small chunks and a patient
# coordinator keep it alive (a silent agent would be excluded, not waited for).
HEARTBEAT_TIMEOUT=10s
CHUNK_SIZE=256KiB

MODEL_SIZE=3MiB make_versions 1

run_policy() {
  local policy="$1" fast_first="$2"
  kill_process fast
  kill_process slow
  kill_process pub
  kill_process coord
  rm -rf "$work/fast" "$work/slow" "$work/pub" "$work/coord-state" "$work"/*.log
  coord=""
  start_coordinator --commit-policy "$policy" --prepare-deadline 40s
  start_agent fast
  start_agent slow --download-limit 200KiB
  publish 1
  wait_for 40 all_current 1 fast || fail "$policy: the fast agent never committed v1"
  local slow_prepared=no
  grep -q 'prepared v1' "$work/slow.log" && slow_prepared=yes
  echo "$policy: when the fast agent committed v1, the slow one had prepared it: $slow_prepared"
  if [[ "$fast_first" == yes ]]; then
    [[ "$slow_prepared" == no ]] || fail "$policy: expected the slow agent still fetching"
  else
    [[ "$slow_prepared" == yes ]] || fail "$policy: the fast agent committed before all prepared"
  fi
  wait_for 40 all_current 1 fast slow || fail "$policy: the slow agent never committed v1"
  same_files 1 slow || fail "$policy: the slow agent's files differ"
}

run_policy each yes
run_policy quorum:0.5 yes
run_policy all no
echo "PASS rollout_policies"
