#!/usr/bin/env bash
# The coordinator's link to etcd in certificate mode (docs/security.md): etcd serves TLS with a
# certificate of the cluster CA and requires client certificates of it (--client-cert-auth); the
# coordinator reaches it at https:// with its own certificate and keeps the version log there; a
# certified agent commits a certified publisher's version. etcd reached without a client
# certificate refuses, and a coordinator given https:// without a CA stops at once, saying why.
if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
  echo "SKIP: etcd is not installed (apt-get install etcd-server etcd-client)"
  exit 77
fi
source "$(dirname "$0")/rollout_lib.bash" "$1"
default_model_size=2MiB

ca="$work/ca"
"$wc" ca init --dir "$ca" 2>/dev/null
issue() { "$wc" ca issue --dir "$ca" --out "$work/$1" --name "$@" >/dev/null; }
issue etcd --host 127.0.0.1
issue coordinator --role coordinator
issue trainer --role publisher:policy
a1_id=$((1000 + $(cksum <<<"a1" | cut -d' ' -f1) % 100000))
issue agent-a1 --role agent --node-id "$a1_id"
node_certs() { echo --ca "$ca/ca.pem" --cert "$work/$1.pem" --key "$work/$1.key"; }

read -r client_port peer_port <<<"$(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')"
endpoint="https://127.0.0.1:$client_port"
etcd --name e1 --data-dir "$work/etcd" \
  --listen-client-urls "$endpoint" --advertise-client-urls "$endpoint" \
  --listen-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-cluster "e1=http://127.0.0.1:$peer_port" --initial-cluster-state new \
  --cert-file "$work/etcd.pem" --key-file "$work/etcd.key" --client-cert-auth \
  --trusted-ca-file "$ca/ca.pem" >>"$work/etcd.log" 2>&1 &
pids[etcd]=$!
etcdctl_tls() {
  ETCDCTL_API=3 etcdctl --endpoints "$endpoint" --cacert "$ca/ca.pem" --cert "$work/$1.pem" \
    --key "$work/$1.key" --command-timeout 2s "${@:2}"
}
wait_for 30 etcdctl_tls coordinator endpoint health >/dev/null || fail "etcd with TLS did not start"

# Without a client certificate etcd refuses.
if ETCDCTL_API=3 etcdctl --endpoints "$endpoint" --cacert "$ca/ca.pem" --command-timeout 2s \
  get /x >"$work/nocert.out" 2>&1; then
  fail "etcd answered a client without a certificate"
fi
# https:// without a CA: a flag error at once, naming the cause.
if timeout 20 "$wc" coordinator --listen 127.0.0.1:0 --etcd "$endpoint" \
  --secret-file "$work/secret" >"$work/noca.out" 2>&1; then
  fail "a coordinator started on https:// etcd without a CA"
fi
grep -q "https needs the CA" "$work/noca.out" || { cat "$work/noca.out"; fail "no reason given"; }

coord="127.0.0.1:$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# shellcheck disable=SC2046
"$wc" coordinator --listen "$coord" --etcd "$endpoint" --lease-ttl 2s --commit-policy all \
  --heartbeat-timeout 1500ms --secret-file "$work/secret" $(node_certs coordinator) \
  >>"$work/coord.log" 2>&1 &
pids[coord]=$!
wait_for 30 grep -q "leading" "$work/coord.log" || fail "the coordinator did not lead through etcd"
make_versions 1
# shellcheck disable=SC2046
start_agent a1 $(node_certs agent-a1)
# shellcheck disable=SC2046
timeout 60 "$wc" publish --coordinator "$coord" --store "$work/pub" --channel "$channel" \
  --dir "$work/ckpt/1" --chunk-size 1MiB --until complete --secret-file "$work/secret" \
  $(node_certs trainer) >>"$work/pub.log" 2>&1 || fail "the certified v1 did not complete"
[[ "$(current_of a1)" == 1 ]] || fail "a1 did not commit v1"
# The log is in etcd once the publish completed; etcdctl's own 2 s command deadline can run out
# on a busy machine, so its query is asked again (its last answer is shown on failure).
log_in_etcd() {
  etcdctl_tls coordinator get --prefix /weightcast/default/log/ --keys-only >"$work/log-keys.out" \
    2>&1 && grep -q '^/weightcast/default/log/' "$work/log-keys.out"
}
wait_for 20 log_in_etcd || { cat "$work/log-keys.out"; fail "no version log in etcd"; }
echo "PASS etcd_tls"
