#!/usr/bin/env bash
# An emulated cluster: N hosts, each a network namespace with one veth ("eth0") into a bridge
# that lives in its own "switch" namespace, so nothing is created in (or routed through) the
# namespace this script is started from. Every host's link is shaped to RATE in both directions:
#   host side eth0 egress       = the host's upload   (htb at RATE [+ netem DELAY])
#   switch side port egress     = the host's download (htb at RATE)
# Addresses: host i (0-based) is 198.18.0.(i+1)/24 (RFC 2544 benchmarking range; nothing else is
# ever addressed). DELAY, when given, is added once on each host's upload, so two hosts see an
# RTT of 2*DELAY; it needs the netem qdisc, which some kernels lack (then `up` fails, saying so).
#
# Used as a library (`source bench/cluster/netns.sh`, then cluster_up ...) or as a command:
#   netns.sh up ID N RATE [DELAY]     create hosts 0..N-1 (prints the namespace names)
#   netns.sh down ID                  remove everything of cluster ID (idempotent)
#   netns.sh rate ID HOST RATE        reshape one host's link (both directions)
#   netns.sh link ID HOST down|up     take one host's link down / bring it back
#   netns.sh check ID A B RATE        iperf3 A->B for a few seconds; fails unless within 10% of RATE
#   netns.sh exec ID HOST cmd...      run a command in host HOST's namespace
# ID is a short token (letters/digits, at most 8) that keeps concurrent clusters apart.
# Needs root.

# Namespace names are the only global names: interfaces live inside namespaces.
cluster_ns() { echo "wcc${1}h${2}"; }   # cluster_ns ID HOST
cluster_sw() { echo "wcc${1}sw"; }      # cluster_sw ID
cluster_addr() { echo "198.18.0.$(($1 + 1))"; }  # cluster_addr HOST

# Validates what becomes part of a namespace or tc command line.
cluster_check_args() {  # ID [N]
  [[ $1 =~ ^[A-Za-z0-9]{1,8}$ ]] || { echo "cluster id must be 1-8 letters/digits: '$1'" >&2; return 2; }
  if [[ $# -ge 2 ]]; then
    [[ $2 =~ ^[0-9]+$ && $2 -ge 2 && $2 -le 200 ]] || { echo "hosts must be 2..200: '$2'" >&2; return 2; }
  fi
}
cluster_check_rate() {
  [[ $1 =~ ^[0-9]+(\.[0-9]+)?(kbit|mbit|gbit)$ ]] || { echo "rate like 50mbit expected: '$1'" >&2; return 2; }
}
cluster_check_delay() {
  [[ $1 =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] || { echo "delay like 5ms expected: '$1'" >&2; return 2; }
}

# Bytes of queue behind each shaper: 100 ms at RATE (at least 64 KB). A queue counted in
# packets would hold GSO super-packets of up to 64 KB each, i.e. seconds of delay.
cluster_queue_bytes() {  # RATE
  awk -v r="$1" 'BEGIN { v = r + 0; if (r ~ /gbit/) v *= 1e9; else if (r ~ /mbit/) v *= 1e6; else v *= 1e3;
    q = int(v / 8 / 10); if (q < 65536) q = 65536; print q }'
}

# Installs the shaping of one direction on DEV in namespace NS: htb at RATE with a bfifo leaf,
# or a netem leaf when DELAY is given. htb rather than tbf: veth hands over GSO super-packets,
# which tbf would have to split (CPU) or drop when larger than its bucket; htb charges them whole.
cluster_shape_dev() {  # NS DEV RATE [DELAY]
  local ns=$1 dev=$2 rate=$3 delay=${4:-}
  ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
  ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: htb default 1 r2q 1 || return 1
  # burst ~ a few GSO packets: keeps the link busy at timer granularity without letting bursts
  # exceed RATE by more than a few percent over a second.
  ip netns exec "$ns" tc class add dev "$dev" parent 1: classid 1:1 htb rate "$rate" ceil "$rate" \
    burst 64k cburst 64k quantum 65536 || return 1
  if [[ -n $delay ]]; then
    ip netns exec "$ns" tc qdisc add dev "$dev" parent 1:1 handle 10: netem delay "$delay" \
      limit 100000 || { echo "netem (for DELAY) is not available in this kernel" >&2; return 1; }
  else
    ip netns exec "$ns" tc qdisc add dev "$dev" parent 1:1 handle 10: bfifo \
      limit "$(cluster_queue_bytes "$rate")"
  fi
}

cluster_down() {  # ID
  cluster_check_args "$1" || return 2
  local ns
  # Kill whatever still runs inside the hosts (ours only: these namespaces are ours), then drop
  # the namespaces; the veths and the bridge go with them.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^wcc${1}(h[0-9]+|sw)$"); do
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null)
    # shellcheck disable=SC2086  # a list of pids
    [[ -n $pids ]] && kill -TERM $pids 2>/dev/null
  done
  sleep 0.2
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^wcc${1}(h[0-9]+|sw)$"); do
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null)
    # shellcheck disable=SC2086  # a list of pids
    [[ -n $pids ]] && kill -KILL $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  return 0
}

