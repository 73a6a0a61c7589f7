#!/usr/bin/env bash
# The UCX transport side by side with its references, in one run (docs/BENCHMARKS.md, the "ucx"
# rows):
#   1. memcpy of the same bytes in the same chunk size (bench_memcpy_rate): the same-host bound;
#   2. UCX over shared memory (UCX_TLS=sm,tcp: posix/sysv for messages, cma for rendezvous;
#      tcp only for the connection's wireup), `weightcast net send/recv --transport ucx`;
#   3. the TCP transport on loopback (--transport tcp);
#   4. UCX over its tcp transport on loopback (UCX_TLS=tcp);
#   4b. UCX's own ceiling there: ucx_perftest ucp_am_bw (the AM path weightcast uses) and tag_bw,
#      4 MiB messages, UCX_TLS=tcp on 127.0.0.1 (skipped when ucx-utils is not installed);
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

# Rounds: memcpy, then one run each of UCX shm, TCP transport, UCX tcp (each next to one
# iperf3 run). On a shared machine the load changes from second to second, so every ratio is
# taken inside one round and the median over rounds is reported (the best too).
for ((i = 0; i < RUNS; i++)); do
  "$MEMCPY" "$BYTES" 4MiB | tail -n 1 >>"$tmp/memcpy"
  export PORT_UCX=$((47213 + 16 * i))  # fresh UCX ports each round (TIME_WAIT)
  WC_TRANSPORT=ucx UCX_TLS=sm,tcp bash "$here/p2p_vs_iperf3.sh" "$WC" "$BYTES" 1 \
    | tail -n 1 >>"$tmp/ucx_shm"
  WC_TRANSPORT=tcp bash "$here/p2p_vs_iperf3.sh" "$WC" "$BYTES" 1 | tail -n 1 >>"$tmp/tcp"
  PORT_UCX=$((PORT_UCX + 8)) WC_TRANSPORT=ucx UCX_TLS=tcp bash "$here/p2p_vs_iperf3.sh" "$WC" "$BYTES" 1 \
    | tail -n 1 >>"$tmp/ucx_tcp"
  if command -v ucx_perftest >/dev/null; then
    for t in ucp_am_bw tag_bw; do
      p=$((47500 + 16 * i)); [[ $t == tag_bw ]] && p=$((p + 1))
      UCX_TLS=tcp timeout 60 ucx_perftest -p "$p" >/dev/null 2>&1 &
      srv=$!
      sleep 1
      # The last line: "Final: iters lat_50% lat_avg lat_all bw_avg bw_all ...", bandwidth in MiB/s.
      UCX_TLS=tcp timeout 60 ucx_perftest 127.0.0.1 -p "$p" -t "$t" -s 4194304 -n 500 -w 20 2>/dev/null \
        | awk -v t="$t" '/Final/ {printf "{\"test\": \"%s\", \"gbit_per_s\": %.3f}\n", t, $7 * 8 * 1.048576 / 1000}' \
        >>"$tmp/perftest_$t" || true
      wait "$srv" || true
    done
  fi
  echo "round $i: memcpy $(tail -n 1 "$tmp/memcpy" | cut -c1-120)" >&2
  for f in ucx_shm tcp ucx_tcp perftest_ucp_am_bw perftest_tag_bw; do
    if [[ -f $tmp/$f ]]; then echo "  $f: $(tail -n 1 "$tmp/$f" | cut -c1-200)" >&2; fi
  done
done
netns=0
if [[ $(id -u) -eq 0 ]]; then
  netns=1
  echo "== netns 1 Gbit/s: UCX over tcp" >&2
  PORT_UCX=47400 WC_TRANSPORT=ucx UCX_TLS=tcp bash "$here/p2p_netns.sh" "$WC" "$NETNS_BYTES" 2 \
    | tee "$tmp/netns_ucx.log" >&2
  echo "== netns 1 Gbit/s: TCP transport" >&2
  WC_TRANSPORT=tcp bash "$here/p2p_netns.sh" "$WC" "$NETNS_BYTES" 2 | tee "$tmp/netns_tcp.log" >&2
