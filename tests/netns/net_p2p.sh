#!/usr/bin/env bash
# Two nodes in separate network namespaces (198.18.0.1/24 <-> 198.18.0.2/24 on a veth pair,
# shaped to 1 Gbit/s): an authenticated transfer arrives whole; a sender with the wrong secret
# is refused and moves nothing. Exits 77 (skipped) when not root or namespaces are unavailable.
#
#   bash tests/netns/net_p2p.sh path/to/weightcast
set -uo pipefail

WC=${1:?usage: net_p2p.sh path/to/weightcast}
if [[ $(id -u) -ne 0 ]]; then echo "SKIP: needs root for network namespaces"; exit 77; fi
A=wctest-a-$$
B=wctest-b-$$
VA=wcta$$
VB=wctb$$
tmp=$(mktemp -d)
cleanup() {
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
# `ip netns exec` remounts /; in a chroot (not a mount point) it cannot, so do not even start.
if ! mountpoint -q / 2>/dev/null; then echo "SKIP: / is not a mount point (a chroot?)"; exit 77; fi
if ! ip netns add "$A" 2>/dev/null; then echo "SKIP: cannot create network namespaces"; exit 77; fi
ip netns add "$B" || exit 77
# A chroot or container may allow creating a namespace but not entering it.
if ! ip netns exec "$A" true 2>/dev/null; then echo "SKIP: cannot enter network namespaces here"; exit 77; fi
set -e
ip link add "$VA" type veth peer name "$VB"
ip link set "$VA" netns "$A"
ip link set "$VB" netns "$B"
ip -n "$A" addr add 198.18.0.1/24 dev "$VA"
ip -n "$B" addr add 198.18.0.2/24 dev "$VB"
ip -n "$A" link set lo up
ip -n "$B" link set lo up
ip -n "$A" link set "$VA" up
ip -n "$B" link set "$VB" up
ip netns exec "$B" tc qdisc add dev "$VB" root tbf rate 1gbit burst 512kb latency 20ms
set +e

printf 'netns-test-secret-0123456789\n' >"$tmp/secret"
printf 'a-different-secret-9876543210\n' >"$tmp/wrong"
fail() { echo "FAIL: $*"; exit 1; }

# 1. A good transfer of 64 MiB arrives whole.
timeout 30 ip netns exec "$A" "$WC" net recv --listen 198.18.0.1:47300 --secret-file "$tmp/secret" \
  --timeout 20 >"$tmp/recv.json" 2>"$tmp/recv.err" &
recv=$!
sleep 0.5
timeout 30 ip netns exec "$B" "$WC" net send --connect 198.18.0.1:47300 --secret-file "$tmp/secret" \
  --bytes 64MiB --timeout 20 >"$tmp/send.json" 2>"$tmp/send.err" || fail "send: $(cat "$tmp/send.err")"
wait "$recv" || fail "recv: $(cat "$tmp/recv.err")"
grep -q '"bytes":67108864' "$tmp/recv.json" || fail "receiver did not get 64 MiB: $(cat "$tmp/recv.json")"
echo "ok: 64 MiB across namespaces: $(tail -1 "$tmp/send.json")"

# 2. Wrong secret: the sender is refused, the receiver logs why and keeps waiting.
timeout 15 ip netns exec "$A" "$WC" net recv --listen 198.18.0.1:47301 --secret-file "$tmp/secret" \
  --timeout 8 >"$tmp/recv2.json" 2>"$tmp/recv2.err" &
recv=$!
sleep 0.5
if timeout 10 ip netns exec "$B" "$WC" net send --connect 198.18.0.1:47301 \
  --secret-file "$tmp/wrong" --bytes 1MiB --timeout 5 >"$tmp/send2.json" 2>"$tmp/send2.err"; then
  fail "a sender with the wrong secret was accepted"
fi
wait "$recv" && fail "receiver reported a transfer from an unauthenticated sender"
grep -q "refused peer" "$tmp/recv2.err" || fail "no logged reason: $(cat "$tmp/recv2.err")"
grep -q "UNAUTHENTICATED" "$tmp/recv2.err" || fail "reason is not authentication: $(cat "$tmp/recv2.err")"
echo "ok: wrong secret refused: $(grep 'refused peer' "$tmp/recv2.err" | head -1)"
echo PASS
