#!/usr/bin/env bash
# Version transfer over loopback with `weightcast serve` / `weightcast fetch`, next to iperf3
# moving the same byte count over the same loopback in the same run:
#   1. a synth bf16 model (default 1 GiB) fetched whole into an empty store (v1),
#   2. one RL-like step of it (--lr 5e-7: about 1% of elements changed) fetched as a delta onto v1,
#   3. the same step fetched whole (--no-delta) into another store, for the delta's time ratio.
# Every fetch verifies each chunk's hash, writes it into staging and commits (fsync included).
#
#   bash bench/p2p_version.sh [path/to/weightcast] [size=1GiB]
#
# Last line: one JSON object.
set -euo pipefail

wc=${1:-build/p2p-rel/src/cli/weightcast}
size=${2:-1GiB}
[[ -x $wc ]] || { echo "weightcast not found at $wc (build a Release weightcast)" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "iperf3 is not installed" >&2; exit 1; }

work="$(mktemp -d)"
server_pid=""
shm=""
cleanup() {
  if [ -n "$shm" ]; then rm -rf "$shm"; fi
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

head -c 48 /dev/urandom | base64 >"$work/secret"
"$wc" synth model -o "$work/step-0000" --size "$size" --seed 11 >/dev/null
steps_json="$("$wc" synth steps --from "$work/step-0000" -o "$work" --steps 1 --lr 5e-7 --seed 11 | tail -n 1)"
changed="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["mean_changed_fraction"])' "$steps_json")"
# Hard links: the trainer's store shares the synth files (no copy; they stay in the page cache).
"$wc" store import --root "$work/trainer" --channel policy --link --version 1 "$work/step-0000" >/dev/null
"$wc" store import --root "$work/trainer" --channel policy --link --version 2 "$work/step-0001" >/dev/null
bytes="$(du -cb "$work"/step-0000/* | tail -n 1 | cut -f1)"

"$wc" serve --root "$work/trainer" --channel policy --listen 127.0.0.1:0 \
  --secret-file "$work/secret" 2>"$work/serve.log" &
server_pid=$!
for _ in $(seq 100); do
  grep -q ' on 127.0.0.1:' "$work/serve.log" 2>/dev/null && break
  sleep 0.1
done
addr="$(grep -o '127.0.0.1:[0-9]*' "$work/serve.log" | head -n 1)"
[ -n "$addr" ] || { echo "server did not start" >&2; cat "$work/serve.log" >&2; exit 1; }

fetch() {
  local root=$1; shift
  timeout 300 "$wc" fetch --from "$addr" --root "$root" --channel policy \
    --secret-file "$work/secret" "$@" 2>/dev/null | tail -n 1
}

# iperf3, the same bytes over the same loopback.
iperf_port=$((20000 + RANDOM % 20000))
iperf3 -s -1 -B 127.0.0.1 -p "$iperf_port" >/dev/null 2>&1 &
iperf_pid=$!
sleep 0.5
iperf3 -c 127.0.0.1 -p "$iperf_port" -n "$bytes" -l 128K --json >"$work/iperf.json"
wait "$iperf_pid" 2>/dev/null || true

# References for where the time goes: every fetched byte is SHA-256 hashed (sha256sum, one core),
# and what compressing whole chunks would give (zstd -1 on the largest shard, one core).
t0=$(date +%s.%N); cat "$work"/step-0000/* | sha256sum >/dev/null; t1=$(date +%s.%N)
sha_seconds=$(python3 -c "print($t1 - $t0)")
shard="$(ls -S "$work"/step-0000/*.safetensors | head -n 1)"
t0=$(date +%s.%N); zbytes=$(zstd -1 -T1 -c "$shard" | wc -c); t1=$(date +%s.%N)
zstd_json="{\"in\":$(stat -c %s "$shard"),\"out\":$zbytes,\"seconds\":$(python3 -c "print($t1 - $t0)")}"

# And the store's floor: writing the same byte count and fsyncing it (every fetch commits durably).
t0=$(date +%s.%N); dd if=/dev/zero of="$work/ddtest" bs=8M count=$(( (bytes + 8388607) / 8388608 )) conv=fsync status=none; t1=$(date +%s.%N)
rm -f "$work/ddtest"
dd_seconds=$(python3 -c "print($t1 - $t0)")

full="$(fetch "$work/sampler" --version 1)"
echo "full v1:        $full"
# The same fetch into a store on tmpfs (when there is one): the transfer without the disk.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  shm="$(mktemp -d /dev/shm/p2p-bench-XXXXXX)"
  full_shm="$(fetch "$shm/sampler" --version 1)"
  rm -rf "$shm"
  echo "full v1 tmpfs:  $full_shm"
else
  full_shm='{"seconds":0,"model_bytes":0}'
fi
delta="$(fetch "$work/sampler" --version 2)"
echo "delta v2 on v1: $delta"
full2="$(fetch "$work/sampler2" --version 2 --no-delta)"
echo "full v2:        $full2"
echo "iperf3:         $(python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["end"]["sum_received"]; print(e["bytes"], "bytes in", round(e["seconds"],3), "s")' "$work/iperf.json")"
for f in "$work"/step-0001/*; do cmp "$f" "$work/sampler/policy/current/$(basename "$f")"; done

python3 - "$work/iperf.json" "$full" "$delta" "$full2" "$changed" "$size" "$sha_seconds" "$zstd_json" "$dd_seconds" "$full_shm" <<'PY'
import json, sys
ip = json.load(open(sys.argv[1]))["end"]["sum_received"]
sha_seconds = float(sys.argv[7]); z = json.loads(sys.argv[8]); dd_seconds = float(sys.argv[9])
shm = json.loads(sys.argv[10])
full, delta, full2 = (json.loads(s) for s in sys.argv[2:5])
gbit = lambda b, s: b * 8 / s / 1e9 if s > 0 else 0
ip_gbit = gbit(ip["bytes"], ip["seconds"])
full_gbit = gbit(full["model_bytes"], full["seconds"])
print(json.dumps({
  "bench": "p2p_version", "size": sys.argv[6], "model_bytes": full["model_bytes"],
  "chunks": full["chunks"], "changed_fraction": float(sys.argv[5]),
  "iperf3_seconds": round(ip["seconds"], 3), "iperf3_gbit_per_s": round(ip_gbit, 3),
  "full_seconds": full["seconds"], "full_gbit_per_s": round(full_gbit, 3),
  "full_vs_iperf3": round(full_gbit / ip_gbit, 3),
  "full_wire_bytes": full["wire_bytes"],
  "full_tmpfs_seconds": shm["seconds"],
  "full_tmpfs_gbit_per_s": round(gbit(shm["model_bytes"], shm["seconds"]), 3),
  "full_tmpfs_vs_iperf3": round(gbit(shm["model_bytes"], shm["seconds"]) / ip_gbit, 3),
  "delta_seconds": delta["seconds"], "delta_wire_bytes": delta["wire_bytes"],
  "delta_ratio": delta["ratio"], "delta_chunks": delta["chunks_delta"],
  "full_v2_seconds": full2["seconds"],
  "delta_time_vs_full": round(delta["seconds"] / full2["seconds"], 3),
  "sha256sum_gbit_per_s": round(gbit(full["model_bytes"], sha_seconds), 3),
  "full_vs_sha256sum": round(full_gbit / gbit(full["model_bytes"], sha_seconds), 3),
  "write_fsync_seconds": round(dd_seconds, 3),
  "full_vs_write_fsync": round(dd_seconds / full["seconds"], 3),
  "zstd1_ratio_whole_chunk": round(z["in"] / z["out"], 3),
  "zstd1_gbit_per_s": round(gbit(z["in"], z["seconds"]), 3),
}))
PY
