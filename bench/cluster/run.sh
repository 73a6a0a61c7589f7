#!/usr/bin/env bash
# The emulated-cluster benchmark: N hosts in network namespaces on one bridge, every
# link shaped to RATE in both directions (bench/cluster/netns.sh), and in one run, on the same
# network, the same synth version of SIZE bytes distributed from host 0 to hosts 1..N-1 by
#   http        a threaded HTTP server on host 0, one client per host (each file once)
#   libtorrent  python3-libtorrent, tuned (bench/cluster/torrent.py): one seed, N-1 peers
#   weightcast  coordinator + publisher on host 0, one agent per host; then a ~1%-changed step
#               of the version published as a delta (agents keep v1, fetch only the delta)
# For each: the time of the slowest host from the start signal, its ratio to the lower bound
# S/B (S = version bytes, B = RATE), bytes sent by the source's link (wire bytes, headers
# included), and the idle CPU `vmstat 1` saw meanwhile (a saturated machine measures itself).
# Everything runs under `timeout`; namespaces, processes and data are removed on every exit.
#
#   sudo bash bench/cluster/run.sh N RATE SIZE [options]
#     e.g. sudo bash bench/cluster/run.sh 16 50mbit 128MiB
#   --wc PATH          weightcast binary (default build/release/src/cli/weightcast, then
#                      build/cluster/src/cli/weightcast)
#   --systems LIST     comma list of http,libtorrent,weightcast (default all three)
#   --no-delta         skip the weightcast delta step
#   --fault KIND       none (default) | kill | linkdown | slow, applied to host N-1 in every
#                      system's run: kill its process FAULT_AT s after the start; take its link
#                      down for DOWN_FOR s at FAULT_AT; or shape its link to RATE/10 throughout
#   --fault-at S       default 0.4 x S/B;  --down-for S  default 5
#   --delay D          one-way delay added to each host's upload (needs netem)
#   --chunk-size C     weightcast publish --chunk-size (default: the publisher's, auto: 128KiB for 128MiB)
#   --degree D         weightcast coordinator --degree: peers per agent (default: its own, 24)
#   --commit-policy P  weightcast coordinator --commit-policy (default: its own, all: the fleet
#                      commits together, so a slow host holds everyone's commit; quorum:0.9
#                      lets 14 of 15 agents commit without it)
#   --heartbeat-timeout T  weightcast coordinator --heartbeat-timeout (default: its own, 3s;
#                      nodes heartbeat 3x as often, which is how soon an agent hears of a version)
#   --certificates     weightcast in certificate mode (docs/security.md): a CA made for the run,
#                      every node its own certificate, every connection mutual TLS
#   --lr X             synth step learning rate (default 5e-7: ~1% of elements change)
#   --work DIR         where data goes (default /dev/shm: the disk of a shared VM is not the
#                      subject; every system gets the same)
#   --keep             keep the work directory (logs) after the run
#   --trace MS         weightcast nodes log a line of rates and scheduler state every MS ms
#                      (WEIGHTCAST_SWARM_TRACE); bench/cluster/trace.py summarises a kept run
#   --check-seconds S  length of the iperf3 check of the shaping (default 4)
#   --plot-dir DIR     per system DIR/<system>/completion.csv and progress.csv (the columns of
#                      `weightcast sim --out`, from each host's finish time and upload) and, with
#                      gnuplot, progress.png drawn by src/sim/progress_plot.gnuplot like `sim
#                      --plot` (default build/bench-cluster under the repository)
# Output: progress on stderr; a table, then one JSON object as the last line, on stdout.
# Exit: 0 when every system's run completed (goals are reported, not enforced), 1 on failure,
# 2 on bad arguments, 77 when network namespaces cannot be created here.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=netns.sh
source "$here/netns.sh"
PY=/usr/bin/python3  # Debian's python: python3-libtorrent is installed for it

