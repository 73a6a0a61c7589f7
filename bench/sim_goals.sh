#!/usr/bin/env bash
# The fleet-broadcast goals of docs/bench/sim.md: 500 GB at 10 Gbit/s to N = 100 and 1,000
# receivers, full duplex, shared, with deaths and stragglers, and racks behind 4:1 uplinks; and a
# delta step (1% of chunks changed at the real encoder's payload ratios, bound P/B; about 20 s at
# N = 1,000). SCENARIOS picks the runs (default: full_duplex shared faults racks delta); `bad`
# (1% of receivers upload corrupt data and are banned) costs a full broadcast and runs only when
# named there.
# Usage: bench/sim_goals.sh path/to/weightcast [N...]   (default N: 100 1000)
# Scheduler settings: the agents' defaults (swarm/tuning.h: adaptive per-peer windows, 24 peers
# per node with 24 upload slots, 32 requests in flight per node),
# which `weightcast sim` runs with no scheduler flag; SCHED_ARGS adds flags (the runs of
# docs/bench/sim.md pass those same settings as flags). Extra flags in SIM_ARGS.
# CHUNK is the simulated chunk size (default auto: what `weightcast publish` picks for 500 GB,
# 64 MiB; the figures of docs/bench/sim.md use CHUNK=96MiB). Each run is recorded with its wall
# and user CPU seconds and the load average before and after it (the machine is shared).
# Each run prints its JSON line; the last line is one JSON object holding all of them.
set -euo pipefail
wc_bin=${1:?usage: sim_goals.sh path/to/weightcast [N...]}
shift
sizes=("$@")
chunk=${CHUNK:-auto}
sched=${SCHED_ARGS:-}
[ ${#sizes[@]} -eq 0 ] && sizes=(100 1000)
runs=()
cpu_file=$(mktemp)
trap 'rm -f "$cpu_file"' EXIT
read -r -a scenarios <<< "${SCENARIOS:-full_duplex shared faults racks delta}"
for n in "${sizes[@]}"; do
  for scenario in "${scenarios[@]}"; do
    case $scenario in
      full_duplex) args=() ;;
      shared) args=(--shared) ;;
      faults) args=(--die 0.01 --die-at 0.5 --stragglers 0.05 --straggler-speed 0.5) ;;
      racks) args=(--rack-size 40 --oversubscription 4) ;;
      delta) args=(--delta --changed 0.01 --delta-ratio encoder) ;;
      bad) args=(--bad 0.01) ;;
      *) echo "sim_goals.sh: unknown scenario '$scenario'" >&2; exit 2 ;;
    esac
    load_before=$(cut -d' ' -f1 /proc/loadavg)
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    line=$(/usr/bin/time -f %U -o "$cpu_file" "$wc_bin" sim -n "$n" --size 500GB --chunk "$chunk" --gbps 10 "${args[@]}" $sched ${SIM_ARGS:-} | tail -n 1)
    wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    user=$(tail -n 1 "$cpu_file")
    load_after=$(cut -d' ' -f1 /proc/loadavg)
    echo "$line"
    echo "n=$n $scenario: wall ${wall} s, user CPU ${user} s, load ${load_before} -> ${load_after}" >&2
    runs+=("{\"scenario\":\"$scenario\",\"n\":$n,\"wall_s\":$wall,\"user_s\":$user,\"load_before\":$load_before,\"load_after\":$load_after,\"result\":$line}")
  done
done
( IFS=,; echo "{\"bench\":\"sim_goals\",\"runs\":[${runs[*]}]}" )
