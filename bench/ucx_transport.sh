#!/usr/bin/env bash
# The UCX transport side by side with its references, in one run (docs/BENCHMARKS.md, "UCX
# transport"):
#   1. memcpy of the same bytes in the same chunk size (bench_memcpy_rate): the same-host bound;
#   2. UCX over shared memory (UCX_TLS=sm,tcp: posix/sysv for messages, cma for rendezvous;
#      tcp only for the connection's wireup), `weightcast net send/recv --transport ucx`;
#   3. the TCP transport on loopback (--transport tcp);
#   4. UCX over its tcp transport on loopback (UCX_TLS=tcp);
#   each of 2-4 next to iperf3 on loopback in the same invocation (bench/p2p_vs_iperf3.sh);
#   5. with root: UCX over tcp and the TCP transport on a netns veth pair shaped to 1 Gbit/s
#      (198.18.0.0/24), each next to iperf3 on that link (bench/p2p_netns.sh).
#
#   bash bench/ucx_transport.sh [path/to/weightcast] [bytes=2GiB] [runs=3] [netns_bytes=512MiB]
# The last line printed is one JSON object with every figure and ratio.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
WC=${1:-build/release/src/cli/weightcast}
BYTES=${2:-2GiB}
RUNS=${3:-3}
NETNS_BYTES=${4:-512MiB}
MEMCPY=${MEMCPY:-$(dirname "$(dirname "$(dirname "$WC")")")/bench/bench_memcpy_rate}
[[ -x $MEMCPY ]] || { echo "memcpy benchmark not found: $MEMCPY" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

last() { tail -n 1 "$1"; }
for ((i = 0; i < RUNS; i++)); do "$MEMCPY" "$BYTES" 4MiB | tail -n 1 >>"$tmp/memcpy"; done
echo "memcpy: $(sort -t: -k6 "$tmp/memcpy" | tail -n 1)" >&2

echo "== UCX over shared memory" >&2
WC_TRANSPORT=ucx UCX_TLS=sm,tcp bash "$here/p2p_vs_iperf3.sh" "$WC" "$BYTES" "$RUNS" \
  | tee "$tmp/ucx_shm.log" >&2
echo "== TCP transport" >&2
WC_TRANSPORT=tcp bash "$here/p2p_vs_iperf3.sh" "$WC" "$BYTES" "$RUNS" | tee "$tmp/tcp.log" >&2
echo "== UCX over tcp" >&2
WC_TRANSPORT=ucx UCX_TLS=tcp bash "$here/p2p_vs_iperf3.sh" "$WC" "$BYTES" "$RUNS" \
  | tee "$tmp/ucx_tcp.log" >&2
netns=0
if [[ $(id -u) -eq 0 ]]; then
  netns=1
  echo "== netns 1 Gbit/s: UCX over tcp" >&2
  WC_TRANSPORT=ucx UCX_TLS=tcp bash "$here/p2p_netns.sh" "$WC" "$NETNS_BYTES" 2 \
    | tee "$tmp/netns_ucx.log" >&2
  echo "== netns 1 Gbit/s: TCP transport" >&2
  WC_TRANSPORT=tcp bash "$here/p2p_netns.sh" "$WC" "$NETNS_BYTES" 2 | tee "$tmp/netns_tcp.log" >&2
fi

python3 - "$tmp" "$netns" <<'PY'
import json, os, sys
tmp, netns = sys.argv[1], sys.argv[2] == "1"
def last(name):
    return json.loads(open(os.path.join(tmp, name)).read().strip().splitlines()[-1])
memcpy = max((json.loads(l) for l in open(os.path.join(tmp, "memcpy")) if l.strip()),
             key=lambda r: r["gbit_per_s"])
shm, tcp, utcp = last("ucx_shm.log"), last("ucx_tcp.log"), None
tcp, utcp = last("tcp.log"), last("ucx_tcp.log")
r = lambda a, b: round(a / b, 3) if b else None
out = {
    "bench": "ucx_transport",
    "bytes": shm["bytes"],
    "memcpy_gbit_per_s": round(memcpy["gbit_per_s"], 3),
    "ucx_shm_gbit_per_s": shm["weightcast_gbit_per_s"],
    "tcp_transport_gbit_per_s": tcp["weightcast_gbit_per_s"],
    "ucx_tcp_loopback_gbit_per_s": utcp["weightcast_gbit_per_s"],
    "iperf3_loopback_gbit_per_s": max(shm["iperf3_gbit_per_s"], tcp["iperf3_gbit_per_s"],
                                      utcp["iperf3_gbit_per_s"]),
    "ucx_shm_vs_memcpy": r(shm["weightcast_gbit_per_s"], memcpy["gbit_per_s"]),
    "ucx_shm_vs_tcp_transport": r(shm["weightcast_gbit_per_s"], tcp["weightcast_gbit_per_s"]),
    "ucx_tcp_loopback_vs_iperf3": utcp["throughput_ratio"],
    "tcp_transport_loopback_vs_iperf3": tcp["throughput_ratio"],
    "ucx_shm_cpu_s_per_gb": shm["weightcast_cpu_s_per_gb"],
    "tcp_transport_cpu_s_per_gb": tcp["weightcast_cpu_s_per_gb"],
}
if netns:
    nu, nt = last("netns_ucx.log"), last("netns_tcp.log")
    out.update({
        "netns_1gbit_ucx_tcp_gbit_per_s": nu["weightcast_gbit_per_s"],
        "netns_1gbit_iperf3_gbit_per_s": nu["iperf3_gbit_per_s"],
        "netns_1gbit_ucx_tcp_vs_iperf3": nu["throughput_ratio"],
        "netns_1gbit_tcp_transport_vs_iperf3": nt["throughput_ratio"],
    })
print(json.dumps(out))
PY
