#!/usr/bin/env bash
# Sharded publish on the emulated cluster (docs/sharded_publish.md): SIZE bytes
# published by W ranks on W source hosts (each rank its own SIZE/W-byte part, `publish --rank R
# --world W`) to AGENTS agents, next to the same bytes published by one source on one host, in
# one run on one network (bench/cluster/netns.sh: every host's link shaped to RATE both ways).
# For each: the time from the publishers' start until the slowest agent has committed the
# version, its ratio to S/B (S = SIZE, B = RATE), and each source host's upload (wire bytes
# its link sent, TCP/IP headers included) as a multiple of S.
#
#   sudo bash bench/sharded_netns.sh [--wc PATH] [--world W] [--agents N] [--rate R] [--size S]
#                                    [--keep DIR]
#     defaults: --world 4 --agents 12 --rate 100mbit --size 1GiB
#     --keep DIR: copy every node's log into DIR at the end (with WEIGHTCAST_SWARM_TRACE=MS in
#     the environment the nodes log their rates and scheduler state every MS ms; summarised by
#     bench/cluster/sharded_trace.py DIR)
# Hosts: 0..W-1 are the sources (host 0 also runs the coordinator), W..W+N-1 the agents.
# Everything runs under `timeout`; namespaces, processes and data are removed on every exit.
# Output: progress on stderr; the last line of stdout is one JSON object with the figures.
# Exit: 0 when both runs completed, 1 on failure, 2 on bad arguments, 77 without root.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=cluster/netns.sh
source "$here/cluster/netns.sh"

WC=$root/build/release/src/cli/weightcast
WORLD=4 AGENTS=12 RATE=100mbit SIZE=1GiB KEEP=
while [[ $# -gt 0 ]]; do
  case $1 in
    --wc) WC=$2; shift 2 ;;
    --world) WORLD=$2; shift 2 ;;
    --agents) AGENTS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --keep) KEEP=$2; shift 2 ;;
    *) sed -n '2,19p' "$0" >&2; exit 2 ;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "needs root (network namespaces)" >&2; exit 77; }
