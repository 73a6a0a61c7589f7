#!/usr/bin/env bash
# Loading while downloading, on the emulated cluster (bench/cluster/netns.sh): host 0 runs the
# coordinator and publishes a synth checkpoint of SIZE; hosts 1..N-1 each run a sampler
# (bench/stream_load.py) that loads it into its own buffers, with per-tensor work at LOAD_RATE.
# Three runs on the same network, each a fresh channel (a full download):
#   wait            sub.wait(1), then load every tensor: download + load, what a sampler does
#                   without streaming
#   stream          sub.stream(1): each tensor loaded as soon as it is verified, then
#                   wait_committed()
#   stream-ordered  the same with order= the checkpoint's tensor order (an engine building layer by
#                   layer); the agents fetch those chunks first
# Times are from the moment `publish` starts (its hashing included) to the slowest host's last
# tensor loaded (and its commit). Prints per run, then one JSON object: the download D (wait's
# commit), the load L (wait's last load - its commit), streaming's time to the last tensor
# against max(D, L), and the fleet's completion (the last commit) with streaming readers against
# without.
#
#   sudo bash bench/stream_load.sh [N=5] [RATE=1gbit] [SIZE=1GiB] [LOAD_RATE=125MB]
# Needs root (network namespaces), the release build's binary and Python module.
set -euo pipefail
n=${1:-5}
rate=${2:-1gbit}
size=${3:-1GiB}
load_rate=${4:-125MB}
[[ $(id -u) -eq 0 ]] || { echo "needs root (network namespaces)" >&2; exit 77; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$root/build/release}"
wc="$build/src/cli/weightcast"
[[ -x $wc ]] || { echo "no $wc: build first (cmake --build --preset release)" >&2; exit 1; }
py=/usr/bin/python3
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
load_bps=$($py -c "import sys; sys.path.insert(0, '$build/python'); import weightcast, re
t = '$load_rate'; m = re.fullmatch(r'([0-9.]+)(B|KB|MB|GB|KiB|MiB|GiB)', t)
units = {'B': 1, 'KB': 1e3, 'MB': 1e6, 'GB': 1e9, 'KiB': 2**10, 'MiB': 2**20, 'GiB': 2**30}
print(float(m.group(1)) * units[m.group(2)] if m else sys.exit('LOAD_RATE like 125MB'))")
source "$root/bench/cluster/netns.sh"
id="sl$$"
id=${id:0:8}
work="$(mktemp -d /tmp/wcstream.XXXXXX)"
cleanup() {
  cluster_down "$id" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
log() { echo "stream_load: $*" >&2; }

log "$((n - 1)) sampler hosts, links $rate, model $size, per-tensor work at $load_rate/s"
"$wc" synth model --out "$work/model" --size "$size" >/dev/null
cluster_up "$id" "$n" "$rate" >/dev/null
"$wc" keygen --out "$work/secret" >/dev/null
coord="$(cluster_addr 0):7000"
cluster_exec "$id" 0 timeout 900 "$wc" coordinator --listen "$coord" --state-dir "$work/coord" \
  --secret-file "$work/secret" >"$work/coord.log" 2>&1 &
for _ in $(seq 100); do grep -q "listening" "$work/coord.log" && break; sleep 0.1; done

run() {  # MODE
  local mode=$1 channel="load-$1" i
  local dir="$work/$mode"
  mkdir -p "$dir"
  local pids=()
  for ((i = 1; i < n; i++)); do
    cluster_exec "$id" "$i" timeout 600 "$py" "$root/bench/stream_load.py" --mode "$mode" \
      --store "$dir/store.$i" --channel "$channel" --coordinator "$coord" \
      --secret-file "$work/secret" --listen "$(cluster_addr "$i"):0" --load-rate "$load_bps" \
      --model "$work/model" --ready "$dir/ready.$i" --out "$dir/res.$i.json" \
      >"$dir/reader.$i.log" 2>&1 &
    pids+=($!)
  done
  for ((i = 1; i < n; i++)); do
    for _ in $(seq 600); do [[ -e $dir/ready.$i ]] && break; sleep 0.1; done
    [[ -e $dir/ready.$i ]] || { log "reader $i never got ready: $(tail -3 "$dir/reader.$i.log")"; exit 1; }
  done
  date +%s.%N >"$dir/t0"
  cluster_exec "$id" 0 timeout 600 "$wc" publish --dir "$work/model" --channel "$channel" \
    --coordinator "$coord" --secret-file "$work/secret" --store "$dir/publisher" \
    --listen "$(cluster_addr 0):0" --until complete >"$dir/publish.log" 2>&1 &
  local publisher=$!
  for p in "${pids[@]}"; do wait "$p" || { log "a $mode reader failed: $(tail -3 "$dir"/reader.*.log)"; exit 1; }; done
  wait "$publisher" || { log "publish failed: $(tail -3 "$dir/publish.log")"; exit 1; }
  $py - "$dir" "$mode" "$((n - 1))" <<'PY'
import json, sys
d, mode, hosts = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = float(open(d + "/t0").read())
rs = [json.load(open(f"{d}/res.{i}.json")) for i in range(1, hosts + 1)]
out = {"mode": mode, "first_loaded_s": min(r["first_loaded"] for r in rs) - t0,
       "last_loaded_s": max(r["last_loaded"] for r in rs) - t0,
       "committed_s": max(r["committed"] for r in rs) - t0,
       "load_after_commit_s": max(r["last_loaded"] - r["committed"] for r in rs),
       "bytes": rs[0]["bytes"], "tensors": rs[0]["tensors"]}
json.dump(out, open(d + "/summary.json", "w"))
print(f"  {mode:<15} first tensor {out['first_loaded_s']:6.2f} s  last tensor loaded "
      f"{out['last_loaded_s']:6.2f} s  fleet committed {out['committed_s']:6.2f} s")
PY
  rm -rf "$dir"/store.* "$dir/publisher"  # a run's stores are a model's size per host
}

for mode in wait stream stream-ordered; do run "$mode"; done
$py - "$work" "$n" "$rate" "$size" "$load_rate" <<'PY'
import json, sys
work, n, rate, size, load_rate = sys.argv[1:6]
s = {m: json.load(open(f"{work}/{m}/summary.json")) for m in ("wait", "stream", "stream-ordered")}
D = s["wait"]["committed_s"]
L = s["wait"]["load_after_commit_s"]
bound = max(D, L)
out = {"bench": "stream_load", "hosts": int(n) - 1, "rate": rate, "size": size,
       "load_rate": load_rate, "bytes": s["wait"]["bytes"], "tensors": s["wait"]["tensors"],
       "download_s": D, "load_s": L, "download_then_load_s": s["wait"]["last_loaded_s"]}
for m in ("stream", "stream-ordered"):
    out[m] = {"last_loaded_s": s[m]["last_loaded_s"], "first_loaded_s": s[m]["first_loaded_s"],
              "committed_s": s[m]["committed_s"],
              "over_max_download_load": s[m]["last_loaded_s"] / bound,
              "fleet_completion_over_without": s[m]["committed_s"] / D}
print(f"download D {D:.2f} s, load L {L:.2f} s, download then load {out['download_then_load_s']:.2f} s")
for m in ("stream", "stream-ordered"):
    print(f"{m}: last tensor {out[m]['last_loaded_s']:.2f} s = "
          f"{out[m]['over_max_download_load']:.3f} x max(D, L) (goal <= 1.1); fleet committed "
          f"{out[m]['committed_s']:.2f} s = {out[m]['fleet_completion_over_without']:.3f} x "
          "without streaming (goal <= 1.05)")
print(json.dumps(out))
PY
