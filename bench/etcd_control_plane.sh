#!/usr/bin/env bash
# The etcd control plane measured against the embedded one, in one run, on loopback:
#  - publish -> fleet committed: the time from starting `weightcast publish` of the next version
#    to every agent (4) having it current, on the embedded coordinator (file log) and on two
#    coordinators over a 3-member etcd cluster; ratio etcd over file;
#  - failover: kill -9 of the leading coordinator -> the standby leads and every agent is
#    registered with it again (its `status` lists them all live), as a ratio to the lease TTL;
#  - bench_coordinator_load (1,000 simulated nodes) on the file log and on etcd, same run.
# Defaults everywhere (lease TTL 3 s, heartbeat timeout 3 s, etcd's own election timings).
#
#   bench/etcd_control_plane.sh build/release/src/cli/weightcast [VERSIONS=5] [FAILOVERS=5]
# Last line: one JSON object with the figures.
set -euo pipefail
wc="$(realpath "$1")"
load_bench="${LOAD_BENCH:-$(dirname "$wc")/../../bench/bench_coordinator_load}"
versions="${VERSIONS:-5}"
failovers="${FAILOVERS:-5}"
export LEASE_TTL="${LEASE_TTL:-3s}" HEARTBEAT_TIMEOUT="${HEARTBEAT_TIMEOUT:-3s}"
export ETCD_HEARTBEAT_MS="${ETCD_HEARTBEAT_MS:-100}" ETCD_ELECTION_MS="${ETCD_ELECTION_MS:-1000}"
source "$(dirname "$0")/../tests/integration/etcd_lib.bash" "$wc"

now() { date +%s.%N; }
median() { python3 -c 'import statistics, sys; print("%.3f" % statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

make_versions $((versions + 1))

# publish_round PREFIX V: sets round_s to the seconds from the publish to every agent PREFIX-a*
# having v V current. Not in a subshell: publish keeps the publisher's pid in pids[pub].
round_s=""
publish_round() {
  local prefix="$1" v="$2" t0
  t0="$(now)"
  publish "$v"
  wait_for 60 all_current "$v" "$prefix-a1" "$prefix-a2" "$prefix-a3" "$prefix-a4" ||
    fail "$prefix: v$v was not committed"
  round_s="$(python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(now)")"
}

# A fresh publisher store per backend, so that both publish the same versions from scratch.
# Sets backend_times.
backend_times=""
run_backend() {  # run_backend PREFIX: v1 first (not measured: the first fetch), then 2..N
  local prefix="$1" v a times=()
  for a in a1 a2 a3 a4; do start_agent "$prefix-$a"; done
  publish_round "$prefix" 1
  for ((v = 2; v <= versions + 1; v++)); do
    publish_round "$prefix" "$v"
    times+=("$round_s")
  done
  backend_times="${times[*]}"
}

echo "== embedded coordinator (file log)"
start_coordinator_embedded() {
  rm -f "$work/emb.addr"
  "$wc" coordinator --listen 127.0.0.1:0 --state-dir "$work/emb-state" \
    --address-file "$work/emb.addr" --secret-file "$work/secret" >>"$work/emb.log" 2>&1 &
  pids[emb]=$!
  wait_for 20 test -s "$work/emb.addr" || fail "the embedded coordinator did not start"
  coord="$(cat "$work/emb.addr")"
}
start_coordinator_embedded
run_backend file
file_times="$backend_times"
echo "publish -> committed (s): $file_times"
for a in a1 a2 a3 a4; do kill_process "file-$a"; done
kill_process pub
kill_process emb
rm -rf "$work/pub"

echo "== two coordinators over a 3-member etcd cluster"
start_etcd_cluster
coordinator_flags=()
pick_coordinator_addresses c1 c2
start_coordinator c1
wait_for 20 leader_name >/dev/null || fail "no coordinator was elected"
start_coordinator c2
run_backend etcd
etcd_times="$backend_times"
echo "publish -> committed (s): $etcd_times"

live_agents() {
  status_json | python3 -c '
import json, sys
print(sum(1 for n in json.load(sys.stdin).get("nodes", []) if n.get("alive") and not n.get("source")))'
}
failover_times=()
for ((i = 1; i <= failovers; i++)); do
  old="$(leader_name)" || fail "no leader"
  t0="$(now)"
  kill_process "$old"
  wait_for 60 bash -c "[[ \"\$(ETCDCTL_API=3 etcdctl --endpoints '$etcd_endpoints' get /weightcast/default/leader --print-value-only)\" != '' && \"\$(ETCDCTL_API=3 etcdctl --endpoints '$etcd_endpoints' get /weightcast/default/leader --print-value-only)\" != '${coord_addr[$old]}' ]]" ||
    fail "no new leader after $old was killed"
  t_elected="$(now)"
  while [[ "$(live_agents 2>/dev/null || echo 0)" -lt 4 ]]; do
    python3 -c "import sys, time; sys.exit(time.time() - float(sys.argv[1]) > 60)" "$t0" ||
      fail "the new leader did not serve the agents"
    sleep 0.05
  done
  t1="$(now)"
  f="$(python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t1")"
  e="$(python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t_elected")"
  echo "failover $i: $old killed; new leader elected after ${e} s, serving all 4 agents after ${f} s"
  failover_times+=("$f")
  start_coordinator "$old"
  sleep 1
done

echo "== coordinator load, 1000 nodes, file log and etcd"
load_json="$("$load_bench" --nodes 1000 --rounds 10 --publishes 10 --etcd "$etcd_endpoints" | tail -n 1)"
echo "$load_json"

ttl_s="${LEASE_TTL%s}"
file_median="$(median $file_times)"
etcd_median="$(median $etcd_times)"
failover_median="$(median "${failover_times[@]}")"
python3 - "$ttl_s" "$file_median" "$etcd_median" "$failover_median" "$load_json" "${failover_times[*]}" <<'PY'
import json, sys
ttl, file_m, etcd_m, fo_m = (float(x) for x in sys.argv[1:5])
print(json.dumps({
    "bench": "etcd_control_plane",
    "lease_ttl_s": ttl,
    "failover_s": [float(x) for x in sys.argv[6].split()],
    "failover_median_s": fo_m,
    "failover_vs_ttl": round(fo_m / ttl, 2),
    "publish_to_committed_file_s": file_m,
    "publish_to_committed_etcd_s": etcd_m,
    "publish_etcd_vs_file": round(etcd_m / file_m, 2),
    "coordinator_load": json.loads(sys.argv[5]),
}))
PY
