#!/usr/bin/env bash
# The control plane on a 3-member etcd cluster while members die.
#  1. One member killed: rollouts continue.
#  2. Two killed (no quorum): nothing commits, agents keep serving their current version,
#     `status` says why; both restored: the rollout goes on.
#  3. A coordinator with a stale view (paused past its lease while the other took over and
#     committed) does not override the newer decision: its writes are fenced by revision.
source "$(dirname "$0")/etcd_lib.bash" "$1"

agents=(a1 a2 a3)
make_versions 5
start_etcd_cluster
start_leader_and_standby
for a in "${agents[@]}"; do start_agent "$a"; done
publish 1
wait_for 60 all_current 1 "${agents[@]}" || fail "v1 was not committed"

echo "1. kill -9 one etcd member (e3): v2 must still commit"
kill_process e3
publish 2
wait_for 60 all_current 2 "${agents[@]}" || fail "v2 did not commit with 2 of 3 etcd members"
for a in "${agents[@]}"; do same_files 2 "$a" || fail "$a's v2 differs"; done

echo "2. kill -9 a second member (e2): no quorum, v3 must not commit"
kill_process e2
publish 3
sleep 6
for a in "${agents[@]}"; do
  [[ "$(current_of "$a")" == 2 ]] || fail "$a left v2 while etcd had no quorum"
done
[[ "$(decision_of 3)" != COMMIT ]] || fail "v3 committed without an etcd quorum"
status_text="$("$wc" status --coordinator "$coords" --channel "$channel" --once \
  --secret-file "$work/secret" 2>&1 || true)"
echo "$status_text" | head -n 4
tr '\n' ' ' <<<"$status_text" | grep -q "control plane: etcd .*without *quorum" ||
  fail "status does not say that etcd has no quorum: $status_text"
# The agents still serve: their heartbeats are answered (they are live in status).
live="$(status_json | python3 -c '
import json, sys
print(sum(1 for n in json.load(sys.stdin).get("nodes", []) if n.get("alive") and not n.get("source")))')"
[[ "$live" -ge 3 ]] || fail "only $live live agents while etcd had no quorum"

echo "   restore e2 and e3: v3 must commit"
start_etcd_member e2
start_etcd_member e3
wait_for 60 all_current 3 "${agents[@]}" || fail "v3 did not commit after the quorum came back"
for a in "${agents[@]}"; do same_files 3 "$a" || fail "$a's v3 differs"; done

echo "3. pause the leader past its lease; the standby takes over and commits v4"
stale="$(leader_name)" || fail "no leader"
kill -STOP "${pids[$stale]}"
wait_for 30 bash -c "[[ \"\$(ETCDCTL_API=3 etcdctl --endpoints '$etcd_endpoints' get /weightcast/default/leader --print-value-only)\" != '${coord_addr[$stale]}' ]]" ||
  fail "the standby did not take over from the paused leader"
publish 4
wait_for 60 all_current 4 "${agents[@]}" || fail "v4 did not commit under the new leader"
records_before="$(etcd_log | wc -l)"
kill -CONT "${pids[$stale]}"
# Straight at the stale coordinator: a rollback it would log over the newer state.
rollback_out="$("$wc" rollback --coordinator "${coord_addr[$stale]}" "$channel" \
  --secret-file "$work/secret" 2>&1)" && fail "the stale coordinator accepted a rollback: $rollback_out"
echo "   stale coordinator refused: $rollback_out"
sleep 3
[[ "$(fleet_current)" == 4 ]] || fail "the fleet left v4 after the stale coordinator came back"
[[ "$(etcd_log | wc -l)" == "$records_before" ]] || fail "the stale coordinator wrote to the log"
grep -q "no longer leads" "$work/$stale.log" || fail "the stale coordinator did not step down"
twice="$(versions_not_decided_once)"
[[ -z "$twice" ]] || fail "versions not decided exactly once: $twice"
echo "PASS etcd_quorum"
