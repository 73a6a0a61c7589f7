#!/usr/bin/env bash
# Sharded publish in certificate mode (docs/security.md, "Sharded publishes"): 4 ranks, each with
# its own publisher certificate, publish one version together to 2 certified agents; no one signs
# the assembled manifest: every reader checks each rank's signed part and assembles it itself.
# Both agents hold every rank's files byte for byte, the next step is a delta per part, and a
# rank whose certificate does not hold the publisher role is refused with the reason.
source "$(dirname "$0")/rollout_lib.bash" "$1"
# shellcheck source=tests/integration/sharded_lib.bash
source "$(dirname "$0")/sharded_lib.bash"

ca="$work/ca"
"$wc" ca init --dir "$ca" 2>/dev/null
issue() { "$wc" ca issue --dir "$ca" --name "$1" --role "$2" --out "$work/$1" >/dev/null; }
issue coordinator coordinator
issue a1 agent
issue a2 agent
issue alice operator
issue sampler agent
for ((r = 0; r < world; r++)); do issue "trainer-$r" publisher:policy; done
certs() { echo --ca "$ca/ca.pem" --cert "$work/$1.pem" --key "$work/$1.key"; }
rank_flags() { certs "trainer-$1"; }
status_json() {
  # shellcheck disable=SC2046
  "$wc" status --coordinator "$coord" --channel "$channel" --once --json \
    --secret-file "$work/secret" $(certs alice) 2>/dev/null
}

make_parts 2
# shellcheck disable=SC2046
start_coordinator --part-timeout 10s $(certs coordinator)
# shellcheck disable=SC2046
start_agent a1 $(certs a1)
# shellcheck disable=SC2046
start_agent a2 $(certs a2)

publish_step 1 0
echo "ok   4 certified ranks published v1; both agents assembled and hold every rank's files"

publish_step 2 1
echo "ok   v2 is a delta on v1, part by part"

# A rank that signs with an agent's certificate: refused, with the reason.
kill_process rank3 TERM
rc=0
# shellcheck disable=SC2046
timeout 60 "$wc" publish --coordinator "$coord" --store "$work/rank3" --channel "$channel" \
  --dir "$work/part/3/2" --rank 3 --world "$world" --writer-id trainer --chunk-size 256KiB \
  --secret-file "$work/secret" $(certs sampler) >/dev/null 2>"$work/intruder.log" || rc=$?
[[ "$rc" != 0 ]] || fail "a rank signing with an agent's certificate was taken"
grep -q "does not hold the publisher role\|may not publish" "$work/intruder.log" ||
  fail "the refusal does not say why: $(tail -n 2 "$work/intruder.log")"
echo "ok   a rank with an agent's certificate is refused: $(grep -o "'sampler'[^;]*" "$work/intruder.log" | head -n 1)"
echo "PASS publish_sharded_certified"
