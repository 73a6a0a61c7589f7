#!/usr/bin/env bash
# What certificate mode's mutual TLS costs a point-to-point transfer on loopback: `weightcast net
# send/recv` plain TCP and with TLS 1.3 (certificates from `weightcast ca`, AES-GCM), the same
# byte count RUNS times each, interleaved (plain, TLS, plain, ...); the best run of each is
# compared (medians too). The reference for the cipher itself is `openssl speed -evp
# aes-128-gcm` on one core, in the same run. On loopback the plain transfer is itself CPU-bound
# (sender and receiver share the machine's cores), so TLS cannot exceed the ceiling printed:
# the rate at which one core both moves the plain bytes and runs the cipher over them,
# 1 / (1/plain + 1/aes). Every run is bounded by `timeout`. The last line printed is one JSON
# object.
#
#   bash bench/tls_overhead.sh [path/to/weightcast] [bytes=2GiB] [runs=3]
set -euo pipefail

WC=${1:-build/release/src/cli/weightcast}
BYTES=${2:-2GiB}
RUNS=${3:-3}
PORT=${PORT:-47221}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export WEIGHTCAST_SECRET="tls overhead bench secret 0123456789"

"$WC" ca init --dir "$tmp/ca" 2>/dev/null
for node in sender receiver; do
  "$WC" ca issue --dir "$tmp/ca" --name "$node" --role agent --out "$tmp/$node" >/dev/null
done
tls_flags() { echo --tls-cert "$tmp/$1.pem" --tls-key "$tmp/$1.key" --tls-ca "$tmp/ca/ca.pem"; }
bytes_num=$(python3 -c "
import re,sys
m=re.fullmatch(r'(\d+)([KMG]i?B)?','$BYTES'); n=int(m.group(1)); u=m.group(2) or ''
print(n*{'':1,'KiB':1<<10,'MiB':1<<20,'GiB':1<<30}[u])")

run() {  # run MODE I: one transfer; appends its JSON line to $tmp/runs
  local mode="$1" i="$2" recv_tls=() send_tls=()
  if [[ $mode == tls ]]; then
    # shellcheck disable=SC2207
    recv_tls=($(tls_flags receiver)) send_tls=($(tls_flags sender))
  fi
  timeout 150 "$WC" net recv --listen "127.0.0.1:$((PORT + i))" --timeout 120 "${recv_tls[@]}" \
    >"$tmp/recv.json" 2>"$tmp/recv.err" &
  local recv=$!
  sleep 0.3
  timeout 150 "$WC" net send --connect "127.0.0.1:$((PORT + i))" --bytes "$bytes_num" \
    --chunk-size 4MiB --timeout 120 "${send_tls[@]}" >"$tmp/send.json" 2>"$tmp/send.err" || {
    cat "$tmp/send.err" "$tmp/recv.err" >&2
    exit 1
  }
  wait "$recv"
  python3 - "$tmp/send.json" "$mode" >>"$tmp/runs" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(json.dumps({"mode": sys.argv[2], "bytes": d["bytes"], "seconds": d["seconds"],
                  "gbps": d["bytes"] * 8 / d["seconds"] / 1e9}))
PY
}

for ((i = 0; i < RUNS; i++)); do
  run plain $((2 * i))
  run tls $((2 * i + 1))
done
aes_gbps=$(openssl speed -evp aes-128-gcm -bytes 16384 -seconds 2 2>/dev/null |
  awk '/^AES-128-GCM|^aes-128-gcm/ {v=$NF; sub(/k$/, "", v); print v * 1000 * 8 / 1e9}')
python3 - "$tmp/runs" "$aes_gbps" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def of(mode):
    g = sorted(r["gbps"] for r in runs if r["mode"] == mode)
    return max(g), statistics.median(g)
plain_best, plain_median = of("plain")
tls_best, tls_median = of("tls")
aes = float(sys.argv[2]) if sys.argv[2] else 0.0
for r in runs:
    print(f"{r['mode']:5s} {r['gbps']:.2f} Gbit/s ({r['bytes'] / 2**30:.1f} GiB in {r['seconds']:.2f} s)")
ceiling = 1 / (1 / plain_best + 1 / aes) if aes > 0 else 0.0
print(f"best: plain {plain_best:.2f} Gbit/s, TLS {tls_best:.2f} Gbit/s: TLS/plain {tls_best / plain_best:.2f}; "
      f"openssl speed aes-128-gcm one core {aes:.1f} Gbit/s; CPU-bound ceiling {ceiling:.1f} Gbit/s "
      f"({ceiling / plain_best:.2f} of plain; TLS reaches {tls_best / ceiling:.2f} of it)")
print(json.dumps({"bench": "tls_overhead", "runs": len(runs) // 2,
                  "plain_gbps_best": round(plain_best, 2), "tls_gbps_best": round(tls_best, 2),
                  "plain_gbps_median": round(plain_median, 2), "tls_gbps_median": round(tls_median, 2),
                  "tls_over_plain": round(tls_best / plain_best, 3),
                  "openssl_aes128gcm_gbps_one_core": round(aes, 2),
                  "cpu_bound_ceiling_gbps": round(ceiling, 2),
                  "tls_over_ceiling": round(tls_best / ceiling, 3) if ceiling else 0}))
PY