cluster_up() {  # ID N RATE [DELAY]
  local id=$1 n=$2 rate=$3 delay=${4:-}
  cluster_check_args "$id" "$n" || return 2
  cluster_check_rate "$rate" || return 2
  [[ -z $delay ]] || cluster_check_delay "$delay" || return 2
  local sw
  sw=$(cluster_sw "$id")
  ip netns add "$sw" || return 1
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge || return 1
  # No STP, no forwarding delay: ports forward at once.
  ip -n "$sw" link set br0 type bridge stp_state 0 forward_delay 0 2>/dev/null || true
  ip -n "$sw" link set br0 up
  local i ns
  for ((i = 0; i < n; i++)); do
    ns=$(cluster_ns "$id" "$i")
    ip netns add "$ns" || return 1
    ip -n "$ns" link set lo up
    # Created inside the switch namespace with the peer placed straight into the host: the veth
    # never exists in the caller's namespace.
    ip -n "$sw" link add "p$i" type veth peer name eth0 netns "$ns" || return 1
    ip -n "$sw" link set "p$i" master br0
    ip -n "$sw" link set "p$i" up
    ip -n "$ns" addr add "$(cluster_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    cluster_shape_dev "$ns" eth0 "$rate" "$delay" || return 1
    cluster_shape_dev "$sw" "p$i" "$rate" || return 1
  done
}

cluster_rate() {  # ID HOST RATE: both directions of one host's link
  cluster_check_args "$1" && cluster_check_rate "$3" || return 2
  local ns sw
  ns=$(cluster_ns "$1" "$2")
  sw=$(cluster_sw "$1")
  ip netns exec "$ns" tc class change dev eth0 parent 1: classid 1:1 htb rate "$3" ceil "$3" \
    burst 64k cburst 64k quantum 65536 &&
    ip netns exec "$sw" tc class change dev "p$2" parent 1: classid 1:1 htb rate "$3" ceil "$3" \
      burst 64k cburst 64k quantum 65536
}

cluster_link() {  # ID HOST down|up: the switch port goes down, the host loses carrier
  cluster_check_args "$1" || return 2
  [[ $3 == up || $3 == down ]] || { echo "link state must be up or down" >&2; return 2; }
  ip -n "$(cluster_sw "$1")" link set "p$2" "$3"
}

cluster_exec() {  # ID HOST cmd...
  local ns
  ns=$(cluster_ns "$1" "$2")
  shift 2
  ip netns exec "$ns" "$@"
}

# Bytes a host has sent on its link so far (includes TCP/IP headers: what the wire carried).
cluster_tx_bytes() {  # ID HOST
  ip netns exec "$(cluster_ns "$1" "$2")" cat /sys/class/net/eth0/statistics/tx_bytes
}

# iperf3 from host A to host B for SECONDS; prints the measured Mbit/s and fails unless it is
# within 10% of RATE (the shaping works, and the machine is not too loaded to emulate it).
cluster_check() {  # ID A B RATE [SECONDS]
  local id=$1 a=$2 b=$3 rate=$4 secs=${5:-4}
  cluster_check_rate "$rate" || return 2
  local want
  want=$(awk -v r="$rate" 'BEGIN { v = r + 0; if (r ~ /gbit/) v *= 1000; else if (r ~ /kbit/) v /= 1000; print v }')
  local port=47399 out
  cluster_exec "$id" "$b" timeout $((secs + 10)) iperf3 -s -1 -B "$(cluster_addr "$b")" -p $port \
    >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  out=$(cluster_exec "$id" "$a" timeout $((secs + 10)) iperf3 -c "$(cluster_addr "$b")" -p $port \
    -t "$secs" -O 1 --json 2>/dev/null)
  wait "$server" 2>/dev/null
  local got
  got=$(printf '%s' "$out" | python3 -c '
import json,sys
try:
  d=json.load(sys.stdin); print("%.2f" % (d["end"]["sum_received"]["bits_per_second"]/1e6))
except Exception: print("0")')
  echo "iperf3 $(cluster_addr "$a") -> $(cluster_addr "$b"): $got Mbit/s (rate $want Mbit/s)"
  awk -v g="$got" -v w="$want" 'BEGIN { exit !(g >= 0.9 * w && g <= 1.1 * w) }'
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -u
  [[ $(id -u) -eq 0 ]] || { echo "needs root (network namespaces)" >&2; exit 77; }
  cmd=${1:-}
  shift || true
  case $cmd in
    up) cluster_up "$@" || { rc=$?; cluster_down "$1"; exit $rc; } ;;
    down) cluster_down "$@" ;;
    rate) cluster_rate "$@" ;;
    link) cluster_link "$@" ;;
    check) cluster_check "$@" ;;
    exec) cluster_exec "$@" ;;
    *) sed -n '2,20p' "$0" >&2; exit 2 ;;
  esac
fi
