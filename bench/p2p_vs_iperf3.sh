#!/usr/bin/env bash
# Point-to-point throughput and CPU cost of `weightcast net send/recv` next to iperf3, in the
# same run, on the same path. Default: loopback. bench/p2p_netns.sh reuses this between two
# network namespaces by setting RECV_NS / SEND_NS / HOST.
#
#   bash bench/p2p_vs_iperf3.sh [path/to/weightcast] [bytes=2GiB] [runs=3]
#
# Each tool moves the same byte count RUNS times, interleaved (iperf3, weightcast, iperf3, ...);
# the best run of each is compared (medians are reported too: a shared machine is noisy). CPU seconds come from /usr/bin/time for both processes of
# each tool (sender + receiver, whole process). Every run is bounded by `timeout`. The last line
# printed is one JSON object.
set -euo pipefail

WC=${1:-build/release/src/cli/weightcast}
BYTES=${2:-2GiB}
RUNS=${3:-3}
HOST=${HOST:-127.0.0.1}
RECV_NS=${RECV_NS:-}
SEND_NS=${SEND_NS:-}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
PORT_WC=${PORT_WC:-47211}
PORT_IPERF=${PORT_IPERF:-47212}
# Which weightcast transport (--transport): tcp unless told (bench/ucx_transport.sh sets ucx;
# UCX_TLS, when set, picks UCX's own transports). A UCX receiver listens on PORT_UCX as well.
WC_TRANSPORT=${WC_TRANSPORT:-tcp}
PORT_UCX=${PORT_UCX:-47213}
wc_addr() {  # wc_addr RUN: a fresh UCX port per run (the last run's may still be in TIME_WAIT)
  if [[ $WC_TRANSPORT == tcp ]]; then echo "$HOST:$PORT_WC"; else echo "$HOST:$PORT_WC,ucx=$((PORT_UCX + $1))"; fi
}

command -v iperf3 >/dev/null || { echo "iperf3 is not installed" >&2; exit 1; }
[[ -x $WC ]] || { echo "weightcast binary not found: $WC" >&2; exit 1; }
WC=$(readlink -f "$WC")

in_ns() {  # in_ns NAMESPACE cmd...: run in a namespace, or here when NAMESPACE is empty
  local ns=$1; shift
  if [[ -n $ns ]]; then ip netns exec "$ns" "$@"; else "$@"; fi
}

bytes_num=$(python3 -c "
import re,sys
m=re.fullmatch(r'(\d+)\s*([KMGT]?)(i?B)?','$BYTES')
print(int(m.group(1))*{'':1,'K':1<<10,'M':1<<20,'G':1<<30,'T':1<<40}[m.group(2)])")

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [[ -n $p ]] && kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

export WEIGHTCAST_SECRET=${WEIGHTCAST_SECRET:-p2p-benchmark-secret-$$-0123456789}

cpu_of() { awk '{print $1 + $2}' "$1"; }  # user + system seconds from /usr/bin/time -f "%U %S"

run_iperf() {
  local i=$1
  in_ns "$RECV_NS" timeout "$RUN_TIMEOUT" /usr/bin/time -o "$tmp/is$i.time" -f "%U %S" \
    iperf3 -s -1 -B "$HOST" -p "$PORT_IPERF" >/dev/null 2>&1 &
  pids+=($!)
  local server=$!
  sleep 0.5
  in_ns "$SEND_NS" timeout "$RUN_TIMEOUT" /usr/bin/time -o "$tmp/ic$i.time" -f "%U %S" \
    iperf3 -c "$HOST" -p "$PORT_IPERF" -n "$bytes_num" -l 128K --json >"$tmp/ic$i.json"
  wait "$server" || true
  python3 - "$tmp/ic$i.json" "$(cpu_of "$tmp/ic$i.time")" "$(cpu_of "$tmp/is$i.time")" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
r=d['end']['sum_received']
print(json.dumps({'tool':'iperf3','bytes':r['bytes'],'seconds':r['seconds'],
  'gbit_per_s':r['bits_per_second']/1e9,'cpu_s':float(sys.argv[2])+float(sys.argv[3])}))
PY
}

run_wc() {
  local i=$1
  in_ns "$RECV_NS" timeout "$RUN_TIMEOUT" /usr/bin/time -o "$tmp/ws$i.time" -f "%U %S" \
    "$WC" net recv --listen "$(wc_addr "$i")" --transport "$WC_TRANSPORT" --timeout "$RUN_TIMEOUT" >"$tmp/ws$i.json" 2>"$tmp/ws$i.err" &
  pids+=($!)
  local server=$!
  sleep "$([[ $WC_TRANSPORT == tcp ]] && echo 0.5 || echo 1.5)"  # UCX takes longer to start
  in_ns "$SEND_NS" timeout "$RUN_TIMEOUT" /usr/bin/time -o "$tmp/wc$i.time" -f "%U %S" \
    "$WC" net send --connect "$(wc_addr "$i")" --transport "$WC_TRANSPORT" --bytes "$bytes_num" --chunk-size 4MiB \
    --timeout "$RUN_TIMEOUT" >"$tmp/wc$i.json"
  wait "$server"
  python3 - "$tmp/wc$i.json" "$(cpu_of "$tmp/wc$i.time")" "$(cpu_of "$tmp/ws$i.time")" <<'PY'
import json,sys
d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(json.dumps({'tool':'weightcast','bytes':d['bytes'],'seconds':d['seconds'],
  'gbit_per_s':d['gbit_per_s'],'cpu_s':float(sys.argv[2])+float(sys.argv[3])}))
PY
}

: >"$tmp/results"
for ((i = 0; i < RUNS; i++)); do
  run_iperf "$i" | tee -a "$tmp/results" >&2
  run_wc "$i" | tee -a "$tmp/results" >&2
done

python3 - "$tmp/results" "$HOST" "$BYTES" "$([[ -n $RECV_NS ]] && echo netns || echo loopback)" "$WC_TRANSPORT" "${UCX_TLS:-}" <<'PY'
import json,sys
runs=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
best=lambda t: max((r for r in runs if r['tool']==t), key=lambda r: r['gbit_per_s'])
def median(t):
  v=sorted(r['gbit_per_s'] for r in runs if r['tool']==t)
  return v[len(v)//2] if len(v)%2 else (v[len(v)//2-1]+v[len(v)//2])/2
i,w=best('iperf3'),best('weightcast')
gb=lambda r: r['bytes']/1e9
out={'bench':'p2p_vs_iperf3','path':sys.argv[4],'host':sys.argv[2],'bytes':w['bytes'],
 'transport':sys.argv[5],'ucx_tls':sys.argv[6],
 'runs_each':len(runs)//2,
 'weightcast_gbit_per_s':round(w['gbit_per_s'],3),'iperf3_gbit_per_s':round(i['gbit_per_s'],3),
 'throughput_ratio':round(w['gbit_per_s']/i['gbit_per_s'],3),
 'weightcast_median_gbit_per_s':round(median('weightcast'),3),
 'iperf3_median_gbit_per_s':round(median('iperf3'),3),
 'median_throughput_ratio':round(median('weightcast')/median('iperf3'),3),
 'weightcast_cpu_s_per_gb':round(w['cpu_s']/gb(w),3),'iperf3_cpu_s_per_gb':round(i['cpu_s']/gb(i),3),
 'cpu_ratio':round((w['cpu_s']/gb(w))/(i['cpu_s']/gb(i)),3),
 'all_runs':runs}
print(json.dumps(out))
PY
