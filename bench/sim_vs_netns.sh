#!/usr/bin/env bash
# Does the simulator predict the emulated cluster? One weightcast delta step on the netns cluster
# (bench/cluster/run.sh: HOSTS hosts at RATE, a SIZE synth model, a training step at learning rate
# LR), then `weightcast sim` with the same receivers, rate, size and chunk size, every chunk
# changed, at the payload ratio the real encoder gave in that run (P / S). Side by side, from the
# version's publication: the slowest agent's transfer (netns: its "vN complete in" line, counted
# from its target) and the fleet committed (netns: the slowest host's commit; sim: the long-poll
# `all` rollout), both against P/B. The netns run shares this machine's cores between all its
# nodes; its idle CPU is printed with it, since the simulator models links, not CPUs.
#
#   bash bench/sim_vs_netns.sh [HOSTS=16] [RATE=10mbit] [SIZE=64MiB] [LR=2e-6]
#
# Needs root (network namespaces); WC=PATH picks the binary (default build/release/src/cli/weightcast).
# Last line: one JSON object.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
hosts=${1:-16}
rate=${2:-10mbit}
size=${3:-64MiB}
lr=${4:-2e-6}
wc=${WC:-$root/build/release/src/cli/weightcast}
[[ $rate =~ ^([0-9.]+)(k|m|g)bit$ ]] || { echo "RATE like 10mbit, 1gbit" >&2; exit 2; }
case ${BASH_REMATCH[2]} in k) scale=1e-6 ;; m) scale=1e-3 ;; g) scale=1 ;; esac
gbps=$(python3 -c "print(${BASH_REMATCH[1]} * $scale)")

out=$(mktemp)
err=$(mktemp)
trap 'rm -f "$out" "$err"; [[ -n ${kept:-} ]] && rm -rf "$kept"' EXIT
bash "$root/bench/cluster/run.sh" "$hosts" "$rate" "$size" --systems weightcast --lr "$lr" \
  --wc "$wc" --keep >"$out" 2>"$err" || { cat "$err" >&2; exit 1; }
kept=$(sed -n 's/.*kept \(\/.*\)$/\1/p' "$err" | tail -1)
cluster_json=$(grep '^{' "$out" | tail -1)
# The slowest agent's transfer of the delta version, from its own log.
fetch_s=$(grep -h "v2 complete in" "$kept"/ph/weightcast_delta/log.* |
  sed 's/.*complete in \([0-9.]*\) s.*/\1/' | sort -n | tail -1)
read -r bytes payload <<<"$(python3 -c '
import json, sys
d = json.loads(sys.argv[1]); p = d["phases"]["weightcast_delta"]
print(d["bytes"], p["published_payload_bytes"])' "$cluster_json")"
ratio=$(python3 -c "print($payload / $bytes)")
sim_json=$("$wc" sim -n $((hosts - 1)) --size "${bytes}B" --gbps "$gbps" --delta --changed 1 \
  --delta-ratio "$ratio" 2>/dev/null | grep '^{' | tail -1)
python3 - "$cluster_json" "$sim_json" "$fetch_s" "$hosts" "$rate" "$size" "$lr" <<'PY'
import json, sys
cluster, sim = json.loads(sys.argv[1]), json.loads(sys.argv[2])
fetch_s, hosts, rate, size, lr = float(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7]
p = cluster["phases"]["weightcast_delta"]
bound = sim["lower_bound_s"]
rollout = next(r for r in sim["rollout"] if r["policy"] == "all" and r["control"] == "long-poll")
out = {
    "bench": "sim_vs_netns", "hosts": hosts, "rate": rate, "size": size, "lr": lr,
    "payload_bytes": p["published_payload_bytes"], "p_over_b_s": round(bound, 3),
    "netns_fetch_s": fetch_s, "sim_fetch_s": round(sim["max_s"], 3),
    "netns_committed_s": p["slowest_after_publish_s"],
    "sim_committed_s": round(rollout["healthy_committed_at_s"], 3),
    "netns_idle_cpu_mean": p["idle_cpu"]["mean"], "netns_idle_cpu_min": p["idle_cpu"]["min"],
}
out["fetch_netns_over_sim"] = round(fetch_s / sim["max_s"], 2)
out["committed_netns_over_sim"] = round(p["slowest_after_publish_s"] / rollout["healthy_committed_at_s"], 2)
out["netns_fetch_over_p_over_b"] = round(fetch_s / bound, 2)
out["sim_fetch_over_p_over_b"] = round(sim["max_s"] / bound, 2)
print(f"P = {out['payload_bytes']} bytes, P/B = {bound:.3f} s; transfer: netns {fetch_s:.3f} s, "
      f"sim {sim['max_s']:.3f} s ({out['fetch_netns_over_sim']}x); committed: netns "
      f"{out['netns_committed_s']:.3f} s, sim {out['sim_committed_s']:.3f} s "
      f"({out['committed_netns_over_sim']}x); netns idle CPU mean {out['netns_idle_cpu_mean']}%")
print(json.dumps(out))
PY
