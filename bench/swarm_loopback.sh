#!/usr/bin/env bash
# The swarm on loopback: 1 coordinator, 1 publisher, 8 agents (real processes) receive a full
# version (default 2 GiB synth bf16 model), then one RL-like step of it (about 1% of elements
# changed) as a delta; next to one point-to-point copy of the same versions (`weightcast serve` /
# `weightcast fetch`) in the same run. Every agent verifies each chunk, stages, commits (fsync).
#
# Reported: time from "published" to every agent's commit, against the p2p copy of the same bytes
# to one node (on one machine all nodes share the CPUs and the disk, so this is a cost ratio,
# not the fleet speed-up); the source's upload as a multiple of the version size (a fan-out from
# the source would be 8x); and how evenly agents upload (min/max/CV of bytes sent per agent).
# Also the agents' CPU per GB received (each agent verifies, stages, commits and forwards what it
# receives) next to the same run's references: iperf3's CPU per GB on loopback (both ends) plus
# one SHA-256 pass per GB (`openssl speed -evp sha256`), and the most threads an agent had.
# DEGREE=N sets the coordinator's --degree (default: its own).
#
#   bash bench/swarm_loopback.sh [path/to/weightcast] [size=2GiB] [chunk=16MiB]
#
# Last line: one JSON object.
set -euo pipefail

wc=${1:-build/agent/src/cli/weightcast}
size=${2:-2GiB}
chunk=${3:-16MiB}
agents=8
[[ -x $wc ]] || { echo "weightcast not found at $wc (build a Release weightcast)" >&2; exit 1; }

