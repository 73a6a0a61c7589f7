#!/usr/bin/env bash
# A model at an HTTP origin to a fleet (docs/origin.md), on an emulated cluster
# (bench/cluster/netns.sh): host 0 runs nginx (the origin, its link at ORIGIN_RATE), host 1 the
# coordinator and `weightcast publish --from http://origin/models/`, hosts 2..N agents, every other
# link at RATE. In the same run, on the same network:
#   curl        every agent host downloads each file of the model from the origin with curl
#               (what users do today)
#   libtorrent  host 1 downloads the model with curl, makes a torrent and seeds it to the agent
#               hosts (bench/cluster/torrent.py)
#   weightcast  publish --from with the defaults; the agents fetch their shares from the origin
#               and the rest from each other
# For each: the slowest host's time from the start against S/B (S = model bytes, B = RATE) and
# against the lower bound with the origin (docs/origin.md: S/min(B, O) on full-duplex links, plus
# the publisher's pass for weightcast), and the bytes the origin served over S (nginx's log).
#
#   sudo bash bench/origin_netns.sh N RATE SIZE [--origin-rate RATE] [--wc PATH] [--keep]
#     e.g. sudo bash bench/origin_netns.sh 16 50mbit 32MiB --origin-rate 200mbit
# Output: progress on stderr; one JSON object as the last line on stdout. Exit 77 when network
# namespaces cannot be made here (not root), 2 on bad arguments, 1 on failure.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=cluster/netns.sh
source "$here/cluster/netns.sh"

usage() { sed -n '2,18p' "$0" >&2; exit 2; }
[[ $# -ge 3 ]] || usage
N=$1 RATE=$2 SIZE=$3
shift 3
ORIGIN_RATE="" WC="$root/build/release/src/cli/weightcast" KEEP=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --origin-rate) ORIGIN_RATE=$2; shift 2 ;;
    --wc) WC=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) usage ;;
  esac
done
[[ $N =~ ^[0-9]+$ && $N -ge 3 && $N -le 40 ]] || { echo "N must be 3..40" >&2; exit 2; }
cluster_check_rate "$RATE" || exit 2
ORIGIN_RATE=${ORIGIN_RATE:-$RATE}
cluster_check_rate "$ORIGIN_RATE" || exit 2
[[ $SIZE =~ ^[0-9]+(MiB|GiB)$ ]] || { echo "SIZE like 32MiB" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "needs root (network namespaces)" >&2; exit 77; }
command -v nginx >/dev/null || { echo "nginx is not installed" >&2; exit 1; }
[[ -x $WC ]] || { echo "no weightcast binary at $WC" >&2; exit 1; }

