# Shared helpers of the etcd integration tests (tests/integration/etcd_*.sh; sourced, not a test
# itself): a 3-member etcd cluster started here on 127.0.0.1 ports with data dirs in the work
# dir, coordinators on the etcd backend (--etcd), agents and publishers that follow the leader
# (--coordinator A,B). Every process started here is killed by the EXIT trap, by its pid.
# Exits 77 (CTest: skipped) with a message where etcd is not installed.
#
#   source "$(dirname "$0")/etcd_lib.bash" "$1"
#   start_etcd_cluster            # e1 e2 e3
#   start_leader_and_standby      # c1 leads, c2 stands by
#   start_agent a1                # --coordinator "$coords"
#   publish 1
if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
  echo "SKIP: etcd is not installed (apt-get install etcd-server etcd-client)"
  exit 77
fi
# shellcheck source=tests/integration/rollout_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/rollout_lib.bash" "$1"
default_model_size=2MiB
LEASE_TTL="${LEASE_TTL:-2s}"

# Free loopback ports, picked once so that restarts keep their addresses.
free_ports() {
  python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

declare -A etcd_client=() etcd_peer=()
etcd_members=(e1 e2 e3)
etcd_endpoints=""
initial_cluster=""

start_etcd_cluster() {
  local ports i=0 m
  read -r -a ports <<<"$(free_ports 6)"
  for m in "${etcd_members[@]}"; do
    etcd_client[$m]="http://127.0.0.1:${ports[$i]}"
    etcd_peer[$m]="http://127.0.0.1:${ports[$((i + 1))]}"
    i=$((i + 2))
    initial_cluster+="${initial_cluster:+,}$m=${etcd_peer[$m]}"
    etcd_endpoints+="${etcd_endpoints:+,}${etcd_client[$m]}"
  done
  for m in "${etcd_members[@]}"; do start_etcd_member "$m"; done
  wait_for 30 etcdctl_ endpoint health --cluster >/dev/null || fail "etcd did not become healthy"
}

# start_etcd_member NAME: starts (or restarts, on its data dir) one member. Short heartbeats and
# election timeout, so that a lost member is noticed (and a lease of 2 s allowed) in tests.
start_etcd_member() {
  local m="$1"
  etcd --name "$m" --data-dir "$work/etcd-$m" \
    --listen-client-urls "${etcd_client[$m]}" --advertise-client-urls "${etcd_client[$m]}" \
    --listen-peer-urls "${etcd_peer[$m]}" --initial-advertise-peer-urls "${etcd_peer[$m]}" \
    --initial-cluster "$initial_cluster" --initial-cluster-state new \
    --initial-cluster-token "wc-$$" --heartbeat-interval "${ETCD_HEARTBEAT_MS:-50}" \
    --election-timeout "${ETCD_ELECTION_MS:-500}" \
    >>"$work/etcd-$m.log" 2>&1 &
  pids[$m]=$!
}

etcdctl_() { ETCDCTL_API=3 etcdctl --endpoints "$etcd_endpoints" --command-timeout 2s "$@"; }

declare -A coord_addr=()
coords=""
# Coordinator addresses are fixed up front: agents and publishers get the whole list.
pick_coordinator_addresses() {
  local ports i=0 c
  read -r -a ports <<<"$(free_ports "$#")"
  for c in "$@"; do
    coord_addr[$c]="127.0.0.1:${ports[$i]}"
    coords+="${coords:+,}${coord_addr[$c]}"
    i=$((i + 1))
  done
  coord="$coords"  # rollout_lib's helpers (start_agent, publish, status_json) use $coord
}

# Two coordinators on the etcd cluster: c1 elected first (it leads), then c2 (it stands by).
start_leader_and_standby() {
  pick_coordinator_addresses c1 c2
  start_coordinator c1
  wait_for 20 leader_name >/dev/null || fail "no coordinator was elected"
  start_coordinator c2
}

coordinator_flags=(--commit-policy all --prepare-deadline 60s)
start_coordinator() {  # start_coordinator NAME [FLAGS...]
  local c="$1"
  shift
  "$wc" coordinator --listen "${coord_addr[$c]}" --etcd "$etcd_endpoints" \
    --lease-ttl "$LEASE_TTL" --heartbeat-timeout "${HEARTBEAT_TIMEOUT:-1500ms}" \
    --secret-file "$work/secret" "${coordinator_flags[@]}" "$@" >>"$work/$c.log" 2>&1 &
  pids[$c]=$!
}

# The address of the leading coordinator ("" when none).
leader_address() {
  etcdctl_ get /weightcast/default/leader --print-value-only 2>/dev/null || true
}

# The name (c1, c2) of the leading coordinator.
leader_name() {
  local addr c
  addr="$(leader_address)"
  for c in "${!coord_addr[@]}"; do
    [[ "${coord_addr[$c]}" == "$addr" ]] && { echo "$c"; return 0; }
  done
  return 1
}

# The log in etcd, one line per record: "SEQ publish|decision|rollback|writer VERSION DECISION".
etcd_log() {
  etcdctl_ get --prefix /weightcast/default/log/ -w json | python3 "$(dirname "${BASH_SOURCE[0]}")/etcd_log.py"
}

# Versions with other than exactly one decision in the log (empty: every decided version has
# one). The publish record's own decision counts when it is not NONE.
versions_not_decided_once() {
  etcd_log | awk '
    $2 == "publish" { seen[$3] = 1; if ($4 != 0) n[$3]++ }
    $2 == "decision" { n[$3]++ }
    END { for (v in seen) if (n[v] != 1) print "v" v ":" n[v]+0 }'
}