[[ -x $WC ]] || { echo "no weightcast binary at $WC" >&2; exit 2; }
[[ $WORLD =~ ^[0-9]+$ && $WORLD -ge 2 && $AGENTS =~ ^[0-9]+$ && $AGENTS -ge 1 ]] || exit 2
cluster_check_rate "$RATE" || exit 2
BYTES=$(numfmt --from=iec-i "${SIZE%B}" 2>/dev/null || numfmt --from=iec "${SIZE%B}" 2>/dev/null) || { echo "bad --size $SIZE" >&2; exit 2; }
RATE_BPS=$(awk -v r="$RATE" 'BEGIN { v = r + 0; if (r ~ /gbit/) v *= 1e9; else if (r ~ /mbit/) v *= 1e6; else v *= 1e3; print v / 8 }')
SB=$(awk -v s="$BYTES" -v b="$RATE_BPS" 'BEGIN { printf "%.3f", s / b }')
HOSTS=$((WORLD + AGENTS))
LIMIT=$(awk -v sb="$SB" 'BEGIN { printf "%d", 4 * sb + 90 }')  # per run
ID=shd$$
ID=${ID:0:8}
W=$(mktemp -d /dev/shm/wc-sharded.XXXXXX)
PIDS=()
log() { echo "[$(date +%T)] $*" >&2; }
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  cluster_down "$ID" >/dev/null 2>&1
  if [[ -n $KEEP ]]; then mkdir -p "$KEEP" && cp "$W"/*.log "$W"/*.t0 "$KEEP"/ 2>/dev/null; fi
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

log "cluster: $HOSTS hosts ($WORLD sources, $AGENTS agents) at $RATE; $SIZE; S/B = $SB s"
cluster_up "$ID" "$HOSTS" "$RATE" || { log "cluster_up failed"; exit 1; }

# The data: W parts of SIZE/W random bytes (one safetensors file each, tensors of their own
# names), and the same W files side by side in one directory for the single source.
/usr/bin/python3 - "$W/data" "$WORLD" "$BYTES" <<'EOF' || exit 1
import json, os, struct, sys
root, world, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(os.path.join(root, "single"))
for r in range(world):
    n = total // world - 4096  # leave room for the header
    header = json.dumps({f"rank{r}.w": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}})
    header = header.encode() + b" " * (-len(header) % 8)
    part = os.path.join(root, f"part{r}")
    os.makedirs(part)
    path = os.path.join(part, "model.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        left = n
        while left:
            block = os.urandom(min(left, 64 << 20))
            f.write(block)
            left -= len(block)
    os.link(path, os.path.join(root, "single", f"part{r}.safetensors"))
EOF
SECRET=$W/secret
(umask 077 && od -An -tx8 -N32 /dev/urandom | tr -d ' \n' >"$SECRET")
COORD=$(cluster_addr 0):7000
cluster_exec "$ID" 0 timeout $((2 * LIMIT + 60)) "$WC" coordinator --listen "$COORD" \
  --state-dir "$W/coord" --secret-file "$SECRET" --node-id 1 --part-timeout 120s \
  --address-file "$W/coord.addr" >"$W/coord.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [[ -s $W/coord.addr ]] && break; sleep 0.1; done
[[ -s $W/coord.addr ]] || { log "the coordinator did not start: $(tail -3 "$W/coord.log")"; exit 1; }

tx() { cluster_tx_bytes "$ID" "$1"; }

# run NAME CHANNEL: agents on hosts WORLD.. follow CHANNEL; then the sources publish; prints
# "seconds tx0 tx1 ..." (the source hosts' upload during the run).
run() {
  local name=$1 ch=$2 i start end t0 pubs=()
  local -a before=()
  for ((i = WORLD; i < HOSTS; i++)); do
    cluster_exec "$ID" "$i" timeout "$LIMIT" "$WC" agent --coordinator "$COORD" \
      --store "$W/$name/a$i" --channel "$ch" --listen "$(cluster_addr "$i"):7100" \
      --secret-file "$SECRET" --node-id $((1000 + i)) --log-format text >"$W/$name.a$i.log" 2>&1 &
    PIDS+=($!)
  done
  sleep 3  # every agent registered before the clock starts
  for ((i = 0; i < WORLD; i++)); do before[i]=$(tx "$i"); done
  t0=$(date +%s.%N)
  echo "$t0" >"$W/$name.t0"
  if [[ $name == sharded ]]; then
    for ((i = 0; i < WORLD; i++)); do
      cluster_exec "$ID" "$i" timeout "$LIMIT" "$WC" publish --coordinator "$COORD" \
        --store "$W/$name/pub$i" --channel "$ch" --dir "$W/data/part$i" --rank "$i" \
        --world "$WORLD" --writer-id bench --listen "$(cluster_addr "$i"):7200" \
        --secret-file "$SECRET" --node-id $((100 + i)) --until complete --log-format text \
        >"$W/$name.pub$i.log" 2>&1 &
      pubs+=($!)
    done
  else
    cluster_exec "$ID" 0 timeout "$LIMIT" "$WC" publish --coordinator "$COORD" \
      --store "$W/$name/pub0" --channel "$ch" --dir "$W/data/single" \
      --listen "$(cluster_addr 0):7201" --secret-file "$SECRET" --node-id 200 \
      --until complete --log-format text >"$W/$name.pub0.log" 2>&1 &
    pubs+=($!)
  fi
  PIDS+=("${pubs[@]}")
  local rc=0 p
  for p in "${pubs[@]}"; do wait "$p" || rc=1; done
  ((rc == 0)) || { log "$name: a publisher failed: $(tail -2 "$W/$name.pub0.log")"; return 1; }
  # Where the publishers' time went (prepare: hashing, encoding, import; total: until the
  # version was assembled and seeding began).
  for ((i = 0; i < ${#pubs[@]}; i++)); do
    log "$name publisher $i: $(grep -o 'published.*' "$W/$name.pub$i.log" | grep -o 'prepare_s=[0-9.]*\|total_s=[0-9.]*\|bytes=[0-9]*' | tr '\n' ' ')"
  done
  log "$name: first agent commit $(grep -h -m1 'agent: committed v' "$W/$name".a*.log | cut -d' ' -f1 | sort | head -1), t0 $(date -u -d "@$t0" +%T.%N)"
  # The slowest agent's commit, from its own log line's timestamp.
  end=0
  for ((i = WORLD; i < HOSTS; i++)); do
    local line
    line=$(grep -m1 "agent: committed v" "$W/$name.a$i.log") || { log "agent $i did not commit"; return 1; }
    t=$(date -u -d "$(cut -d' ' -f1 <<<"$line" | sed 's/T/ /; s/Z$//')" +%s.%N)
    end=$(awk -v a="$end" -v b="$t" 'BEGIN { print (b > a) ? b : a }')
  done
  local out
  out=$(awk -v a="$t0" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
  for ((i = 0; i < WORLD; i++)); do out+=" $(($(tx "$i") - before[i]))"; done
  # Every agent's files are the sources' bytes.
  for ((i = WORLD; i < HOSTS; i++)); do
    local d="$W/$name/a$i/$ch/current" f r
    if [[ $name == sharded ]]; then
      for ((r = 0; r < WORLD; r++)); do
        f="$d/$(printf 'rank-%05d-of-%05d' "$r" "$WORLD")/model.safetensors"
        cmp -s "$f" "$W/data/part$r/model.safetensors" || { log "agent $i: part $r differs"; return 1; }
      done
    else
      for ((r = 0; r < WORLD; r++)); do
        cmp -s "$d/part$r.safetensors" "$W/data/part$r/model.safetensors" || { log "agent $i differs"; return 1; }
      done
    fi
  done
  # Stop this run's agents (their pids are the last AGENTS + publishers in PIDS).
  for ((i = WORLD; i < HOSTS; i++)); do
    local pids
    pids=$(ip netns pids "$(cluster_ns "$ID" "$i")" 2>/dev/null)
    # shellcheck disable=SC2086
    [[ -n $pids ]] && kill -TERM $pids 2>/dev/null
  done
  sleep 1
  rm -rf "${W:?}/$name"
  echo "$out"
}

log "sharded: $WORLD ranks -> $AGENTS agents"
SHARDED=$(run sharded shard) || exit 1
log "sharded: $SHARDED"
log "single: 1 source -> $AGENTS agents"
SINGLE=$(run single single) || exit 1
log "single: $SINGLE"

/usr/bin/python3 - "$SHARDED" "$SINGLE" "$BYTES" "$SB" "$RATE" "$WORLD" "$AGENTS" <<'EOF'
import json, sys
sharded, single = sys.argv[1].split(), sys.argv[2].split()
size, sb = int(sys.argv[3]), float(sys.argv[4])
world, agents = int(sys.argv[6]), int(sys.argv[7])
def figures(run, sources):
    t, tx = float(run[0]), [int(x) for x in run[1:1 + sources]]
    return {"seconds": t, "x_s_over_b": round(t / sb, 3),
            "source_upload_bytes": tx, "source_upload_over_s": [round(x / size, 3) for x in tx]}
out = {"bench": "sharded_netns", "size_bytes": size, "rate": sys.argv[5], "s_over_b": sb,
       "world": world, "agents": agents,
       "sharded": figures(sharded, world), "single": figures(single, 1)}
out["time_ratio_sharded_over_single"] = round(out["sharded"]["seconds"] / out["single"]["seconds"], 3)
print(f"sharded ({world} sources): {out['sharded']['seconds']:.1f} s = "
      f"{out['sharded']['x_s_over_b']}x S/B, upload per source (x S) {out['sharded']['source_upload_over_s']}")
print(f"single source:          {out['single']['seconds']:.1f} s = "
      f"{out['single']['x_s_over_b']}x S/B, upload (x S) {out['single']['source_upload_over_s']}")
print(json.dumps(out))
EOF