ID=or$$
ID=${ID:0:8}
work=$(mktemp -d /dev/shm/wc-origin.XXXXXX)
cleanup() {
  cluster_down "$ID"
  if ((KEEP)); then echo "work dir kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
log() { echo "[origin-bench] $*" >&2; }
bits() { awk -v r="$1" 'BEGIN { v = r + 0; if (r ~ /gbit/) v *= 1e9; else if (r ~ /mbit/) v *= 1e6; else v *= 1e3; print v }'; }

log "model: $SIZE in shards"
shard=$(("${SIZE%%[MG]iB}" / 4))
unit=${SIZE//[0-9]/}
mkdir -p "$work/origin/models" "$work/nginx/tmp"
"$WC" synth model -o "$work/model" --size "$SIZE" --shard-size "$shard$unit" --seed 11 >/dev/null ||
  exit 1
cp "$work/model"/*.safetensors "$work/model/model.safetensors.index.json" "$work/origin/models/"
S=$(cat "$work/origin/models"/* | wc -c)
files=$(cd "$work/origin/models" && ls)

cluster_up "$ID" "$N" "$RATE" || { log "cannot make the cluster"; exit 77; }
cluster_rate "$ID" 0 "$ORIGIN_RATE" || exit 1
origin=$(cluster_addr 0)
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes 2;
user root;
pid $work/nginx/nginx.pid;
daemon off;
events { worker_connections 1024; }
http {
  log_format bytes '\$request_uri \$status \$body_bytes_sent';
  access_log $work/nginx/access.log bytes;
  client_body_temp_path $work/nginx/tmp/body;
  proxy_temp_path $work/nginx/tmp/proxy;
  fastcgi_temp_path $work/nginx/tmp/fastcgi;
  uwsgi_temp_path $work/nginx/tmp/uwsgi;
  scgi_temp_path $work/nginx/tmp/scgi;
  sendfile on;
  server {
    listen $origin:80;
    location /models/ { root $work/origin; }
  }
}
CONF
cluster_exec "$ID" 0 nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" \
  >/dev/null 2>&1 &
sleep 1
origin_bytes() { awk '{ s += $3 } END { printf "%.0f\n", s }' "$work/nginx/access.log"; }
now() { date +%s.%N; }
since() { python3 -c "import sys, time; print(round(time.time() - float(sys.argv[1]), 3))" "$1"; }

# curl: every agent host fetches every file, all at once.
log "curl: $((N - 2)) hosts download the model from the origin"
before=$(origin_bytes)
start=$(now)
pids=()
for ((h = 2; h < N; h++)); do
  (
    for f in $files; do
      cluster_exec "$ID" "$h" timeout 900 curl -sf -o /dev/null "http://$origin/models/$f" || exit 1
    done
  ) &
  pids+=($!)
done
ok=1
for p in "${pids[@]}"; do wait "$p" || ok=0; done
curl_s=$(since "$start")
curl_bytes=$(($(origin_bytes) - before))
((ok)) || { log "a curl failed"; exit 1; }
log "curl: ${curl_s}s, origin served $curl_bytes bytes"

# libtorrent: host 1 downloads the model from the origin (curl), makes a torrent of it and seeds
# it to hosts 2..N-1 (bench/cluster/torrent.py, tuned as in bench/cluster/run.sh): the time from
# the download's start to the last peer holding every piece.
log "libtorrent: host 1 downloads, then seeds $((N - 2)) peers"
lt="$work/lt"
mkdir -p "$lt/seed/models"
before=$(origin_bytes)
start=$(now)
for f in $files; do
  cluster_exec "$ID" 1 timeout 900 curl -sf -o "$lt/seed/models/$f" "http://$origin/models/$f" || exit 1
done
/usr/bin/python3 "$here/cluster/torrent.py" make "$lt/seed/models" "$lt/m.torrent" >&2 || exit 1
peer_args=()
for ((h = 1; h < N; h++)); do peer_args+=(--peer "$(cluster_addr "$h"):6881"); done
lt_pids=()
for ((h = 1; h < N; h++)); do
  if ((h == 1)); then save=$lt/seed; seed=(--seed); else save=$lt/h$h; seed=(); mkdir -p "$save"; fi
  cluster_exec "$ID" "$h" timeout 900 /usr/bin/python3 "$here/cluster/torrent.py" run \
    --torrent "$lt/m.torrent" --save "$save" --listen "$(cluster_addr "$h"):6881" \
    "${peer_args[@]}" "${seed[@]}" --ready "$lt/ready.$h" --go "$lt/go" --stop "$lt/stop" \
    --result "$lt/res.$h.json" --timeout 880 2>"$lt/log.$h" &
  lt_pids+=($!)
done
for ((h = 1; h < N; h++)); do
  for _ in $(seq 300); do [[ -e $lt/ready.$h ]] && break; sleep 0.1; done
done
printf '{"t0": %s}\n' "$(now)" >"$lt/go.tmp" && mv "$lt/go.tmp" "$lt/go"
lt_done() {
  local h
  for ((h = 2; h < N; h++)); do [[ -e $lt/res.$h.json ]] || return 1; done
}
for _ in $(seq 9000); do lt_done && break; sleep 0.1; done
lt_done || { log "libtorrent did not finish"; exit 1; }
lt_s=$(since "$start")
touch "$lt/stop"
for p in "${lt_pids[@]}"; do wait "$p" 2>/dev/null; done
lt_bytes=$(($(origin_bytes) - before))
for ((h = 2; h < N; h++)); do
  for f in $files; do
    cmp -s "$work/origin/models/$f" "$lt/h$h/models/$f" || { log "libtorrent host $h: $f differs"; exit 1; }
  done
done
rm -rf "$lt"
log "libtorrent: ${lt_s}s, origin served $lt_bytes bytes"

# weightcast: coordinator and publisher on host 1, agents on 2..N-1.
log "weightcast: publish --from the origin to $((N - 2)) agents"
head -c 48 /dev/urandom | base64 >"$work/secret"
coord_addr="$(cluster_addr 1):7000"
cluster_exec "$ID" 1 timeout 900 "$WC" coordinator --listen "$coord_addr" \
  --state-dir "$work/coord" --secret-file "$work/secret" >"$work/coord.log" 2>&1 &
sleep 1
for ((h = 2; h < N; h++)); do
  cluster_exec "$ID" "$h" timeout 900 "$WC" agent --coordinator "$coord_addr" \
    --store "$work/a$h" --channel m --listen "$(cluster_addr "$h"):7001" --node-id $((100 + h)) \
    --secret-file "$work/secret" >"$work/a$h.log" 2>&1 &
done
sleep 3
before=$(origin_bytes)
start=$(now)
cluster_exec "$ID" 1 timeout 900 "$WC" publish --coordinator "$coord_addr" --store "$work/pub" \
  --channel m --from "http://$origin/models/" --listen "$(cluster_addr 1):7002" \
  --until complete --secret-file "$work/secret" >"$work/pub.out" 2>"$work/pub.log" &
pub=$!
all_current() {
  local h
  for ((h = 2; h < N; h++)); do [[ -L $work/a$h/m/current ]] || return 1; done
}
while ! all_current; do
  kill -0 "$pub" 2>/dev/null || { all_current || { log "the publish ended first"; tail -5 "$work/pub.log" >&2; exit 1; }; }
  sleep 0.1
done
wc_s=$(since "$start")
wait "$pub" || { log "publish failed"; tail -5 "$work/pub.log" >&2; exit 1; }
wc_bytes=$(($(origin_bytes) - before))
pass=$(grep -o 'origin_bytes=[0-9]*' "$work/pub.log" | tail -n 1 | cut -d= -f2)
prepare=$(grep -o 'prepare_s=[0-9.]*' "$work/pub.log" | tail -n 1 | cut -d= -f2)
for ((h = 2; h < N; h++)); do
  for f in $files; do
    cmp -s "$work/origin/models/$f" "$work/a$h/m/current/$f" || { log "host $h: $f differs"; exit 1; }
  done
done
log "weightcast: ${wc_s}s, origin served $wc_bytes bytes ($pass for the manifest)"

python3 - "$S" "$(bits "$RATE")" "$(bits "$ORIGIN_RATE")" "$N" "$curl_s" "$curl_bytes" "$wc_s" \
  "$wc_bytes" "${pass:-0}" "${prepare:-0}" "$RATE" "$ORIGIN_RATE" "$lt_s" "$lt_bytes" <<'PY'
import json, sys
S, B, O, N = float(sys.argv[1]), float(sys.argv[2]) / 8, float(sys.argv[3]) / 8, int(sys.argv[4])
curl_s, curl_b, wc_s, wc_b, pass_b, prep = map(float, sys.argv[5:11])
lt_s, lt_b = float(sys.argv[13]), float(sys.argv[14])
receivers = N - 2
s_over_b = S / B
bound = S / min(B, O)                 # full duplex, docs/origin.md
wc_bound = S / min(B, O) + bound      # the publisher's pass first
curl_bound = receivers * S / O if receivers * S / O > s_over_b else s_over_b
out = {
    "bench": "origin_netns", "hosts": N, "receivers": receivers, "model_bytes": int(S),
    "rate": sys.argv[11], "origin_rate": sys.argv[12], "s_over_b_s": round(s_over_b, 2),
    "curl_s": round(curl_s, 2), "curl_vs_s_over_b": round(curl_s / s_over_b, 2),
    "curl_origin_bytes_over_s": round(curl_b / S, 3),
    "weightcast_s": round(wc_s, 2), "weightcast_vs_s_over_b": round(wc_s / s_over_b, 2),
    "weightcast_vs_bound_with_pass": round(wc_s / wc_bound, 2),
    "weightcast_prepare_s": round(prep, 2),
    "weightcast_origin_bytes_over_s": round(wc_b / S, 3),
    "weightcast_manifest_pass_over_s": round(pass_b / S, 3),
    "weightcast_distribution_origin_bytes_over_s": round((wc_b - pass_b) / S, 3),
    "curl_over_weightcast": round(curl_s / wc_s, 2),
    "libtorrent_s": round(lt_s, 2), "libtorrent_vs_s_over_b": round(lt_s / s_over_b, 2),
    "libtorrent_origin_bytes_over_s": round(lt_b / S, 3),
    "libtorrent_over_weightcast": round(lt_s / wc_s, 2),
}
print(f"S/B {s_over_b:.2f}s | curl {curl_s:.2f}s ({curl_s/s_over_b:.2f}x S/B, origin {curl_b/S:.2f}x S) | "
      f"libtorrent {lt_s:.2f}s ({lt_s/s_over_b:.2f}x S/B) | "
      f"weightcast {wc_s:.2f}s ({wc_s/s_over_b:.2f}x S/B, origin {wc_b/S:.2f}x S)", file=sys.stderr)
print(json.dumps(out))
PY