fi

python3 - "$tmp" "$netns" <<'PY'
import json, os, statistics, sys
tmp, netns = sys.argv[1], sys.argv[2] == "1"
def rows(name):
    return [json.loads(l) for l in open(os.path.join(tmp, name)) if l.strip()]
def last(name):
    return json.loads(open(os.path.join(tmp, name)).read().strip().splitlines()[-1])
mem, shm, tcp, utcp = rows("memcpy"), rows("ucx_shm"), rows("tcp"), rows("ucx_tcp")
pt = lambda t: rows("perftest_" + t) if os.path.exists(os.path.join(tmp, "perftest_" + t)) else []
am, tag = pt("ucp_am_bw"), pt("tag_bw")
g = lambda r: r["weightcast_gbit_per_s"]
med = lambda v: round(statistics.median(v), 3)
per_round = [{"memcpy": round(m["gbit_per_s"], 3), "ucx_shm": g(s), "tcp_transport": g(t),
              "ucx_tcp": g(u), "iperf3": max(s["iperf3_gbit_per_s"], t["iperf3_gbit_per_s"],
                                              u["iperf3_gbit_per_s"])}
             for m, s, t, u in zip(mem, shm, tcp, utcp)]
out = {
    "bench": "ucx_transport", "bytes": shm[0]["bytes"], "rounds": len(per_round),
    "ucx_shm_vs_memcpy_median": med([r["ucx_shm"] / r["memcpy"] for r in per_round]),
    "ucx_shm_vs_memcpy_best_round": round(max(r["ucx_shm"] / r["memcpy"] for r in per_round), 3),
    "ucx_shm_vs_tcp_transport_median": med([r["ucx_shm"] / r["tcp_transport"] for r in per_round]),
    "ucx_tcp_loopback_vs_iperf3_median": med([u["throughput_ratio"] for u in utcp]),
    "tcp_transport_loopback_vs_iperf3_median": med([t["throughput_ratio"] for t in tcp]),
    "memcpy_gbit_per_s_median": med([r["memcpy"] for r in per_round]),
    "ucx_shm_gbit_per_s_median": med([r["ucx_shm"] for r in per_round]),
    "tcp_transport_gbit_per_s_median": med([r["tcp_transport"] for r in per_round]),
    "ucx_tcp_gbit_per_s_median": med([r["ucx_tcp"] for r in per_round]),
    "ucx_shm_cpu_s_per_gb_median": med([s["weightcast_cpu_s_per_gb"] for s in shm]),
    "tcp_transport_cpu_s_per_gb_median": med([t["weightcast_cpu_s_per_gb"] for t in tcp]),
    "per_round": per_round,
}
# UCX's own ceiling on loopback tcp, each next to the iperf3 run of the UCX-tcp round it ran in.
for name, res in (("ucx_perftest_am", am), ("ucx_perftest_tag", tag)):
    if len(res) == len(utcp) and res:
        out[name + "_gbit_per_s_median"] = med([r["gbit_per_s"] for r in res])
        out[name + "_vs_iperf3_median"] = med(
            [r["gbit_per_s"] / u["iperf3_gbit_per_s"] for r, u in zip(res, utcp)])
if netns:
    nu, nt = last("netns_ucx.log"), last("netns_tcp.log")
    out.update({
        "netns_1gbit_ucx_tcp_gbit_per_s": nu["weightcast_gbit_per_s"],
        "netns_1gbit_iperf3_gbit_per_s": nu["iperf3_gbit_per_s"],
        "netns_1gbit_ucx_tcp_vs_iperf3": nu["throughput_ratio"],
        "netns_1gbit_ucx_tcp_vs_iperf3_median": nu["median_throughput_ratio"],
        "netns_1gbit_tcp_transport_vs_iperf3": nt["throughput_ratio"],
    })
print(json.dumps(out))
PY
