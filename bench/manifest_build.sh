#!/usr/bin/env bash
# Manifest build time of a synthetic checkpoint (default 4 GB) with every core, next to
# `sha256sum` of the same files (one process, and one process per core), all in this run with
# the files in the page cache. The checkpoint is deleted afterwards.
#
#   bash bench/manifest_build.sh [path/to/weightcast] [size, e.g. 4GB] [chunk size, e.g. 8MiB]
#
# WORKDIR (default /tmp) says where the checkpoint is written. Last line: one JSON object;
# ratio_vs_sha256sum is sha256sum's wall time / ours (above 1: we are faster).
set -euo pipefail

bin=${1:-build/release/src/cli/weightcast}
size=${2:-4GB}
chunk=${3:-8MiB}
if [[ ! -x $bin ]]; then
  echo "weightcast not found at $bin (build target weightcast)" >&2
  exit 1
fi
dir=$(mktemp -d "${WORKDIR:-/tmp}/wc_manifest_bench.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cores=$(nproc)

echo "writing a $size checkpoint with weightcast synth model into $dir/ckpt"
"$bin" synth model -o "$dir/ckpt" --size "$size" --shard-size 1GB | tail -n 1 >&2
bytes=$(du -cb "$dir"/ckpt/* | tail -n 1 | cut -f 1)
files=$(ls "$dir/ckpt" | wc -l)

# Wall and CPU seconds of a command: "wall user sys".
timed() {
  /usr/bin/time -f "%e %U %S" -o "$dir/time" "$@" > "$dir/out"
  cat "$dir/time"
}

# Warm the page cache first so that every contender reads from memory.
cat "$dir"/ckpt/* > /dev/null
read -r sum_wall sum_user sum_sys < <(timed sha256sum "$dir"/ckpt/*)
echo "sha256sum (1 process):          ${sum_wall}s wall, ${sum_user}s user"
read -r par_wall par_user par_sys < <(
  timed bash -c "ls -d '$dir'/ckpt/* | xargs -P $cores -n 1 sha256sum")
echo "sha256sum ($cores processes):         ${par_wall}s wall, ${par_user}s user"
read -r wc_wall wc_user wc_sys < <(
  timed "$bin" manifest "$dir/ckpt" --chunk-size "$chunk" --json -o "$dir/manifest")
ours=$(cat "$dir/out")
echo "weightcast manifest ($cores threads): ${wc_wall}s wall, ${wc_user}s user"
echo "$ours" >&2
read -r xx_wall xx_user xx_sys < <(
  timed "$bin" manifest "$dir/ckpt" --chunk-size "$chunk" --hash xxh3-128 --json)
echo "weightcast manifest --hash xxh3-128: ${xx_wall}s wall, ${xx_user}s user"

python3 - "$bytes" "$files" "$cores" "$chunk" "$sum_wall" "$sum_user" "$sum_sys" "$par_wall" \
  "$par_user" "$par_sys" "$wc_wall" "$wc_user" "$wc_sys" "$xx_wall" "$xx_user" "$xx_sys" \
  "$ours" <<'PY'
import json, sys
a = sys.argv[1:]
size, files, cores, chunk = int(a[0]), int(a[1]), int(a[2]), a[3]
t = [float(x) for x in a[4:16]]
ours = json.loads(a[16])
def gbps(s): return round(size / s / 1e9, 3) if s > 0 else None
sum_wall, sum_cpu = t[0], t[1] + t[2]
par_wall, par_cpu = t[3], t[4] + t[5]
wc_wall, wc_cpu = t[6], t[7] + t[8]
xx_wall, xx_cpu = t[9], t[10] + t[11]
print(json.dumps({
    "bench": "manifest_build",
    "cores": cores, "bytes": size, "files": files, "chunk_size": chunk,
    "chunks": ours["chunks"], "tensors": ours["tensors"],
    "sha256sum_wall_s": sum_wall, "sha256sum_cpu_s": round(sum_cpu, 2),
    "sha256sum_gbps": gbps(sum_wall),
    "sha256sum_parallel_wall_s": par_wall, "sha256sum_parallel_gbps": gbps(par_wall),
    "manifest_sha256_wall_s": wc_wall, "manifest_sha256_cpu_s": round(wc_cpu, 2),
    "manifest_sha256_gbps": gbps(wc_wall),
    "manifest_sha256_gbps_per_cpu_s": gbps(wc_cpu),
    "sha256sum_gbps_per_cpu_s": gbps(sum_cpu),
    "manifest_xxh3_wall_s": xx_wall, "manifest_xxh3_gbps": gbps(xx_wall),
    "ratio_vs_sha256sum": round(sum_wall / wc_wall, 2),
    "ratio_vs_sha256sum_parallel": round(par_wall / wc_wall, 2),
    "ratio_cpu_efficiency_vs_sha256sum": round(sum_cpu / wc_cpu, 2),
}))
PY
