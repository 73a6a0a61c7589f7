#!/usr/bin/env bash
# Who gets what: an agent with another cluster secret gets nothing (no registration, no peer
# connection, no byte); an agent that wants only some tensors (--tensors) fetches only the
# chunks holding them, which its bytes-received metric shows, and commits a partial version.
# shellcheck source=tests/integration/swarm_lib.bash
source "$(dirname "$0")/swarm_lib.bash" "$1"

start_coordinator
make_versions 1
start_agent a1
head -c 48 /dev/urandom | base64 >"$work/other-secret"
"$wc" agent --coordinator "$coord" --store "$work/intruder" --channel "$channel" \
  --node-id 999 --secret-file "$work/other-secret" >>"$work/intruder.log" 2>&1 &
pids[intruder]=$!
start_agent sub --tensors 'model.layers.0.*' --metrics 127.0.0.1:0
publish 1 --until complete
wait_for 40 all_current 1 a1 || fail "v1 did not reach a1"
same_files 1 a1
wait_for 30 grep -q "v1 complete" "$work/sub.log" || fail "the subset agent did not complete"

received="$(metric weightcast_agent_bytes_received_total "$work/sub.log")"
total="$(du -cb "$work/ckpt/1"/* | tail -n 1 | cut -f1)"
[[ -n "$received" ]] || fail "no metric from the subset agent"
python3 -c "import sys; r, t = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if 0 < r < t / 3 else 1)" \
  "$received" "$total" || fail "the subset agent received $received of $total bytes"
# The subset agent commits a partial version (docs/sharded_publish.md, "Tensor subsets").
wait_for 30 all_current 1 sub || fail "the subset agent did not commit v1"
[[ -f "$work/sub/$channel/versions/1/.weightcast-partial.json" ]] ||
  fail "the subset agent's v1 is not marked partial"
# `publish --until complete` counts the subset agent done once its tensors are in, the rule of
# `weightcast status --until-complete`: the publisher leaves.
pub_exited() { ! kill -0 "${pids[pub]}" 2>/dev/null; }
wait_for 30 pub_exited || fail "publish --until complete did not return with a subset agent in the fleet"
wait "${pids[pub]}" || fail "publish --until complete failed"

# The intruder: still nothing, and it says why.
sleep 1
[[ "$(current_of intruder)" == 0 ]] || fail "the intruder got a version"
[[ ! -d "$work/intruder/$channel/staging" ]] || [[ -z "$(ls "$work/intruder/$channel/staging")" ]] ||
  fail "the intruder staged something"
grep -qi "unauthenticated\|refused\|handshake" "$work/intruder.log" ||
  fail "the intruder's log does not say it was refused"
echo "PASS: wrong secret gets nothing; subset agent received $received of $total bytes"
