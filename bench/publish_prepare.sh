#!/usr/bin/env bash
# The publisher's cost of a delta step, two binaries side by side: a synth model (default
# 128 MiB, one safetensors file) and one ~1%-changed training step of it; per round and binary,
# a fresh coordinator on 127.0.0.1 and a fresh publisher store, `publish --dir v1` (full), then
# `publish --dir v2` (the delta against v1) and `publish --dir v3` (against v2: this process
# restarts on a delta version), each a new process stopped with SIGTERM once it logs
# `published`, as bench/cluster/run.sh runs the publisher. Measured for the v2 and v3 processes:
# prepare_s (what `publish` logs: version number, import, manifest, delta, signature), the wall
# time from exec to the `published` line, and the CPU seconds the process used until then
# (user + sys, all threads). Rounds alternate OLD/NEW.
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
echo "synth $size and two steps into $dir"
"$new" synth model -o "$dir/v1" --size "$size" --seed 11 >/dev/null
"$new" synth steps --from "$dir/v1" -o "$dir/steps" --steps 2 --lr 5e-7 --seed 11 |
  tail -n 1 >"$dir/steps.json"
mv "$dir/steps/step-0001" "$dir/v2"
mv "$dir/steps/step-0002" "$dir/v3"

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

# round BIN TAG: fresh coordinator and store, v1, v2, v3; appends the figures of v2 and v3 (one
# line: six numbers) to $dir/TAG.res.
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
  local v2 v3
  v2=$(publish "$bin" "$tag-v2" "$dir/v2")
  v3=$(publish "$bin" "$tag-v3" "$dir/v3")
  echo "$v2 $v3" | tee -a "$dir/$tag.res"
  for v in v2 v3; do
    grep -q 'delta=true' "$dir/$tag-$v.log" || { echo "$tag: $v was not a delta" >&2; return 1; }
  done
  kill -TERM "$coord"
  wait "$coord" || true
}

for ((r = 1; r <= rounds; r++)); do
  echo "round $r: old $(round "$old" old)  new $(round "$new" new)  (v2, v3: prepare_s wall_s cpu_s)"
done

python3 - "$dir/old.res" "$dir/new.res" "$size" "$chunk" "$import" "$(cat "$dir/steps.json")" <<'EOF'
import json, statistics, sys
def load(p):
    rows = [list(map(float, l.split())) for l in open(p) if l.strip()]
    return [statistics.median(c) for c in zip(*rows)], len(rows)
(o2p, o2w, o2c, o3p, o3w, o3c), n = load(sys.argv[1])
(n2p, n2w, n2c, n3p, n3w, n3c), _ = load(sys.argv[2])
step = json.loads(sys.argv[6])
r = lambda x: round(x, 4)
print(json.dumps({
    "bench": "publish_prepare", "size": sys.argv[3], "chunk_size": sys.argv[4],
    "import": sys.argv[5], "rounds": n, "changed_fraction": step.get("mean_changed_fraction"),
    "medians": "of the rounds; v2: restart on a full v1, v3: restart on a delta v2",
    "old_v2_prepare_s": r(o2p), "new_v2_prepare_s": r(n2p), "v2_prepare_ratio": round(o2p / n2p, 2),
    "old_v2_wall_to_published_s": r(o2w), "new_v2_wall_to_published_s": r(n2w),
    "v2_wall_ratio": round(o2w / n2w, 2),
    "old_v2_cpu_s": r(o2c), "new_v2_cpu_s": r(n2c), "v2_cpu_ratio": round(o2c / n2c, 2),
    "old_v3_prepare_s": r(o3p), "new_v3_prepare_s": r(n3p), "v3_prepare_ratio": round(o3p / n3p, 2),
    "old_v3_wall_to_published_s": r(o3w), "new_v3_wall_to_published_s": r(n3w),
    "v3_wall_ratio": round(o3w / n3w, 2),
    "old_v3_cpu_s": r(o3c), "new_v3_cpu_s": r(n3c), "v3_cpu_ratio": round(o3c / n3c, 2),
}))
EOF
