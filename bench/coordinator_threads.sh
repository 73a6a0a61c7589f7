#!/usr/bin/env bash
# Threads of a coordinator against its connections: for each N in COUNTS and each
# weightcast binary given, one `weightcast coordinator` on loopback and one client process that
# holds N authenticated connections to it (bench_coordinator_clients: GetStatus answered on
# each); the coordinator's Threads: (/proc/PID/status) is read once all N are connected. A
# coordinator with a thread per connection shows N more; one that serves them from an event loop
# shows a constant.
#
#   bash bench/coordinator_threads.sh [before-weightcast] [after-weightcast] [counts=10,100,300]
#
# Every run is bounded (60 s to connect, then the processes are stopped). Last line: one JSON
# object.
set -euo pipefail

before=${1:-/work/main/build/release/src/cli/weightcast}
after=${2:-build/release/src/cli/weightcast}
IFS=, read -r -a counts <<<"${3:-10,100,300}"
clients_bin=${CLIENTS_BIN:-build/release/bench/bench_coordinator_clients}
for b in "$before" "$after" "$clients_bin"; do
  [[ -x $b ]] || { echo "not found: $b (build a Release tree)" >&2; exit 1; }
done

work="$(mktemp -d)"
coord_pid=""
client_pid=""
cleanup() {
  [[ -n $client_pid ]] && kill -9 "$client_pid" 2>/dev/null || true
  [[ -n $coord_pid ]] && kill -9 "$coord_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
new_secret "$work/secret"

threads_with() {  # threads_with BINARY N -> prints the coordinator's threads with N connected
  local bin=$1 n=$2 d
  d="$(mktemp -d -p "$work")"
  # Not under timeout(1): $! must be the coordinator itself (the EXIT trap ends it).
  "$bin" coordinator --listen 127.0.0.1:0 --state-dir "$d/coord" \
    --address-file "$d/coord.addr" --secret-file "$work/secret" 2>"$d/coord.log" &
  coord_pid=$!
  wait_for 20 test -s "$d/coord.addr"
  mkfifo "$d/hold"
  timeout 120 "$clients_bin" "$(cat "$d/coord.addr")" "$work/secret" --clients "$n" --hold-s 100 \
    <"$d/hold" >"$d/clients.out" 2>"$d/clients.err" &
  client_pid=$!
  exec 3>"$d/hold"
  if ! wait_for 60 grep -q "^ready $n\$" "$d/clients.out"; then
    echo "clients did not connect: $(cat "$d/clients.err")" >&2
    exit 1
  fi
  sleep 0.5
  local threads
  threads=$(awk '/^Threads:/ {print $2}' "/proc/$coord_pid/status")
  exec 3>&-
  wait "$client_pid" || { echo "clients failed: $(tail -2 "$d/clients.out")" >&2; exit 1; }
  client_pid=""
  kill "$coord_pid"; wait "$coord_pid" 2>/dev/null || true
  coord_pid=""
  echo "$threads"
}

list="${counts[*]}"
json="{\"counts\": [${list// /, }]"
for side in before after; do
  bin=${!side}
  row=()
  for n in "${counts[@]}"; do
    t=$(threads_with "$bin" "$n")
    echo "$side: $n connections -> coordinator threads $t" >&2
    row+=("$t")
  done
  list="${row[*]}"
  json+=", \"${side}_threads\": [${list// /, }]"
done
echo "$json}"