usage() { sed -n '2,47p' "$0" >&2; exit 2; }
[[ $# -ge 3 ]] || usage
N=$1 RATE=$2 SIZE=$3
shift 3
WC=""
SYSTEMS=http,libtorrent,weightcast
DELTA=1
FAULT=none
FAULT_AT=""
DOWN_FOR=5
DELAY=""
LR=5e-7
WC_CHUNK_SIZE=""
WC_HEARTBEAT_TIMEOUT=""
WC_DEGREE=""
WC_COMMIT_POLICY=""
WC_TRACE=""
WC_CERTS=0
WORK_ROOT=/dev/shm
KEEP=0
CHECK_SECONDS=4
PLOT_DIR=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --wc) WC=$2; shift 2 ;;
    --systems) SYSTEMS=$2; shift 2 ;;
    --no-delta) DELTA=0; shift ;;
    --fault) FAULT=$2; shift 2 ;;
    --fault-at) FAULT_AT=$2; shift 2 ;;
    --down-for) DOWN_FOR=$2; shift 2 ;;
    --delay) DELAY=$2; shift 2 ;;
    --lr) LR=$2; shift 2 ;;
    --chunk-size) WC_CHUNK_SIZE=$2; shift 2 ;;
    --heartbeat-timeout) WC_HEARTBEAT_TIMEOUT=$2; shift 2 ;;
    --degree) WC_DEGREE=$2; shift 2 ;;
    --commit-policy) WC_COMMIT_POLICY=$2; shift 2 ;;
    --trace) WC_TRACE=$2; shift 2 ;;
    --certificates) WC_CERTS=1; shift ;;
    --work) WORK_ROOT=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --check-seconds) CHECK_SECONDS=$2; shift 2 ;;
    --plot-dir) PLOT_DIR=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "unknown option: $1" >&2; usage ;;
  esac
