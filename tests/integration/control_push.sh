#!/usr/bin/env bash
# Long polls end to end: with a 6 s heartbeat timeout the agents heartbeat only every
# 2 s, yet every agent must hear of a new version, and of the commit decision, well within that,
# because each keeps one heartbeat held at the coordinator (with periodic heartbeats alone, the
# slowest of three agents waits 1.5 s on average for each). Three agents on loopback; two
# versions (a full one, then a delta step). Also: agents that keep their heartbeats held stay
# alive (nobody dies while the test idles past the timeout).
# shellcheck source=tests/integration/swarm_lib.bash
source "$(dirname "$0")/swarm_lib.bash" "$1"

HEARTBEAT_TIMEOUT=6s start_coordinator

agents=(a1 a2 a3)
MODEL_SIZE=4MiB make_versions 2
for a in "${agents[@]}"; do start_agent "$a" --log-format text; done
wait_for 20 all_registered "${agents[@]}" || fail "the agents did not register"
# The rollout decider takes no decision for one heartbeat timeout after the coordinator starts
# (its recovery grace): publish after it.
sleep 5

epoch_of() { date -u -d "$(cut -d' ' -f1 <<<"$1" | sed 's/T/ /; s/Z$//')" +%s.%N; }
# latest_line PATTERN FILE...: the epoch time of the latest first match of PATTERN among FILEs.
latest_line() {
  local pattern="$1" f line t latest=0
  shift
  for f in "$@"; do
    line="$(grep -m1 -- "$pattern" "$f")" || return 1
    t="$(epoch_of "$line")"
    latest="$(awk -v a="$latest" -v b="$t" 'BEGIN { print (b > a) ? b : a }')"
  done
  echo "$latest"
}
logs() { local a; for a in "${agents[@]}"; do echo "$work/$a.log"; done; }

for v in 1 2; do
  publish "$v" --log-format text
  wait_for 20 all_current "$v" "${agents[@]}" || fail "v$v did not reach every agent"
  same_files "$v" "${agents[@]}"
  published="$(epoch_of "$(grep -m1 "published policy v$v " "$work/coord.log")")" ||
    fail "the coordinator did not log v$v"
  # shellcheck disable=SC2046
  fetching="$(latest_line "agent: fetching v$v\$" $(logs))" || fail "an agent never fetched v$v"
  decided="$(epoch_of "$(grep -m1 "policy v$v: DECISION_COMMIT" "$work/coord.log")")" ||
    fail "the coordinator never committed v$v"
  # shellcheck disable=SC2046
  committed="$(latest_line "agent: committed v$v\$" $(logs))"
  hear=$(awk -v a="$published" -v b="$fetching" 'BEGIN { printf "%.3f", b - a }')
  act=$(awk -v a="$decided" -v b="$committed" 'BEGIN { printf "%.3f", b - a }')
  echo "v$v: every agent fetching ${hear}s after the publish, committed ${act}s after the decision"
  # Each takes milliseconds with long polls; without them the slowest agent waits up to the 2 s
  # interval (both under 0.75 s by chance: 0.3%).
  awk -v h="$hear" -v c="$act" 'BEGIN { exit !(h < 0.75 && c < 0.75) }' ||
    fail "v$v: agents heard too late (${hear}s / ${act}s)"
  kill_process pub
done

# Idle past the timeout with every heartbeat held: nobody is declared dead.
sleep 7
for a in "${agents[@]}"; do
  if grep -q "node $(node_id_of "$a") .*dead" "$work/coord.log"; then
    fail "$a was declared dead while polling"
  fi
done
echo "PASS: pushed versions and decisions in milliseconds with a 2 s heartbeat interval; held agents stay alive"
