#!/usr/bin/env bash
# UCX with TCP fallback in one fleet (docs/transport_ucx.md): four agents and a
# publisher on loopback. a1 and a3 use UCX (`--transport auto`); a2 runs with --transport tcp (UCX disabled,
# its address offers none); a4's UCX is killed mid-transfer by the fault switch
# (WEIGHTCAST_UCX_FAIL_AFTER_BYTES). The version commits everywhere with every byte right, a3
# moved bytes over UCX, a2 over TCP only, and a4's lost UCX connections came back over TCP.
# Skipped (77) when the binary was built without UCX.
source "$(dirname "$0")/swarm_lib.bash" "$1"
if "$wc" net recv --listen 127.0.0.1:0 --transport ucx --timeout 0.2 2>&1 | grep -q "without UCX"; then
  echo "SKIP: built without UCX"
  exit 77
fi
# UCX's shared memory and loopback tcp only (UCX may not use another interface here).
export UCX_TLS=sm,tcp UCX_NET_DEVICES=lo
MODEL_SIZE=24MiB make_versions 1
start_coordinator

status_json() {
  "$wc" status --coordinator "$coord" --channel "$channel" --once --json \
    --secret-file "$work/secret" 2>/dev/null
}
metric() {  # metric URL NAME LABEL_MATCH: sum of the matching series
  curl -s "$1" | awk -v n="$2" -v m="$3" '$1 ~ "^"n"{" && $1 ~ m {s += $2} END {print s + 0}'
}
metrics_url() { grep -o 'http://[0-9.:]*/metrics' "$work/$1.log" | head -1; }

start_agent a1 --transport auto --metrics 127.0.0.1:0
start_agent a2 --transport tcp --metrics 127.0.0.1:0
start_agent a3 --transport auto --metrics 127.0.0.1:0
WEIGHTCAST_UCX_FAIL_AFTER_BYTES=$((3 << 20)) start_agent a4 --transport auto --metrics 127.0.0.1:0
publish 1 --until never --transport auto
wait_for 90 all_current 1 a1 a2 a3 a4 || fail "v1 was not committed on every agent"
for a in a1 a2 a3 a4; do same_files 1 "$a" || fail "$a's v1 differs from the publisher's"; done

addresses="$(status_json)"
python3 - "$addresses" "$(node_id_of a2)" "$(node_id_of a3)" <<'PY' || fail "peer addresses"
import json, sys
s = json.loads(sys.argv[1])
by_id = {str(n["node_id"]): n.get("address", "") for n in s["nodes"]}
assert ",ucx=" not in by_id[sys.argv[2]], f"a2 (tcp only) offers UCX: {by_id[sys.argv[2]]}"
assert ",ucx=" in by_id[sys.argv[3]], f"a3 offers no UCX: {by_id[sys.argv[3]]}"
PY

for a in a1 a2 a3 a4; do wait_for 10 test -n "$(metrics_url $a)" || fail "$a serves no metrics"; done
ucx_a3=$(metric "$(metrics_url a3)" weightcast_agent_transport_bytes_total 'transport="ucx"')
ucx_a2=$(metric "$(metrics_url a2)" weightcast_agent_transport_bytes_total 'transport="ucx"')
((ucx_a3 > 1000000)) || fail "a3 moved only $ucx_a3 bytes over UCX"
((ucx_a2 == 0)) || fail "a2 (--transport tcp) moved $ucx_a2 bytes over UCX"
grep -q "fault switch" "$work/a4.log" || fail "a4's fault switch never tripped"
# Whoever connected to a4 (or a4 itself) noted the failure and fell back to TCP.
grep -qE "connects to it use TCP|; using TCP" "$work"/a*.log "$work/pub.log" ||
  fail "no UCX connection was retried over TCP"
# a4 ended with peers over TCP only; a3 still has some over UCX.
wait_for 10 test "$(metric "$(metrics_url a4)" weightcast_agent_peer_connections 'transport="ucx"')" = 0 ||
  fail "a4 still has UCX peers"
ucx_peers_a3=$(metric "$(metrics_url a3)" weightcast_agent_peer_connections 'transport="ucx"')
((ucx_peers_a3 >= 1)) || fail "a3 has no peer over UCX"
"$wc" status --coordinator "$coord" --channel "$channel" --once --secret-file "$work/secret" \
  | grep -q "peers over UCX" || fail "status does not say which peers use UCX"
echo "PASS: v1 committed on 4 agents (a2 tcp only, a4 UCX killed mid-transfer); a3 moved $ucx_a3 bytes over UCX"
