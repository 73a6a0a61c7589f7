#!/usr/bin/env bash
# Control-plane latency on loopback (docs/bench/control.md): the time from `weightcast
# publish` starting to every agent having COMMITTED the version (the agents' "committed vN" log
# lines), for a full version and then for one small delta step of it, with two weightcast
# binaries side by side in one run (rounds alternate between them). On loopback the bytes take
# milliseconds, so what is left is hashing, encoding and the control plane.
#
#   bench/control_latency.sh BEFORE_BINARY AFTER_BINARY [--agents 4] [--size 64MiB] [--rounds 3]
#
# Last line: one JSON object with the median times per binary and the ratios before/after.
# Processes run on 127.0.0.1 only and are killed by the EXIT trap.
set -euo pipefail

before=$1 after=$2
shift 2
agents=4 size=64MiB rounds=3
while (($#)); do
  case $1 in
    --agents) agents=$2 ;;
    --size) size=$2 ;;
    --rounds) rounds=$2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done

work=$(mktemp -d /tmp/wc_control_XXXXXX)
declare -a pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ -n ${KEEP:-} ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

log() { echo "[control] $*" >&2; }
(umask 077 && printf 'control-bench-%s\n' "$(od -An -tx8 -N16 /dev/urandom | tr -d ' \n')" \
  >"$work/secret")

# The checkpoints, once: a model and one RL-like step of it (~1% of the bytes change).
"$after" synth model -o "$work/ckpt/step-0000" --size "$size" --seed 7 >/dev/null
"$after" synth steps --from "$work/ckpt/step-0000" -o "$work/ckpt" --steps 1 --seed 7 >/dev/null

epoch_of() { date -u -d "$(sed 's/T/ /; s/Z$//' <<<"$1")" +%s.%N; }

# committed_at DIR V: the latest time an agent logged "committed vV"; fails while one has not.
committed_at() {
  local dir=$1 v=$2 i line latest=0 t
  for ((i = 1; i <= agents; i++)); do
    line=$(grep -m1 "agent: committed v$v\$" "$dir/a$i.log" 2>/dev/null) || return 1
    t=$(epoch_of "$(cut -d' ' -f1 <<<"$line")")
    latest=$(python3 -c "print(max($latest, $t))")
  done
  echo "$latest"
}

wait_for() {  # SECONDS COMMAND...
  local until=$((SECONDS + $1))
  shift
  until "$@"; do
    [[ $SECONDS -lt $until ]] || return 1
    sleep 0.02
  done
}

all_registered() {
  local i
  for ((i = 1; i <= agents; i++)); do
    grep -q "registered with the coordinator" "$1/a$i.log" 2>/dev/null || return 1
  done
}

# One round with binary $1: prints "FULL_S DELTA_S".
round() {
  local wc=$1 dir=$2 i
  # Runs in a subshell (process substitution): whatever it started dies with it, even on failure.
  trap 'for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done' EXIT
  mkdir -p "$dir"
  "$wc" coordinator --listen 127.0.0.1:0 --state-dir "$dir/coord" --address-file "$dir/coord.addr" \
    --secret-file "$work/secret" >"$dir/coord.log" 2>&1 &
  pids+=($!)
  wait_for 20 test -s "$dir/coord.addr" || { log "coordinator did not start"; return 1; }
  local coord
  coord=$(cat "$dir/coord.addr")
  for ((i = 1; i <= agents; i++)); do
    "$wc" agent --coordinator "$coord" --store "$dir/a$i" --channel policy --node-id $((100 + i)) \
      --secret-file "$work/secret" --log-format text >"$dir/a$i.log" 2>&1 &
    pids+=($!)
  done
  wait_for 20 all_registered "$dir" || { log "agents did not register"; return 1; }
  sleep 1.5  # every agent alive at the coordinator and in its steady heartbeat rhythm
  local v t0 t1 out=()
  for v in 1 2; do
    t0=$(date +%s.%N)
    "$wc" publish --coordinator "$coord" --store "$dir/pub" --channel policy \
      --dir "$work/ckpt/step-000$((v - 1))" --chunk-size 256KiB --secret-file "$work/secret" \
      --node-id 1 --until complete >"$dir/pub$v.log" 2>&1 &
    pids+=($!)
    local pub=$!
    wait_for 60 committed_at "$dir" "$v" >/dev/null || { log "v$v did not reach every agent"; return 1; }
    t1=$(committed_at "$dir" "$v")
    out+=("$(python3 -c "print(f'{$t1 - $t0:.3f}')")")
    wait "$pub" 2>/dev/null || true
  done
  grep -q "fetching delta payloads" "$dir/a1.log" || log "warning: v2 was not fetched as a delta"
  for i in "${pids[@]}"; do kill -TERM "$i" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
  echo "${out[*]}"
}

# Idle CPU while it runs: on a shared machine a saturated CPU measures itself.
vmstat 1 >"$work/vmstat.log" 2>/dev/null &
vmstat_pid=$!
declare -a full_b=() delta_b=() full_a=() delta_a=()
for ((r = 1; r <= rounds; r++)); do
  read -r f d < <(round "$before" "$work/r$r-before")
  full_b+=("$f") delta_b+=("$d")
  log "round $r before: full ${f}s delta ${d}s"
  read -r f d < <(round "$after" "$work/r$r-after")
  full_a+=("$f") delta_a+=("$d")
  log "round $r after:  full ${f}s delta ${d}s"
done

kill "$vmstat_pid" 2>/dev/null || true
idle=$(awk 'NR > 3 && $15 ~ /^[0-9]+$/ { s += $15; n++ } END { if (n) printf "%.1f", s / n; else print "null" }' \
  "$work/vmstat.log")

python3 - "${full_b[*]}" "${delta_b[*]}" "${full_a[*]}" "${delta_a[*]}" "$agents" "$size" "$idle" <<'EOF'
import json, statistics, sys
fb, db, fa, da = ([float(x) for x in a.split()] for a in sys.argv[1:5])
med = statistics.median
idle = None if sys.argv[7] == "null" else float(sys.argv[7])
print(json.dumps({
    "bench": "control_latency", "agents": int(sys.argv[5]), "size": sys.argv[6],
    "rounds": len(fb),
    "before_full_s": med(fb), "after_full_s": med(fa),
    "before_delta_s": med(db), "after_delta_s": med(da),
    "full_speedup": round(med(fb) / med(fa), 2), "delta_speedup": round(med(db) / med(da), 2),
    "before_delta_all_s": db, "after_delta_all_s": da, "idle_cpu_mean": idle,
}))
EOF
