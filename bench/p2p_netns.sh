#!/usr/bin/env bash
# weightcast vs iperf3 between two network namespaces joined by a veth pair shaped to 1 Gbit/s
# (tc tbf on both ends), addresses 198.18.0.1/24 and 198.18.0.2/24 (RFC 2544 benchmarking
# range; nothing else is ever addressed). Needs root. Namespaces are removed on exit.
#
#   sudo bash bench/p2p_netns.sh [path/to/weightcast] [bytes=1GiB] [runs=2] [rate=1gbit]
set -euo pipefail

WC=${1:-build/release/src/cli/weightcast}
BYTES=${2:-1GiB}
RUNS=${3:-2}
RATE=${4:-1gbit}
here=$(cd "$(dirname "$0")" && pwd)

if [[ $(id -u) -ne 0 ]]; then echo "needs root (network namespaces)" >&2; exit 77; fi
A=wcbench-a-$$
B=wcbench-b-$$
VA=wcba$$
VB=wcbb$$
cleanup() {
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
}
trap cleanup EXIT

ip netns add "$A"
ip netns add "$B"
ip link add "$VA" type veth peer name "$VB"
ip link set "$VA" netns "$A"
ip link set "$VB" netns "$B"
ip -n "$A" addr add 198.18.0.1/24 dev "$VA"
ip -n "$B" addr add 198.18.0.2/24 dev "$VB"
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set "$VA" up
ip -n "$B" link set "$VB" up
# Token bucket on each end's egress: the link carries at most RATE in each direction.
ip netns exec "$A" tc qdisc add dev "$VA" root tbf rate "$RATE" burst 512kb latency 20ms
ip netns exec "$B" tc qdisc add dev "$VB" root tbf rate "$RATE" burst 512kb latency 20ms

# Receiver in A (198.18.0.1), sender in B.
HOST=198.18.0.1 RECV_NS=$A SEND_NS=$B RUN_TIMEOUT=${RUN_TIMEOUT:-60} \
  bash "$here/p2p_vs_iperf3.sh" "$WC" "$BYTES" "$RUNS"