done
[[ $N =~ ^[0-9]+$ && $N -ge 2 && $N -le 64 ]] || { echo "N must be 2..64" >&2; exit 2; }
cluster_check_rate "$RATE" || exit 2
[[ -z $DELAY ]] || cluster_check_delay "$DELAY" || exit 2
[[ $FAULT =~ ^(none|kill|linkdown|slow)$ ]] || { echo "--fault: none|kill|linkdown|slow" >&2; exit 2; }
[[ -z $WC_CHUNK_SIZE || $WC_CHUNK_SIZE =~ ^[0-9]+[KMG]i?B$ ]] || { echo "--chunk-size like 2MiB" >&2; exit 2; }
[[ -z $WC_HEARTBEAT_TIMEOUT || $WC_HEARTBEAT_TIMEOUT =~ ^[0-9]+(ms|s)$ ]] || { echo "--heartbeat-timeout like 600ms" >&2; exit 2; }
[[ -z $WC_TRACE || $WC_TRACE =~ ^[1-9][0-9]*$ ]] || { echo "--trace: milliseconds" >&2; exit 2; }
[[ $CHECK_SECONDS =~ ^[1-9][0-9]?$ ]] || { echo "--check-seconds: 1..99" >&2; exit 2; }
[[ $DOWN_FOR =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "--down-for: seconds" >&2; exit 2; }
[[ -z $FAULT_AT || $FAULT_AT =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "--fault-at: seconds" >&2; exit 2; }
for s in ${SYSTEMS//,/ }; do
  [[ $s =~ ^(http|libtorrent|weightcast)$ ]] || { echo "--systems: unknown system $s" >&2; exit 2; }
done
has_system() { [[ ,$SYSTEMS, == *,$1,* ]]; }
if [[ -z $WC ]]; then
  for c in "$root/build/release/src/cli/weightcast" "$root/build/cluster/src/cli/weightcast"; do
    [[ -x $c ]] && { WC=$c; break; }
  done
fi
[[ -n $WC && -x $WC ]] || { echo "weightcast binary not found (--wc PATH)" >&2; exit 2; }
WC=$(readlink -f "$WC")
if has_system weightcast; then
  subcommands=$("$WC" --help 2>/dev/null | awk '/^Subcommands:/ { on = 1; next } on { print $1 }')
  for c in coordinator agent publish status; do
    grep -qx "$c" <<<"$subcommands" ||
      { echo "$WC has no '$c' subcommand (--systems http,libtorrent runs without it)" >&2; exit 2; }
  done
fi
[[ -d $WORK_ROOT ]] || { echo "--work $WORK_ROOT is not a directory" >&2; exit 2; }
command -v iperf3 >/dev/null || { echo "iperf3 is not installed" >&2; exit 2; }
if has_system libtorrent && ! $PY -c 'import libtorrent' 2>/dev/null; then
  echo "python3-libtorrent is not installed for $PY" >&2; exit 2
fi

if [[ $(id -u) -ne 0 ]]; then echo "SKIP: needs root for network namespaces"; exit 77; fi
# `ip netns exec` remounts /sys; in a chroot (/ not a mount point) it cannot.
if ! mountpoint -q / 2>/dev/null; then echo "SKIP: / is not a mount point (a chroot?)"; exit 77; fi

ID=c$$
ID=${ID:0:8}
W=$WORK_ROOT/wcc-$ID
pids=()
vmstat_pid=""
log() { echo "[cluster $(date -u +%T)] $*" >&2; }
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  local p
  for p in "${pids[@]:-}"; do [[ -n $p ]] && kill "$p" 2>/dev/null; done
  [[ -n $vmstat_pid ]] && kill "$vmstat_pid" 2>/dev/null
  cluster_down "$ID"
  if [[ $KEEP -eq 1 ]]; then log "kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

mkdir -p "$W/data" "$W/ph"
if ! ip netns add "wcc${ID}probe" 2>/dev/null; then echo "SKIP: cannot create network namespaces"; exit 77; fi
if ! ip netns exec "wcc${ID}probe" true 2>/dev/null; then
  ip netns del "wcc${ID}probe"; echo "SKIP: cannot enter network namespaces here"; exit 77
fi
ip netns del "wcc${ID}probe"

# ---- data: version 1 and a ~1%-changed step of it (not timed) -------------------------------
log "synth $SIZE and one step (lr $LR)"
"$WC" synth model -o "$W/data/v1" --size "$SIZE" --seed 11 >"$W/synth_model.out" ||
  { echo "synth model failed" >&2; exit 1; }
if has_system weightcast && [[ $DELTA -eq 1 ]]; then
  "$WC" synth steps --from "$W/data/v1" -o "$W/data/steps" --steps 1 --lr "$LR" --seed 11 |
    tail -n 1 >"$W/synth_steps.json" || { echo "synth steps failed" >&2; exit 1; }
  mv "$W/data/steps/step-0001" "$W/data/v2" && rmdir "$W/data/steps"
  # The codec's own account of the step: what a delta of it weighs (the compression ratio).
  "$WC" diff "$W/data/v1" "$W/data/v2" -o "$W/data/delta" | tail -n 1 >"$W/diff.json" ||
    { echo "diff failed" >&2; exit 1; }
  rm -rf "$W/data/delta"
fi
mapfile -t FILES < <(cd "$W/data/v1" && find . -type f -printf '%P\n' | sort)
S=$(cd "$W/data/v1" && cat "${FILES[@]}" | wc -c)
BOUND=$(awk -v s="$S" -v r="$RATE" 'BEGIN { v = r + 0; if (r ~ /gbit/) v *= 1e9; else if (r ~ /mbit/) v *= 1e6; else v *= 1e3; printf "%.3f", s * 8 / v }')
[[ -n $FAULT_AT ]] || FAULT_AT=$(awk -v b="$BOUND" 'BEGIN { printf "%.1f", 0.4 * b }')
FH=$((N - 1))  # the faulted host
SLOW_RATE=$(awk -v r="$RATE" 'BEGIN { v = r + 0; u = r; sub(/^[0-9.]+/, "", u); printf "%g%s", v / 10, u }')
log "S = $S bytes in ${#FILES[@]} files; S/B = $BOUND s at $RATE; $N hosts; fault $FAULT"

# ---- network --------------------------------------------------------------------------------
log "cluster $ID: $N hosts at $RATE${DELAY:+, delay $DELAY}"
cluster_up "$ID" "$N" "$RATE" "$DELAY" || { echo "cluster setup failed" >&2; exit 1; }
check_out=$(cluster_check "$ID" 1 0 "$RATE" "$CHECK_SECONDS")
check_ok=$?
log "$check_out"
printf '%s\n' "$check_out" >"$W/iperf3.txt"
IPERF_MBIT=$(sed -n 's/.*: \([0-9.]*\) Mbit.*/\1/p' "$W/iperf3.txt" | head -1)
[[ $check_ok -eq 0 ]] || log "WARNING: iperf3 between two hosts is off RATE by more than 10%"

TZ=UTC vmstat -n -t 1 >"$W/vmstat.log" &
vmstat_pid=$!

# ---- phase helpers --------------------------------------------------------------------------
PH=""
T0=""
FAULT_PID=""
phase_begin() {  # NAME SYSTEM
  PH=$W/ph/$1
  mkdir -p "$PH"
  printf '%s\n' "$2" >"$PH/system"
  local i
  for ((i = 0; i < N; i++)); do cluster_tx_bytes "$ID" "$i"; done >"$PH/tx_before"
  if [[ $FAULT == slow ]]; then cluster_rate "$ID" "$FH" "$SLOW_RATE"; fi
}
# Waits for every host's ready file (COUNT of them), then writes the go file; sets T0.
phase_go() {  # COUNT TIMEOUT
  local count=$1 until=$((SECONDS + $2))
  while [[ $(find "$PH" -maxdepth 1 -name 'ready.*' | wc -l) -lt $count ]]; do
    [[ $SECONDS -lt $until ]] || { log "not all hosts got ready"; return 1; }
    sleep 0.1
  done
  T0=$(date +%s.%N)
  printf '{"t0": %s}\n' "$T0" >"$PH/go.tmp" && mv "$PH/go.tmp" "$PH/go"
  fault_arm
}
# Starts the fault of the run in the background, relative to T0.
fault_arm() {
  case $FAULT in
    kill)
      (sleep "$FAULT_AT"
        printf '%s\n' "$(date +%s.%N)" >"$PH/fault_time"
        p=$(ip netns pids "$(cluster_ns "$ID" "$FH")")
        # shellcheck disable=SC2086  # a list of pids
        [[ -n $p ]] && kill -KILL $p) &
      FAULT_PID=$!
      pids+=($!) ;;
    linkdown)
      (sleep "$FAULT_AT"
        printf '%s\n' "$(date +%s.%N)" >"$PH/fault_time"
        cluster_link "$ID" "$FH" down
        sleep "$DOWN_FOR"
        cluster_link "$ID" "$FH" up) &
      FAULT_PID=$!
      pids+=($!) ;;
  esac
}
# Waits until every host expected to finish has a result file; returns 1 on timeout.
phase_wait() {  # FIRST_HOST TIMEOUT_S
  local first=$1 until=$((SECONDS + $2)) i missing
  while :; do
    missing=0
    for ((i = first; i < N; i++)); do
      [[ $FAULT == kill && $i -eq $FH ]] && continue
      [[ -e $PH/res.$i.json ]] || missing=$((missing + 1))
    done
    [[ $missing -eq 0 ]] && { date +%s.%N >"$PH/t_end"; return 0; }
    if [[ $SECONDS -ge $until ]]; then
      date +%s.%N >"$PH/t_end"; echo "$missing" >"$PH/timed_out"
      log "$(basename "$PH"): $missing host(s) did not finish in $2 s"
      return 1
    fi
    sleep 0.05
  done
}
phase_end() {
  local i
  # A fault still pending must not fire into the next system's run.
  [[ -n $FAULT_PID ]] && kill "$FAULT_PID" 2>/dev/null
  FAULT_PID=""
  for ((i = 0; i < N; i++)); do cluster_tx_bytes "$ID" "$i"; done >"$PH/tx_after"
  if [[ $FAULT == slow ]]; then cluster_rate "$ID" "$FH" "$RATE"; fi
  [[ $FAULT == linkdown ]] && cluster_link "$ID" "$FH" up
  # Stop whatever still runs in the hosts before the next system starts (except the process
  # groups in KEEP_PGIDS: weightcast's coordinator and agents, which serve both of its steps).
  kill_hosts TERM
  sleep 0.3
  kill_hosts KILL
  return 0
}
KEEP_PGIDS=""
kill_hosts() {  # SIGNAL
  local i p
  for ((i = 0; i < N; i++)); do
    for p in $(ip netns pids "$(cluster_ns "$ID" "$i")"); do
      [[ -n $KEEP_PGIDS && " $KEEP_PGIDS " == *" $(ps -o pgid= -p "$p" 2>/dev/null | tr -d ' ') "* ]] && continue
      kill "-$1" "$p" 2>/dev/null
    done
  done
}
# Every file of DIR equals the source's version directory SRC (after the timing).
same_files() {  # SRC DIR
  local f
  for f in "${FILES[@]}"; do cmp -s "$1/$f" "$2/$f" || return 1; done
}
verify_hosts() {  # SRC PATTERN-with-%d  (e.g. $PH/h%d/v1)
  local i bad=0
  for ((i = 1; i < N; i++)); do
    [[ $FAULT == kill && $i -eq $FH ]] && continue
    # shellcheck disable=SC2059
    same_files "$1" "$(printf "$2" "$i")" || bad=$((bad + 1))
  done
  echo "$bad" >"$PH/mismatched"
  [[ $bad -eq 0 ]] || log "$(basename "$PH"): $bad host(s) hold files that differ from the source"
}

SRC_ADDR=$(cluster_addr 0)
LONG_TIMEOUT=$(awk -v b="$BOUND" -v n="$N" 'BEGIN { printf "%d", 1.5 * (n - 1) * b + 60 }')
SHORT_TIMEOUT=$(awk -v b="$BOUND" 'BEGIN { printf "%d", 8 * b + 60 }')
if [[ $FAULT == slow ]]; then  # the slowed host needs 10 x S/B on its own
  SHORT_TIMEOUT=$(awk -v b="$BOUND" 'BEGIN { printf "%d", 14 * b + 60 }')
  [[ $LONG_TIMEOUT -ge $SHORT_TIMEOUT ]] || LONG_TIMEOUT=$SHORT_TIMEOUT
fi
failed=0

# ---- http -----------------------------------------------------------------------------------
if has_system http; then
  log "http: server on $SRC_ADDR, $((N - 1)) clients (timeout $LONG_TIMEOUT s)"
  phase_begin http http
  cluster_exec "$ID" 0 timeout $((LONG_TIMEOUT + 30)) $PY "$here/http_bench.py" serve \
    --dir "$W/data" --listen "$SRC_ADDR:8080" --ready "$PH/ready.0" --stop "$PH/stop" \
    --timeout $((LONG_TIMEOUT + 20)) 2>"$PH/log.0" &
  pids+=($!)
  file_args=()
  for f in "${FILES[@]}"; do file_args+=(--file "v1/$f"); done
  for ((i = 1; i < N; i++)); do
    cluster_exec "$ID" "$i" timeout $((LONG_TIMEOUT + 30)) $PY "$here/http_bench.py" fetch \
      --url-base "http://$SRC_ADDR:8080" "${file_args[@]}" --out "$PH/h$i" \
      --ready "$PH/ready.$i" --go "$PH/go" --result "$PH/res.$i.json" \
      --timeout $((LONG_TIMEOUT + 20)) 2>"$PH/log.$i" &
    pids+=($!)
  done
  phase_go "$N" 30 && phase_wait 1 "$LONG_TIMEOUT" || failed=1
  touch "$PH/stop"
  phase_end
  verify_hosts "$W/data/v1" "$PH/h%d/v1"
  rm -rf "$PH"/h*
fi

# ---- libtorrent -----------------------------------------------------------------------------
if has_system libtorrent; then
  $PY "$here/torrent.py" make "$W/data/v1" "$W/v1.torrent" >&2 || { echo "torrent make failed" >&2; exit 1; }
  log "libtorrent: seed on $SRC_ADDR, $((N - 1)) peers (timeout $SHORT_TIMEOUT s)"
  phase_begin libtorrent libtorrent
  peer_args=()
  for ((i = 0; i < N; i++)); do peer_args+=(--peer "$(cluster_addr "$i"):6881"); done
  for ((i = 0; i < N; i++)); do
    if [[ $i -eq 0 ]]; then save=$W/data; seed=(--seed); else save=$PH/h$i; seed=(); mkdir -p "$save"; fi
    cluster_exec "$ID" "$i" timeout $((SHORT_TIMEOUT + 30)) $PY "$here/torrent.py" run \
      --torrent "$W/v1.torrent" --save "$save" --listen "$(cluster_addr "$i"):6881" \
      "${peer_args[@]}" "${seed[@]}" --ready "$PH/ready.$i" --go "$PH/go" --stop "$PH/stop" \
      --result "$PH/res.$i.json" --timeout $((SHORT_TIMEOUT + 20)) 2>"$PH/log.$i" &
    pids+=($!)
  done
  phase_go "$N" 30 && phase_wait 1 "$SHORT_TIMEOUT" || failed=1
  touch "$PH/stop"
  sleep 1  # the hosts rewrite their results with the final upload counters
  phase_end
  verify_hosts "$W/data/v1" "$PH/h%d/v1"
  rm -rf "$PH"/h*
fi

# ---- weightcast -----------------------------------------------------------------------------
if has_system weightcast; then
  source "$here/weightcast_phase.sh"
  wc_phases || failed=1
fi

kill "$vmstat_pid" 2>/dev/null
vmstat_pid=""
cat >"$W/params.json" <<EOF
{"cluster_id": "$ID", "hosts": $N, "rate": "$RATE", "size": "$SIZE", "bytes": $S, "files": ${#FILES[@]},
 "bound_s": $BOUND, "fault": "$FAULT", "fault_host": $FH, "fault_at_s": $FAULT_AT,
 "down_for_s": $DOWN_FOR, "chunk_size": "${WC_CHUNK_SIZE:-default}",
 "heartbeat_timeout": "${WC_HEARTBEAT_TIMEOUT:-default}", "degree": "${WC_DEGREE:-default}", "commit_policy": "${WC_COMMIT_POLICY:-default}", "slow_rate": "$SLOW_RATE", "delay": "$DELAY", "lr": "$LR",
 "iperf3_mbit": ${IPERF_MBIT:-0},
 "iperf3_ok": $([[ $check_ok -eq 0 ]] && echo true || echo false)}
EOF
$PY "$here/report.py" "$W" "${PLOT_DIR:-$root/build/bench-cluster}" || failed=1
exit $failed
