#!/usr/bin/env bash
# How fast a coordinator admits reconnecting nodes in certificate mode (docs/security.md): one
# `weightcast coordinator` on loopback, and CLIENTS connections made to it by PROCS client
# processes at once (bench_coordinator_clients: TCP, TLS 1.3 handshake with certificates, the
# role check, the HMAC handshake, one GetStatus answered on each), timed from the first to the
# last; then the same in development mode (no TLS), same run. The reference for TLS itself:
# OpenSSL's own `openssl s_time -new` against `openssl s_server` with the same certificates
# (mutual TLS, one connection after another), same run. What a reconnect needs: every agent back
# within the heartbeat timeout (3 s by default), CLIENTS / 3 per second.
#
#   bash bench/coordinator_tls.sh [weightcast] [clients=1000] [procs=2]
#
# Every run is bounded by `timeout`. Last line: one JSON object.
set -euo pipefail

wc=${1:-build/release/src/cli/weightcast}
clients=${2:-1000}
procs=${3:-2}
clients_bin=${CLIENTS_BIN:-build/release/bench/bench_coordinator_clients}
for b in "$wc" "$clients_bin"; do
  [[ -x $b ]] || { echo "not found: $b (build a Release tree)" >&2; exit 1; }
done
ulimit -n 8192
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
new_secret "$work/secret"
"$wc" ca init --dir "$work/ca" 2>/dev/null
"$wc" ca issue --dir "$work/ca" --name coordinator --role coordinator --out "$work/coordinator" >/dev/null
"$wc" ca issue --dir "$work/ca" --name agent --role agent --out "$work/agent" >/dev/null

rate_with() {  # rate_with MODE -> prints connections per second
  local mode=$1 d flags=() tls=() i
  d="$(mktemp -d -p "$work")"
  if [[ $mode == certificates ]]; then
    flags=(--ca "$work/ca/ca.pem" --cert "$work/coordinator.pem" --key "$work/coordinator.key")
    tls=(--tls "$work/agent.pem,$work/agent.key,$work/ca/ca.pem")
  fi
  "$wc" coordinator --listen 127.0.0.1:0 --state-dir "$d/coord" --address-file "$d/coord.addr" \
    --secret-file "$work/secret" "${flags[@]}" 2>"$d/coord.log" &
  pids+=($!)
  local coord=$!
  wait_for 20 test -s "$d/coord.addr"
  local start end
  start=$(date +%s.%N)
  for ((i = 0; i < procs; i++)); do
    timeout 120 "$clients_bin" "$(cat "$d/coord.addr")" "$work/secret" \
      --clients $((clients / procs)) --hold-s 0 "${tls[@]}" >"$d/clients.$i.out" 2>"$d/clients.$i.err" &
    pids+=($!)
  done
  local failed=0
  for ((i = 0; i < procs; i++)); do wait "${pids[-1 - i]}" || failed=1; done
  end=$(date +%s.%N)
  if ((failed)); then
    echo "clients failed: $(cat "$d"/clients.*.err | tail -3)" >&2
    exit 1
  fi
  kill "$coord"; wait "$coord" 2>/dev/null || true
  python3 -c "print(round($((clients / procs * procs)) / ($end - $start), 1))"
}

dev=$(rate_with development)
echo "development mode: $dev connections/s" >&2
tls=$(rate_with certificates)
echo "certificate mode: $tls connections/s" >&2
# OpenSSL alone: s_server and s_time with the same certificates, for 5 s.
port=$((47400 + RANDOM % 500))
timeout 20 openssl s_server -accept "$port" -cert "$work/coordinator.pem" -key "$work/coordinator.key" \
  -CAfile "$work/ca/ca.pem" -Verify 1 -quiet -naccept 1000000 >/dev/null 2>&1 &
pids+=($!)
disown $!  # ended by the EXIT trap; no "Killed" line
sleep 1
s_time=$(timeout 15 openssl s_time -connect "127.0.0.1:$port" -new -time 5 -cert "$work/agent.pem" \
  -key "$work/agent.key" -CAfile "$work/ca/ca.pem" 2>/dev/null |
  awk '/connections in .* real seconds/ {printf "%.1f", $1 / $4}')
echo "openssl s_time (mutual TLS, serial): ${s_time:-?} connections/s" >&2
need=$(python3 -c "print(round($clients / 3, 1))")
python3 - "$clients" "$procs" "$dev" "$tls" "$need" "${s_time:-0}" <<'PY'
import json, sys
clients, procs, dev, tls, need, s_time = int(sys.argv[1]), int(sys.argv[2]), *map(float, sys.argv[3:])
print(f"{clients} connections from {procs} processes: certificate mode {tls:.0f}/s, development mode {dev:.0f}/s; "
      f"a reconnect of all within 3 s needs {need:.0f}/s: {tls / need:.1f}x that")
print(json.dumps({"bench": "coordinator_tls", "clients": clients, "procs": procs,
                  "tls_per_s": tls, "plain_per_s": dev, "needed_per_s": need,
                  "tls_over_needed": round(tls / need, 1), "tls_over_plain": round(tls / dev, 3),
                  "openssl_s_time_per_s": s_time,
                  "tls_over_openssl": round(tls / s_time, 2) if s_time else 0}))
PY
