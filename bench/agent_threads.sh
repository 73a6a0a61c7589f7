#!/usr/bin/env bash
# Threads per agent against the number of peers: for each degree in DEGREES, one
# coordinator (--degree D), one publisher and AGENTS agents (real processes, loopback) receive one
# synth version; every agent's thread count (Threads: in /proc/PID/status) is sampled every 0.2 s
# while the version moves, and its open peer connections are read from its /metrics. Reported per
# degree: the most threads any agent had, the median of the agents' maxima, and the most peers an
# agent was connected to. A node design whose threads grow with its peers shows it here.
#
#   bash bench/agent_threads.sh [path/to/weightcast] [agents=26] [size=256MiB] [degrees=6,24]
#
# TRANSPORT=auto runs every agent and the publisher with `--transport auto` (UCX between them,
# UCX_TLS=sm,tcp on loopback); AGENT_FLAGS adds flags to every agent (e.g. --download-limit 10GiB:
# the limit paces push delivery too, so it adds no thread per peer).
#
# Last line: one JSON object.
set -euo pipefail

wc=${1:-build/release/src/cli/weightcast}
agents=${2:-26}
size=${3:-256MiB}
IFS=, read -r -a degrees <<<"${4:-6,24}"
transport=${TRANSPORT:-tcp}
read -r -a agent_flags <<<"${AGENT_FLAGS:-}"
if [[ $transport != tcp ]]; then export UCX_TLS=${UCX_TLS:-sm,tcp} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}; fi
[[ -x $wc ]] || { echo "weightcast not found at $wc (build a Release weightcast)" >&2; exit 1; }

work="$(mktemp -d)"
declare -A pids=()
stop_all() {
  local n
  for n in "${!pids[@]}"; do kill "${pids[$n]}" 2>/dev/null || true; done
  for n in "${!pids[@]}"; do wait "${pids[$n]}" 2>/dev/null || true; done
  pids=()
}
cleanup() {
  local n
  for n in "${!pids[@]}"; do kill -9 "${pids[$n]}" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

new_secret "$work/secret"
"$wc" synth model -o "$work/model" --size "$size" --seed 5 >/dev/null

all_current() {
  local i
  for i in $(seq 1 "$agents"); do
    [[ -L "$work/d$1/a$i/policy/current" ]] || return 1
  done
}

results=()
for degree in "${degrees[@]}"; do
  d="$work/d$degree"
  mkdir -p "$d"
  "$wc" coordinator --listen 127.0.0.1:0 --state-dir "$d/coord" --address-file "$d/coord.addr" \
    --secret-file "$work/secret" --degree "$degree" 2>"$d/coord.log" &
  pids[coord]=$!
  wait_for 20 test -s "$d/coord.addr"
  coord="$(cat "$d/coord.addr")"
  for i in $(seq 1 "$agents"); do
    nice "$wc" agent --coordinator "$coord" --store "$d/a$i" --channel policy --node-id $((100 + i)) \
      --metrics 127.0.0.1:0 --secret-file "$work/secret" --transport "$transport" \
      "${agent_flags[@]}" 2>"$d/a$i.log" &
    pids[a$i]=$!
  done
  for i in $(seq 1 "$agents"); do wait_for 30 grep -q "serving metrics at" "$d/a$i.log"; done
  "$wc" publish --coordinator "$coord" --store "$d/pub" --channel policy --dir "$work/model" \
    --until complete --node-id 1 --secret-file "$work/secret" --transport "$transport" \
    >"$d/pub.out" 2>"$d/pub.log" &
  pids[pub]=$!
  : >"$d/threads"
  : >"$d/peers"
  : >"$d/ucx_peers"
  deadline=$((SECONDS + 600))
  while ! all_current "$degree"; do
    ((SECONDS < deadline)) || { echo "degree $degree: not every agent committed in 600 s" >&2; exit 1; }
    for i in $(seq 1 "$agents"); do
      echo "$i $(awk '/^Threads:/ {print $2}' "/proc/${pids[a$i]}/status" 2>/dev/null || echo 0)"
    done >>"$d/threads"
    # Peer connections, from one agent's /metrics per round (cheap; rotates over the agents).
    i=$(( (RANDOM % agents) + 1 ))
    addr="$(grep -o 'http://127.0.0.1:[0-9]*/metrics' "$d/a$i.log" | head -n 1)"
    curl -s "$addr" | awk '$1 ~ /^weightcast_agent_peers($|{)/ {print $2}' >>"$d/peers" || true
    curl -s "$addr" | awk '$1 ~ /^weightcast_agent_peer_connections{.*transport="ucx"/ {s += $2}
      END {print s + 0}' >>"$d/ucx_peers" || true
    sleep 0.2
  done
  wait "${pids[pub]}" 2>/dev/null || true
  unset "pids[pub]"
  stop_all
  results+=("$degree:$d")
done

python3 - "$agents" "$size" "$transport" "${AGENT_FLAGS:-}" "${results[@]}" <<'PY'
import json, statistics, sys
agents, size = int(sys.argv[1]), sys.argv[2]
out = {"bench": "agent_threads", "agents": agents, "size": size, "transport": sys.argv[3],
       "agent_flags": sys.argv[4], "by_degree": {}}
for item in sys.argv[5:]:
    degree, path = item.split(":", 1)
    per_agent = {}
    for line in open(f"{path}/threads"):
        i, t = line.split()
        per_agent[i] = max(per_agent.get(i, 0), int(t))
    peers = [float(x) for x in open(f"{path}/peers").read().split()]
    try:
        ucx = [float(x) for x in open(f"{path}/ucx_peers").read().split()]
    except FileNotFoundError:
        ucx = []
    maxima = list(per_agent.values())
    row = {"threads_max": max(maxima), "threads_median_of_maxima": statistics.median(maxima),
           "peers_max": int(max(peers)) if peers else None,
           "ucx_peers_max": int(max(ucx)) if ucx else 0}
    out["by_degree"][degree] = row
    print(f"degree {degree}: at most {row['threads_max']} threads per agent "
          f"(median of maxima {row['threads_median_of_maxima']}), up to {row['peers_max']} peers "
          f"connected, {row['ucx_peers_max']} over UCX")
print(json.dumps(out))
PY
