#!/usr/bin/env bash
# Certificate mode over UCX (docs/security.md, "UCX"): a certified publisher and two certified
# agents with `--transport auto` move a version over UCX, where each node proves its
# certificate's key in the handshake (no TLS). The version commits byte-identical, bytes moved
# over UCX, and each node said at start that its UCX links are authenticated, not encrypted.
# Skipped (77) when the binary was built without UCX.
source "$(dirname "$0")/swarm_lib.bash" "$1"
if "$wc" net recv --listen 127.0.0.1:0 --transport ucx --timeout 0.2 2>&1 | grep -q "without UCX"; then
  echo "SKIP: built without UCX"
  exit 77
fi
export UCX_TLS=sm,tcp UCX_NET_DEVICES=lo
ca="$work/ca"
"$wc" ca init --dir "$ca" 2>/dev/null
issue() { "$wc" ca issue --dir "$ca" --name "$1" --role "$2" --out "$work/$1" >/dev/null; }
issue coordinator coordinator
issue trainer publisher:policy
issue a1 agent
issue a2 agent
certs() { echo --ca "$ca/ca.pem" --cert "$work/$1.pem" --key "$work/$1.key"; }
metric() {  # metric URL NAME LABEL_MATCH: sum of the matching series
  curl -s "$1" | awk -v n="$2" -v m="$3" '$1 ~ "^"n"{" && $1 ~ m {s += $2} END {print s + 0}'
}
metrics_url() { grep -o 'http://[0-9.:]*/metrics' "$work/$1.log" | head -1; }

MODEL_SIZE=16MiB make_versions 1
# shellcheck disable=SC2046
start_coordinator $(certs coordinator)
# shellcheck disable=SC2046
start_agent a1 --transport auto --metrics 127.0.0.1:0 $(certs a1)
# shellcheck disable=SC2046
start_agent a2 --transport auto --metrics 127.0.0.1:0 $(certs a2)
# shellcheck disable=SC2046
publish 1 --transport auto $(certs trainer)
wait_for 90 all_current 1 a1 a2 || fail "v1 was not committed on both agents"
for a in a1 a2; do same_files 1 "$a" || fail "$a's v1 differs from the publisher's"; done
for a in a1 a2; do wait_for 10 test -n "$(metrics_url $a)" || fail "$a serves no metrics"; done
ucx=$(($(metric "$(metrics_url a1)" weightcast_agent_transport_bytes_total 'transport="ucx"') +
  $(metric "$(metrics_url a2)" weightcast_agent_transport_bytes_total 'transport="ucx"')))
((ucx > 1000000)) || fail "the agents moved only $ucx bytes over UCX"
for log in a1 a2 pub; do
  grep -q "are not encrypted" "$work/$log.log" || fail "$log did not say UCX is not encrypted"
done
! grep -q "key proof" "$work"/a*.log "$work/pub.log" || fail "a UCX handshake was refused"
echo "PASS: v1 committed on 2 certified agents over UCX ($ucx bytes), keys proven in the handshake"
