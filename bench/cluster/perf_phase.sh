#!/usr/bin/env bash
# Profiles one phase of the emulated-cluster benchmark: starts bench/cluster/run.sh with the
# given arguments, waits until it writes the go file of PHASE (the moment the phase's clock
# starts), then records every CPU with `perf record -a -g` for SECONDS.
#
#   sudo bash bench/cluster/perf_phase.sh PHASE SECONDS OUT.data -- RUN.SH-ARGS...
#     e.g. sudo bash bench/cluster/perf_phase.sh weightcast_delta 6 /tmp/delta.data -- \
#            16 50mbit 128MiB --systems weightcast
#
# PHASE is a phase name of run.sh (http, libtorrent, weightcast, weightcast_delta). run.sh's own
# output goes to OUT.data.log. The last line is one JSON object: the phase's result from run.sh
# and the five symbols with the most samples (self time, all processes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[[ $# -ge 4 && $4 == -- ]] || { sed -n 2,12p "$0" >&2; exit 2; }
PHASE=$1 SECONDS_TO_RECORD=$2 OUT=$3
shift 4
command -v perf >/dev/null || { echo "perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
[[ $SECONDS_TO_RECORD =~ ^[0-9]+$ && $SECONDS_TO_RECORD -gt 0 ]] || { echo "SECONDS must be a positive integer" >&2; exit 2; }

timeout 900 bash bench/cluster/run.sh "$@" >"$OUT.log" 2>&1 &
run=$!
trap 'kill "$run" 2>/dev/null || true' EXIT
go=""
for _ in $(seq 1 12000); do  # run.sh's setup and earlier phases: at most 10 minutes
  go=$(find /dev/shm -maxdepth 4 -path "*/wcc-*/ph/$PHASE/go" 2>/dev/null | head -1)
  [[ -n $go ]] && break
  kill -0 "$run" 2>/dev/null || break
  sleep 0.05
done
[[ -n $go ]] || { echo "phase $PHASE never started (see $OUT.log)" >&2; exit 1; }
perf record -a -g -F 499 -o "$OUT" -- sleep "$SECONDS_TO_RECORD" >/dev/null 2>&1
wait "$run" || true
trap - EXIT
# awk reads the whole report (a `head` would end perf with SIGPIPE, a failure under pipefail).
top=$(perf report -i "$OUT" --no-children --sort sym -q -g none 2>/dev/null |
  awk 'NF >= 3 && n < 5 {n++; pct=$1; sub(/%/, "", pct); $1=""; $2=""; sub(/^ +/, ""); gsub(/"/, ""); printf "%s{\"symbol\":\"%s\",\"percent\":%s}", (n>1?",":""), $0, pct}')
phase=$(tail -1 "$OUT.log" | python3 -c 'import json,sys; print(json.dumps(json.loads(sys.stdin.read())["phases"].get(sys.argv[1])))' "$PHASE" 2>/dev/null || echo null)
echo "perf data in $OUT (perf report -i $OUT)"
printf '{"bench":"cluster_perf_phase","phase":"%s","seconds":%s,"result":%s,"top_self":[%s]}\n' \
  "$PHASE" "$SECONDS_TO_RECORD" "$phase" "$top"