work="$(mktemp -d)"
declare -A pids=()
cleanup() {
  local n
  for n in "${!pids[@]}"; do kill -9 "${pids[$n]}" 2>/dev/null || true; done
  for n in "${!pids[@]}"; do wait "${pids[$n]}" 2>/dev/null || true; done
  if [[ "${KEEP_WORK:-}" == 1 ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
now() { date +%s.%N; }
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

head -c 48 /dev/urandom | base64 >"$work/secret"
"$wc" synth model -o "$work/step-0000" --size "$size" --seed 11 >/dev/null
"$wc" synth steps --from "$work/step-0000" -o "$work" --steps 1 --lr 5e-7 --seed 11 >/dev/null
bytes="$(du -cb "$work"/step-0000/* | tail -n 1 | cut -f1)"

degree_flag=()
[[ -n "${DEGREE:-}" ]] && degree_flag=(--degree "$DEGREE")
"$wc" coordinator --listen 127.0.0.1:0 --state-dir "$work/coord" --address-file "$work/coord.addr" \
  --secret-file "$work/secret" "${degree_flag[@]}" 2>"$work/coord.log" &
pids[coord]=$!
wait_for 20 test -s "$work/coord.addr"
coord="$(cat "$work/coord.addr")"
for i in $(seq 1 $agents); do
  "$wc" agent --coordinator "$coord" --store "$work/a$i" --channel policy --node-id $((100 + i)) \
    --metrics 127.0.0.1:0 --secret-file "$work/secret" 2>"$work/a$i.log" &
  pids[a$i]=$!
done
for i in $(seq 1 $agents); do
  wait_for 20 grep -q "serving metrics at" "$work/a$i.log"
done

all_current() {
  local i
  for i in $(seq 1 $agents); do
    [[ "$(basename "$(readlink "$work/a$i/policy/current" 2>/dev/null)")" == "$1" ]] || return 1
  done
}
# counters FILE: "received sent uploads-from-memory uploads-from-store cpu-seconds" of every
# agent, one line each (the upload counters are absent, 0, in builds before they existed).
counters() {
  local i addr cpu
  for i in $(seq 1 $agents); do
    addr="$(grep -o 'http://127.0.0.1:[0-9]*/metrics' "$work/a$i.log" | head -n 1)"
    # utime + stime of the agent process, in clock ticks (fields 14, 15 of /proc/PID/stat).
    cpu="$(awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/${pids[a$i]}/stat")"
    curl -s "$addr" | awk -v cpu="$cpu" '$1 ~ /^weightcast_agent_bytes_received_total/ {r=$2}
        $1 ~ /^weightcast_agent_bytes_sent_total/ {s=$2}
        $1 ~ /^weightcast_agent_chunk_uploads_total.*from="memory"/ {m=$2}
        $1 ~ /^weightcast_agent_chunk_uploads_total.*from="store"/ {d=$2}
        END {print r, s, m + 0, d + 0, cpu}'
  done >"$1"
}

# Samples the agents' thread counts (Threads: in /proc/PID/status) every 0.2 s into FILE until
# killed; the largest value is reported.
sample_threads() {
  local i
  while true; do
    for i in $(seq 1 $agents); do
      awk '/^Threads:/ {print $2}' "/proc/${pids[a$i]}/status" 2>/dev/null || true
    done >>"$1"
    sleep 0.2
  done
}

# publish_version V DIR: publishes DIR, waits for every agent to commit it; prints seconds from
# the publisher's "published" to the last commit.
publish_version() {
  local v="$1" dir="$2" t0 t1
  "$wc" publish --coordinator "$coord" --store "$work/pub" --channel policy --dir "$dir" \
    --chunk-size "$chunk" --until complete --node-id 1 --secret-file "$work/secret" \
    >"$work/pub$v.out" 2>"$work/pub$v.log" &
  pids[pub]=$!
  wait_for 600 grep -q " published" "$work/pub$v.log" || { cat "$work/pub$v.log" >&2; exit 1; }
  t0=$(now)
  wait_for 900 all_current "$v" || { tail "$work"/a1.log >&2; exit 1; }
  t1=$(now)
  wait "${pids[pub]}" || true
  unset "pids[pub]"
  python3 -c "print($t1 - $t0)"
}

counters "$work/c0"
sample_threads "$work/threads" &
sampler=$!
swarm_full=$(publish_version 1 "$work/step-0000")
kill "$sampler"; wait "$sampler" 2>/dev/null || true
counters "$work/c1"
swarm_delta=$(publish_version 2 "$work/step-0001")
counters "$work/c2"
for i in $(seq 1 $agents); do
  cmp -s "$work/step-0001/model.safetensors" "$work/a$i/policy/versions/2/model.safetensors" 2>/dev/null ||
    cmp -s <(cat "$work"/step-0001/*.safetensors) <(cat "$work/a$i/policy/versions/2"/*.safetensors) ||
    { echo "agent a$i: v2 differs from the publisher's files" >&2; exit 1; }
done
delta_payload="$(grep -o 'payload_bytes=[0-9]*' "$work/pub2.log" | head -n 1 | cut -d= -f2 || true)"

# The point-to-point reference: the same two versions from the publisher's store to one node.
for i in $(seq 1 $agents); do kill "${pids[a$i]}"; wait "${pids[a$i]}" 2>/dev/null || true; unset "pids[a$i]"; done
"$wc" serve --root "$work/pub" --channel policy --listen 127.0.0.1:0 --secret-file "$work/secret" \
  2>"$work/serve.log" &
pids[serve]=$!
wait_for 20 grep -q ' on 127.0.0.1:' "$work/serve.log"
addr="$(grep -o '127.0.0.1:[0-9]*' "$work/serve.log" | head -n 1)"
p2p() {
  "$wc" fetch --from "$addr" --root "$work/p2p" --channel policy --secret-file "$work/secret" \
    --version "$1" 2>/dev/null | tail -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])'
}
p2p_full=$(p2p 1)
p2p_delta=$(p2p 2)
kill "${pids[serve]}"; wait "${pids[serve]}" 2>/dev/null || true; unset "pids[serve]"

# References in the same run: iperf3 over loopback (CPU of both ends per GB moved) and one
# SHA-256 pass (openssl speed's 8 KiB blocks, one core).
iperf_cpu_per_gb=null
if command -v iperf3 >/dev/null; then
  iperf3 -s -1 -p 5301 >/dev/null 2>&1 &
  iperf_server=$!
  sleep 0.5
  iperf3 -c 127.0.0.1 -p 5301 -n "$bytes" -J >"$work/iperf.json" 2>/dev/null || true
  wait "$iperf_server" 2>/dev/null || true
  iperf_cpu_per_gb="$(python3 -c '
import json, sys
e = json.load(open(sys.argv[1]))["end"]
secs = e["sum_received"]["seconds"]; gb = e["sum_received"]["bytes"] / 1e9
u = e["cpu_utilization_percent"]
print(round((u["host_total"] + u["remote_total"]) / 100 * secs / gb, 3))' "$work/iperf.json" 2>/dev/null || echo null)"
fi
sha_gb_per_s="$(openssl speed -evp sha256 -bytes 8192 -seconds 2 2>/dev/null |
  awk '/^sha256/ {v = $NF; sub(/k$/, "", v); print v * 1000 / 1e9}')"

python3 - "$work" "$bytes" "$swarm_full" "$swarm_delta" "$p2p_full" "$p2p_delta" "$agents" \
  "${delta_payload:-0}" "$iperf_cpu_per_gb" "${sha_gb_per_s:-0}" <<'PY'
import json, os, statistics, sys
work, size = sys.argv[1], int(sys.argv[2])
sf, sd, pf, pd = map(float, sys.argv[3:7])
agents, payload = int(sys.argv[7]), int(sys.argv[8])
iperf_cpu = None if sys.argv[9] == "null" else float(sys.argv[9])
sha_gbps = float(sys.argv[10])
threads = [int(x) for x in open(f"{work}/threads").read().split()] if os.path.exists(f"{work}/threads") else []
def load(name):
    return [tuple(float(x) for x in line.split()) for line in open(f"{work}/{name}")]
c0, c1, c2 = load("c0"), load("c1"), load("c2")
def phase(a, b):
    recv = [y[0] - x[0] for x, y in zip(a, b)]
    sent = [y[1] - x[1] for x, y in zip(a, b)]
    mean = statistics.mean(sent)
    memory = sum(y[2] - x[2] for x, y in zip(a, b))
    stored = sum(y[3] - x[3] for x, y in zip(a, b))
    cpu = sum(y[4] - x[4] for x, y in zip(a, b))
    return {
        "agent_cpu_s": round(cpu, 3),
        "agent_cpu_s_per_gb_received": round(cpu / (sum(recv) / 1e9), 3) if sum(recv) else None,
        "uploads_from_memory": int(memory), "uploads_from_store": int(stored),
        "received_bytes": int(sum(recv)),
        "source_upload_bytes": int(sum(recv) - sum(sent)),
        "agent_upload_min": int(min(sent)), "agent_upload_max": int(max(sent)),
        "agent_upload_cv": round(statistics.pstdev(sent) / mean, 3) if mean else None,
    }
full, delta = phase(c0, c1), phase(c1, c2)
full["source_upload_over_size"] = round(full["source_upload_bytes"] / size, 3)
delta["source_upload_over_payload"] = round(delta["source_upload_bytes"] / payload, 3) if payload else None
out = {
    "bench": "swarm_loopback", "agents": agents, "version_bytes": size, "delta_payload_bytes": payload,
    "swarm_full_s": round(sf, 3), "p2p_full_s": round(pf, 3),
    "swarm_full_over_p2p": round(sf / pf, 3),
    "swarm_delta_s": round(sd, 3), "p2p_delta_s": round(pd, 3),
    "swarm_delta_over_p2p": round(sd / pd, 3),
    "full": full, "delta": delta,
    "agent_threads_max": max(threads) if threads else None,
    "iperf3_cpu_s_per_gb": iperf_cpu,
    "sha256_gb_per_s": round(sha_gbps, 3) if sha_gbps else None,
}
if iperf_cpu is not None and sha_gbps and full["agent_cpu_s_per_gb_received"]:
    reference = iperf_cpu + 1 / sha_gbps
    out["reference_cpu_s_per_gb"] = round(reference, 3)
    out["agent_cpu_per_gb_over_reference"] = round(full["agent_cpu_s_per_gb_received"] / reference, 2)
print(f"full {size/2**30:.2f} GiB to {agents} agents: {sf:.2f} s (p2p to one node {pf:.2f} s, x{sf/pf:.2f}); "
      f"source uploaded {full['source_upload_over_size']}x the version; agent upload min/max "
      f"{full['agent_upload_min']/2**20:.0f}/{full['agent_upload_max']/2**20:.0f} MiB, CV {full['agent_upload_cv']}")
print(f"delta: {sd:.2f} s (p2p {pd:.2f} s, x{sd/pd:.2f}); payload {payload/2**20:.1f} MiB, source uploaded "
      f"{delta['source_upload_over_payload']}x the payload")
print(f"agent CPU {full['agent_cpu_s_per_gb_received']} s per GB received; reference (iperf3 + one SHA-256 "
      f"pass) {out.get('reference_cpu_s_per_gb')} s/GB -> x{out.get('agent_cpu_per_gb_over_reference')}; "
      f"at most {out['agent_threads_max']} threads per agent")
print(json.dumps(out))
PY
