#!/usr/bin/env bash
# Certificate mode (docs/security.md): every node holds the CA certificate (--ca) and its own
# (--cert, --key); every connection is mutual TLS, and a node may claim only a role its
# certificate holds. A version is accepted only when its manifest is signed by a certificate of
# that CA with the publisher role for the channel. A certified publisher's versions commit; a machine
# with only an agent certificate, a publisher of another channel, a certificate of another CA, a
# revoked one and the shared cluster secret alone are each refused with a logged reason, and
# nothing of theirs is staged or committed. A rollback needs an operator's signed order: with an
# agent's certificate it is refused, and the agent checks the operator's order itself before it
# switches back. (That an agent checks a relayed manifest for itself is
# tests/unit/node/swarm_node_test.cc's CertifiedManifestsOnly; that it refuses a rollback without
# an order, tests/unit/trust/rollback_order_test.cc.)
source "$(dirname "$0")/rollout_lib.bash" "$1"

ca="$work/ca"
"$wc" ca init --dir "$ca" 2>/dev/null
[[ "$(stat -c %a "$ca/ca.key")" == 600 ]] || fail "ca.key is not mode 0600"
issue() { "$wc" ca issue --dir "$ca" --name "$1" --role "$2" --out "$work/$1" >/dev/null; }
issue trainer publisher:policy
issue sampler agent
issue other-trainer publisher:reward-model
issue lost-trainer publisher:policy
issue alice operator
issue coordinator coordinator
# a1's certificate binds it to the node id start_agent gives it (rollout_lib.bash).
a1_id=$((1000 + $(cksum <<<"a1" | cut -d' ' -f1) % 100000))
"$wc" ca issue --dir "$ca" --name agent-a1 --role agent --node-id "$a1_id" \
  --out "$work/agent-a1" >/dev/null
"$wc" ca show "$work/agent-a1.pem" | grep -q "node id   $a1_id" || fail "ca show: no node id"
node_certs() { echo --ca "$ca/ca.pem" --cert "$work/$1.pem" --key "$work/$1.key"; }
# The tools of rollout_lib.bash talk to the coordinator as the operator.
status_json() {
  # shellcheck disable=SC2046
  "$wc" status --coordinator "$coord" --channel "$channel" --once --json \
    --secret-file "$work/secret" $(node_certs alice) 2>/dev/null
}
"$wc" ca init --dir "$work/foreign-ca" 2>/dev/null
"$wc" ca issue --dir "$work/foreign-ca" --name intruder --role 'publisher:*' \
  --out "$work/intruder" >/dev/null
"$wc" ca revoke --dir "$ca" "$work/lost-trainer.pem" >/dev/null
"$wc" ca show "$work/trainer.pem" | grep -q "roles     publisher:policy" || fail "ca show"

make_versions 3
# shellcheck disable=SC2046
start_coordinator --commit-policy all $(node_certs coordinator)
# shellcheck disable=SC2046
start_agent a1 $(node_certs agent-a1)

timeout 60 "$wc" publish --coordinator "$coord" --store "$work/pub" --channel "$channel" \
  --dir "$work/ckpt/1" --chunk-size 1MiB --until complete --secret-file "$work/secret" \
  --ca "$ca/ca.pem" --cert "$work/trainer.pem" --key "$work/trainer.key" >>"$work/pub.log" 2>&1 ||
  fail "the certified publisher's v1 did not complete"
all_current 1 a1 || fail "the certified publisher's v1 is not current on a1"
same_files 1 a1 || fail "a1's v1 differs from the publisher's"

# attempt NAME FLAGS...: a one-shot publish of ckpt/2 from its own store; it must fail, and
# its output is kept in $work/NAME.out.
attempt() {
  local name="$1"
  shift
  if timeout 60 "$wc" publish --coordinator "$coord" --store "$work/store-$name" \
    --channel "$channel" --dir "$work/ckpt/2" --chunk-size 1MiB --secret-file "$work/secret" \
    "$@" >"$work/$name.out" 2>&1; then
    fail "$name: the publish succeeded"
  fi
}
refused() {  # refused NAME TEXT: the attempt's output names TEXT
  grep -q -- "$2" "$work/$1.out" || { cat "$work/$1.out"; fail "$1: no '$2' in its output"; }
}

