#!/usr/bin/env bash
# What TCP itself carries on the emulated cluster when every link is loaded both ways: N hosts
# (bench/cluster/netns.sh, each link shaped to RATE in both directions), one iperf3 flow from
# every host to every other host (N*(N-1) flows) for SECONDS. Prints each host's received rate
# and, last, one JSON object: per-host receive rate (mean, min, max) and retransmits. The
# reference for a swarm's download rate on the same network (docs/BENCHMARKS.md).
#   sudo bash bench/cluster/mesh_iperf3.sh [N=16] [RATE=50mbit] [SECONDS=60] [K=N-1]
# (SECONDS 60 by default: 240 clients took 27 s to start on a 2-core VM, and the measured window
# opens only once all of them run.)
# With K, host s sends only to hosts s+1 .. s+K (mod N): K flows on every link each way.
set -euo pipefail
n=${1:-16}
rate=${2:-50mbit}
seconds=${3:-60}
k=${4:-$((n - 1))}
[[ $(id -u) -eq 0 ]] || { echo "needs root (network namespaces)" >&2; exit 77; }
command -v iperf3 >/dev/null || { echo "needs iperf3" >&2; exit 1; }
[[ $n =~ ^[0-9]+$ && $n -ge 2 && $n -le 32 ]] || { echo "N must be 2..32" >&2; exit 2; }
[[ $k =~ ^[0-9]+$ && $k -ge 1 && $k -lt $n ]] || { echo "K must be 1..N-1" >&2; exit 2; }
[[ $seconds =~ ^[0-9]+$ && $seconds -ge 1 && $seconds -le 120 ]] || {
  echo "SECONDS must be 1..120" >&2
  exit 2
}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/netns.sh"
id="mesh$$"
id=${id:0:8}
out="$(mktemp -d)"
cleanup() {
  cluster_down "$id" >/dev/null 2>&1 || true
  rm -rf "$out"
}
trap cleanup EXIT
cluster_up "$id" "$n" "$rate" >/dev/null
# Receiver r listens on port 5200+s for sender s: one server per flow (iperf3 serves one test
# at a time).
for ((r = 0; r < n; r++)); do
  for ((s = 0; s < n; s++)); do
    (((r - s + n) % n >= 1 && (r - s + n) % n <= k)) || continue
    ip netns exec "$(cluster_ns "$id" "$r")" timeout $((seconds + 30)) \
      iperf3 -s -1 -p $((5200 + s)) -B "$(cluster_addr "$r")" >/dev/null 2>&1 &
  done
done
sleep 1
clients=()
started=$SECONDS
for ((r = 0; r < n; r++)); do
  for ((s = 0; s < n; s++)); do
    (((r - s + n) % n >= 1 && (r - s + n) % n <= k)) || continue
    ip netns exec "$(cluster_ns "$id" "$s")" timeout $((seconds + 20)) \
      iperf3 -c "$(cluster_addr "$r")" -p $((5200 + s)) -t "$seconds" -J >"$out/$s.$r.json" 2>/dev/null &
    clients+=($!)
  done
done
# The figure: each host's download wire rate (its switch port's transmitted bytes) over the
# middle of the test, when every flow runs; iperf3's own per-flow figures cover staggered starts.
port_bytes() {
  ip netns exec "$(cluster_sw "$id")" cat /proc/net/dev |
    awk '$1 ~ /^p[0-9]+:$/ { sub(":", "", $1); print substr($1, 2), $10 }' | sort -n
}
# Starting N*(N-1) clients takes seconds: the window opens 3 s after the last one started and
# closes 2 s before the first one stops.
launch=$((SECONDS - started))
window=$((seconds - launch - 5))
[[ $window -ge 3 ]] || {
  echo "SECONDS too short: starting the clients took ${launch} s; give at least $((launch + 8))" >&2
  exit 1
}
sleep 3
t1=$(date +%s.%N)
port_bytes >"$out/ports.1"
sleep "$window"
t2=$(date +%s.%N)
port_bytes >"$out/ports.2"
for p in "${clients[@]}"; do wait "$p" || true; done
wait || true
python3 - "$n" "$rate" "$seconds" "$out" "$t1" "$t2" "$k" <<'PY'
import json, os, sys
n, rate, seconds, d, k = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[7])
window = float(sys.argv[6]) - float(sys.argv[5])
def ports(name):
    with open(os.path.join(d, name)) as f:
        return {int(h): int(b) for h, b in (line.split() for line in f)}
a, b = ports("ports.1"), ports("ports.2")
wire = [(b[h] - a[h]) * 8 / window / 1e6 for h in range(n)]
retransmits = flows = 0
for name in os.listdir(d):
    if not name.endswith(".json"):
        continue
    try:
        end = json.load(open(os.path.join(d, name)))["end"]
    except (ValueError, KeyError):
        continue
    flows += 1
    retransmits += end.get("sum_sent", {}).get("retransmits", 0)
for h in range(n):
    print(f"host {h:2d} download {wire[h]:6.2f} Mbit/s on the wire")
print(json.dumps({"bench": "cluster_mesh_iperf3", "hosts": n, "rate": rate, "seconds": seconds,
                  "window_s": round(window, 2), "flows": flows, "flows_expected": n * k, "senders_per_host": k,
                  "download_wire_mbit_mean": round(sum(wire) / n, 2),
                  "download_wire_mbit_min": round(min(wire), 2),
                  "download_wire_mbit_max": round(max(wire), 2), "retransmits": retransmits}))
PY
