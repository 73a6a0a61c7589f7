#!/usr/bin/env bash
# SHA-256 chunk hashing through our Hasher next to `openssl speed -evp sha256 -bytes 8192`, both
# measured in this run on this machine; plus XXH3-128 and the builder's HashChunks path.
#
#   bash bench/hash_vs_openssl.sh [path/to/bench_hash_throughput] [seconds per figure]
#
# openssl speed divides by user CPU time unless given -elapsed; our per-core figures divide by
# the hashing thread's user CPU time too, so the two compare like for like on a shared, loaded
# machine (the JSON also carries user+system figures, *_cpu_gbps).
# The openssl reference runs before and after our benchmark and the better of the two is used,
# so that a burst of load from other processes during one run does not flatter the ratio.
# Last line: one JSON object; ratio_sha256_vs_openssl is ours / openssl, per core (goal >= 0.9).
set -euo pipefail

bin=${1:-build/release/bench/bench_hash_throughput}
seconds=${2:-1}
if [[ ! -x $bin ]]; then
  echo "bench_hash_throughput not found at $bin (build target bench_hash_throughput)" >&2
  exit 1
fi

openssl_gbps() {
  # The last line reads "sha256   123456.78k": thousands of bytes per second.
  openssl speed -evp sha256 -bytes "${1:-8192}" -seconds 3 2>/dev/null |
    awk 'END { v = $NF; sub(/k$/, "", v); printf "%.3f", v * 1000 / 1e9 }'
}

before=$(openssl_gbps)
echo "openssl speed -evp sha256 -bytes 8192 -seconds 3 (before): $before GB/s"
ours_out=$(mktemp)
trap 'rm -f "$ours_out"' EXIT
"$bin" --seconds "$seconds" > "$ours_out"
cat "$ours_out"
ours_json=$(tail -n 1 "$ours_out")
after=$(openssl_gbps)
echo "openssl speed -evp sha256 -bytes 8192 -seconds 3 (after):  $after GB/s"
# The same at 8 MiB blocks: what openssl gets when the data streams from memory, as chunks do.
big=$(openssl_gbps 8388608)
echo "openssl speed -evp sha256 -bytes 8388608 -seconds 3:       $big GB/s"

python3 - "$before" "$after" "$ours_json" "$big" <<'PY'
import json, sys
before, after, ours = float(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3])
big = float(sys.argv[4])
ref = max(before, after)
out = {
    "bench": "hash_vs_openssl",
    "cores": ours["cores"],
    "openssl_sha256_8k_gbps": ref,
    "openssl_sha256_8k_gbps_runs": [before, after],
    "sha256_8mib_gbps_per_core": ours["hasher_sha256_8mib_gbps"],
    "ratio_sha256_vs_openssl": round(ours["hasher_sha256_8mib_gbps"] / ref, 3),
    "sha256_8mib_user_plus_sys_gbps_per_core": ours["hasher_sha256_8mib_cpu_gbps"],
    "sha256_8mib_single_update_gbps_per_core": ours["hasher_sha256_8mib_single_update_gbps"],
    "sha256_8kib_incache_gbps_per_core": ours["hasher_sha256_8kib_incache_gbps"],
    "ratio_sha256_8kib_vs_openssl_8kib": round(ours["hasher_sha256_8kib_incache_gbps"] / ref, 3),
    "openssl_sha256_8mib_gbps": big,
    "ratio_sha256_8mib_vs_openssl_8mib": round(ours["hasher_sha256_8mib_gbps"] / big, 3),
    "xxh3_128_8mib_gbps_per_core": ours["hasher_xxh3_128_8mib_gbps"],
    "ratio_xxh3_vs_sha256": round(ours["hasher_xxh3_128_8mib_gbps"] / ours["hasher_sha256_8mib_gbps"], 2),
    "memcpy_gbps": ours["memcpy_gbps"],
}
for key, value in ours.items():
    if key.startswith("hashchunks_") or key.startswith("hasher_"):
        out[key] = value
print(json.dumps(out))
PY
