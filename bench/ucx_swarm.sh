#!/usr/bin/env bash
# A swarm of 4 agents and a publisher on one host, one 1 GiB version (synth bf16), in three
# rounds of one run (docs/BENCHMARKS.md, the "ucx" rows):
#   ucx       every node --transport ucx, UCX over shared memory (UCX_TLS=sm,tcp, tcp on lo only
#             for wireup);
#   tcp       every node --transport tcp;
#   fallback  every node auto, but a1 runs --transport tcp (UCX disabled) and a2's UCX is killed
#             after FAULT_BYTES by the fault switch (WEIGHTCAST_UCX_FAIL_AFTER_BYTES).
# Each round: a fresh coordinator, agents and publisher; time from the publisher's "published" to
# the last agent's commit; every agent's files compared with the source; chunk bytes received
# per agent (above the version size = refetched after a failure).
#
#   bash bench/ucx_swarm.sh [path/to/weightcast] [size=1GiB] [rounds=1]
# Last line: one JSON object.
set -euo pipefail
wc=${1:-build/release/src/cli/weightcast}
size=${2:-1GiB}
rounds=${3:-1}
agents=4
FAULT_BYTES=${FAULT_BYTES:-$((256 << 20))}
[[ -x $wc ]] || { echo "weightcast not found at $wc" >&2; exit 1; }
export UCX_TLS=${UCX_TLS:-sm,tcp} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}

base="$(mktemp -d)"
declare -A pids=()
stop_all() {
  local n
  for n in "${!pids[@]}"; do kill -9 "${pids[$n]}" 2>/dev/null || true; done
  for n in "${!pids[@]}"; do wait "${pids[$n]}" 2>/dev/null || true; done
  pids=()
}
cleanup() { stop_all; rm -rf "$base"; }
trap cleanup EXIT
now() { date +%s.%N; }
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
head -c 48 /dev/urandom | base64 >"$base/secret"
"$wc" synth model -o "$base/model" --size "$size" --seed 5 >/dev/null
bytes="$(du -cb "$base"/model/* | tail -n 1 | cut -f1)"

# round NAME: prints one JSON line for the round.
round() {
  local name="$1" work="$base/$1" i t0 t1 extra env_of
  mkdir -p "$work"
  "$wc" coordinator --listen 127.0.0.1:0 --state-dir "$work/coord" \
    --address-file "$work/coord.addr" --secret-file "$base/secret" 2>"$work/coord.log" &
  pids[coord]=$!
  wait_for 20 test -s "$work/coord.addr"
  local coord
  coord="$(cat "$work/coord.addr")"
  for i in $(seq 1 $agents); do
    extra=(--transport "$name")
    env_of=()
    if [[ $name == fallback ]]; then
      extra=(--transport auto)
      [[ $i == 1 ]] && extra=(--transport tcp)
      [[ $i == 2 ]] && env_of=(WEIGHTCAST_UCX_FAIL_AFTER_BYTES="$FAULT_BYTES")
    fi
    env "${env_of[@]}" "$wc" agent --coordinator "$coord" --store "$work/a$i" --channel policy \
      --node-id $((100 + i)) --metrics 127.0.0.1:0 --secret-file "$base/secret" "${extra[@]}" \
      2>"$work/a$i.log" &
    pids[a$i]=$!
  done
  for i in $(seq 1 $agents); do wait_for 30 grep -q "serving metrics at" "$work/a$i.log"; done
  local ptransport=$name
  [[ $name == fallback ]] && ptransport=auto
  "$wc" publish --coordinator "$coord" --store "$work/pub" --channel policy --dir "$base/model" \
    --until complete --node-id 1 --secret-file "$base/secret" --transport "$ptransport" \
    >"$work/pub.out" 2>"$work/pub.log" &
  pids[pub]=$!
  wait_for 600 grep -q " published" "$work/pub.log" || { tail "$work/pub.log" >&2; exit 1; }
  t0=$(now)
  all() {
    local j
    for j in $(seq 1 $agents); do
      [[ "$(basename "$(readlink "$work/a$j/policy/current" 2>/dev/null)")" == 1 ]] || return 1
    done
  }
  wait_for 900 all || { tail "$work"/a*.log >&2; exit 1; }
  t1=$(now)
  for i in $(seq 1 $agents); do
    cmp -s <(cat "$base"/model/*.safetensors) <(cat "$work/a$i/policy/versions/1"/*.safetensors) ||
      { echo "$name: a$i differs from the source" >&2; exit 1; }
  done
  local received=() ucx=() addr
  for i in $(seq 1 $agents); do
    addr="$(grep -o 'http://127.0.0.1:[0-9]*/metrics' "$work/a$i.log" | head -n 1)"
    curl -s "$addr" >"$work/a$i.metrics"
    received+=("$(awk '$1 ~ /^weightcast_agent_bytes_received_total/ {print $2}' "$work/a$i.metrics")")
    ucx+=("$(awk '$1 ~ /^weightcast_agent_transport_bytes_total/ && $1 ~ /transport="ucx"/ {s+=$2} END {print s+0}' "$work/a$i.metrics")")
  done
  local fellback
  fellback=$(cat "$work"/a*.log "$work/pub.log" | grep -cE "connects to it use TCP|; using TCP" || true)
  wait "${pids[pub]}" 2>/dev/null || true
  unset "pids[pub]"
  stop_all
  python3 -c '
import json, sys
name, t0, t1, size = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
n = int(sys.argv[5]); rec = list(map(float, sys.argv[6:6 + n])); ucx = list(map(float, sys.argv[6 + n:6 + 2 * n]))
print(json.dumps({"round": name, "seconds": round(t1 - t0, 3), "version_bytes": size,
  "received_bytes_per_agent": [int(r) for r in rec],
  "refetched_bytes_per_agent": [int(max(r - size, 0)) for r in rec],
  "ucx_frame_bytes_per_agent": [int(u) for u in ucx], "fallback_log_lines": int(sys.argv[6 + 2 * n])}))' \
    "$name" "$t0" "$t1" "$bytes" "$agents" "${received[@]}" "${ucx[@]}" "$fellback"
}

: >"$base/results"
for ((r = 0; r < rounds; r++)); do
  for name in ucx tcp fallback; do
    round "$name" | tee -a "$base/results" >&2
  done
done
python3 - "$base/results" <<'PY'
import json, statistics, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
best = lambda n: min(r["seconds"] for r in rs if r["round"] == n)
fb = [r for r in rs if r["round"] == "fallback"][-1]
out = {"bench": "ucx_swarm", "agents": 4, "version_bytes": rs[0]["version_bytes"],
       "rounds_each": len(rs) // 3,
       "ucx_shm_s": best("ucx"), "tcp_s": best("tcp"), "fallback_s": best("fallback"),
       "ucx_over_tcp": round(best("ucx") / best("tcp"), 3),
       "fallback_committed_everywhere": True,
       "fallback_refetched_bytes_per_agent": fb["refetched_bytes_per_agent"],
       "fallback_ucx_frame_bytes_per_agent": fb["ucx_frame_bytes_per_agent"],
       "fallback_log_lines": fb["fallback_log_lines"], "runs": rs}
print(json.dumps(out))
PY
