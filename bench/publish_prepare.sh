#!/usr/bin/env bash
# The publisher's cost of a delta step, two binaries side by side: a synth model (default
# 128 MiB, one safetensors file) and one ~1%-changed training step of it; per round and binary,
# a fresh coordinator on 127.0.0.1 and a fresh publisher store, `publish --dir v1` (full), then
# `publish --dir v2` (the delta against v1), each stopped with SIGTERM once it logs `published`.
# Measured for the v2 process: prepare_s (what `publish` logs: version number, manifest, delta,
# import, signature), the wall time from exec to the `published` line, and the CPU seconds the
# process used (user + sys, all threads). Rounds alternate OLD/NEW.
#
#   bash bench/publish_prepare.sh OLD_WEIGHTCAST NEW_WEIGHTCAST [rounds=5] [size=128MiB]
#       [chunk=256KiB]
#
# WORKDIR (default /dev/shm, where bench/cluster/run.sh keeps its stores: checkpoint and store on
# one tmpfs, so `--import auto` hard-links) says where data goes; IMPORT=copy forces copies.
# Last line: one JSON object; *_ratio is OLD / NEW (above 1: NEW is cheaper).
set -euo pipefail

old=${1:?usage: publish_prepare.sh OLD NEW [rounds] [size] [chunk]}
new=${2:?usage: publish_prepare.sh OLD NEW [rounds] [size] [chunk]}
rounds=${3:-5}
size=${4:-128MiB}
chunk=${5:-256KiB}
import=${IMPORT:-auto}
for b in "$old" "$new"; do
  [[ -x $b ]] || { echo "not an executable: $b" >&2; exit 1; }
done
dir=$(mktemp -d "${WORKDIR:-/dev/shm}/wc_publish_bench.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

(umask 077 && printf 'publish-bench-%s\n' "$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')" \
  >"$dir/secret")
echo "synth $size and one step into $dir"
"$new" synth model -o "$dir/v1" --size "$size" --seed 11 >/dev/null
"$new" synth steps --from "$dir/v1" -o "$dir/steps" --steps 1 --lr 5e-7 --seed 11 |
  tail -n 1 >"$dir/steps.json"
mv "$dir/steps/step-0001" "$dir/v2"

# publish BIN TAG CKPT: runs one publisher until it logs `published`, then SIGTERM; prints
# "prepare_s wall_s cpu_s".
publish() {
  local bin=$1 tag=$2 ckpt=$3 log=$dir/$2.log t0 pid until
  : >"$log"
  t0=$(date +%s.%N)
  "$bin" publish --coordinator "$(cat "$dir/coord.addr")" \
    --store "$dir/store" --channel bench --dir "$ckpt" --secret-file "$dir/secret" \
    --until never --chunk-size "$chunk" --import "$import" --log-format text 2>"$log" >/dev/null &
  pid=$!
  pids+=("$pid")
  until=$((SECONDS + 60))
  while ! grep -q ' published ' "$log"; do
    kill -0 "$pid" 2>/dev/null || { echo "publish exited: $(tail -3 "$log")" >&2; return 1; }
    [[ $SECONDS -lt $until ]] || { echo "publish did not finish" >&2; return 1; }
    sleep 0.005
  done
  local t1 ticks
  t1=$(date +%s.%N)
  # utime + stime of every thread, in clock ticks (fields 14 and 15; the name may hold spaces).
  ticks=$(sed 's/.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}')
  kill -TERM "$pid"
  wait "$pid" || true
  local prep
  prep=$(grep ' published ' "$log" | sed -n 's/.*prepare_s=\([0-9.e-]*\).*/\1/p')
  echo "$prep $(echo "$t1 - $t0" | bc) $(echo "scale=3; $ticks / $(getconf CLK_TCK)" | bc)"
}

# round BIN TAG: fresh coordinator and store, v1 then v2; appends v2's figures to $dir/TAG.res.
round() {
  local bin=$1 tag=$2
  rm -rf "$dir/store" "$dir/coord" "$dir/coord.addr"
  "$bin" coordinator --listen 127.0.0.1:0 --state-dir "$dir/coord" --secret-file "$dir/secret" \
    --address-file "$dir/coord.addr" 2>"$dir/coord.log" &
  local coord=$!
  pids+=("$coord")
  local until=$((SECONDS + 10))
  while [[ ! -s $dir/coord.addr ]]; do
    [[ $SECONDS -lt $until ]] || { echo "coordinator did not start" >&2; return 1; }
    sleep 0.02
  done
  publish "$bin" "$tag-v1" "$dir/v1" >/dev/null
  publish "$bin" "$tag-v2" "$dir/v2" | tee -a "$dir/$tag.res"
  grep -q 'delta=true' "$dir/$tag-v2.log" || { echo "$tag: v2 was not a delta" >&2; return 1; }
  kill -TERM "$coord"
  wait "$coord" || true
}

for ((r = 1; r <= rounds; r++)); do
  echo "round $r: old $(round "$old" old)  new $(round "$new" new)  (prepare_s wall_s cpu_s)"
done

python3 - "$dir/old.res" "$dir/new.res" "$size" "$chunk" "$import" "$(cat "$dir/steps.json")" <<'EOF'
import json, statistics, sys
def load(p):
    rows = [list(map(float, l.split())) for l in open(p) if l.strip()]
    return [statistics.median(c) for c in zip(*rows)], len(rows)
(op, ow, oc), n = load(sys.argv[1])
(np_, nw, nc), _ = load(sys.argv[2])
step = json.loads(sys.argv[6])
print(json.dumps({
    "bench": "publish_prepare", "size": sys.argv[3], "chunk_size": sys.argv[4],
    "import": sys.argv[5], "rounds": n, "changed_fraction": step.get("mean_changed_fraction"),
    "old_prepare_s": round(op, 4), "new_prepare_s": round(np_, 4),
    "prepare_ratio": round(op / np_, 2),
    "old_wall_to_published_s": round(ow, 4), "new_wall_to_published_s": round(nw, 4),
    "wall_ratio": round(ow / nw, 2),
    "old_cpu_s": round(oc, 3), "new_cpu_s": round(nc, 3), "cpu_ratio": round(oc / nc, 2),
}))
EOF