attempt agent-cert --ca "$ca/ca.pem" --cert "$work/sampler.pem" --key "$work/sampler.key"
refused agent-cert "'sampler' (serial [0-9A-F]*, roles: agent) does not hold the publisher role"
attempt other-channel --ca "$ca/ca.pem" --cert "$work/other-trainer.pem" \
  --key "$work/other-trainer.key"
refused other-channel "roles: publisher:reward-model) may not publish on 'policy'"
attempt foreign --ca "$work/foreign-ca/ca.pem" --cert "$work/intruder.pem" \
  --key "$work/intruder.key"
refused foreign "TLS handshake failed"
attempt revoked --ca "$ca/ca.pem" --cert "$work/lost-trainer.pem" --key "$work/lost-trainer.key"
refused revoked "certificate 'lost-trainer'.*certificate revoked"
# Without certificate flags a node cannot even connect, and is told why.
attempt plain
refused plain "this node runs in certificate mode"
# The flags themselves: a certified cluster's publisher needs its key, and a key file others can
# read is refused before anything starts.
attempt no-key --ca "$ca/ca.pem"
refused no-key "give --cert and --key"
chmod 644 "$work/trainer.key"
attempt open-key --ca "$ca/ca.pem" --cert "$work/trainer.pem" --key "$work/trainer.key"
refused open-key "chmod 600"
chmod 600 "$work/trainer.key"

grep -q "may not publish on 'policy'" "$work/coord.log" || fail "the coordinator did not log why"
grep -q "does not hold the publisher role" "$work/coord.log" || fail "no refused role in the log"
[[ "$(fleet_current)" == 1 ]] || fail "the fleet moved off v1"
[[ ! -e "$work/a1/$channel/versions/2" ]] || fail "a1 has a v2"

# v2 from the certified publisher, then back to v1: only with an operator's order.
timeout 60 "$wc" publish --coordinator "$coord" --store "$work/pub" --channel "$channel" \
  --dir "$work/ckpt/2" --chunk-size 1MiB --until complete --secret-file "$work/secret" \
  --ca "$ca/ca.pem" --cert "$work/trainer.pem" --key "$work/trainer.key" >>"$work/pub.log" 2>&1 ||
  fail "the certified publisher's v2 did not complete"
# The agents commit on the coordinator's signed decision, checked against their CA.
wait_for 10 grep -q "taking the commit of v2 signed by coordinator 'coordinator'" "$work/a1.log" ||
  fail "a1 did not check the coordinator's signed commit"
! grep -q "refused the commit" "$work/a1.log" || fail "a1 refused a signed decision"
rollback() {  # rollback NAME FLAGS...: output in $work/NAME.out
  local name="$1"
  shift
  timeout 60 "$wc" rollback --coordinator "$coord" --secret-file "$work/secret" "$channel" \
    --ca "$ca/ca.pem" "$@" >"$work/$name.out" 2>&1
}
# A tool connects with any certificate of the CA; its rollback still needs an operator's order.
rollback agent-order --cert "$work/sampler.pem" --key "$work/sampler.key" &&
  fail "a rollback ordered by an agent went through"
refused agent-order "'sampler' (serial [0-9A-F]*, roles: agent) is not an operator"
[[ "$(current_of a1)" == 2 ]] || fail "a1 left v2 on a refused rollback"
rollback operator --cert "$work/alice.pem" --key "$work/alice.key" --wait ||
  { cat "$work/operator.out"; fail "the operator's rollback failed"; }
[[ "$(current_of a1)" == 1 ]] || fail "a1 is not back on v1"
grep -q "rolled back to v1 by operator 'alice'" "$work/coord.log" || fail "no operator in the log"
# The agent checked the operator's order itself (the coordinator relays it with the rollback).
grep -q "rolling back to v1 by order of operator 'alice'" "$work/a1.log" ||
  fail "a1 did not check the operator's order"
# A certificate revoked while its connections are open: they are cut within about a second (the
# new CRL is read within one, open connections are checked again every second), not only refused
# at the next connect.
"$wc" ca revoke --dir "$ca" "$work/agent-a1.pem" >/dev/null
wait_for 10 grep -q "no longer passes.*'agent-a1'.*revoked" "$work/coord.log" ||
  { tail -5 "$work/coord.log"; fail "a1's open connection outlived its certificate's revocation"; }
echo "PASS trust_roles"
