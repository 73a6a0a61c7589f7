#!/usr/bin/env bash
# Rollback fault loop: rounds of "roll back to a random earlier version (kept by some,
# all or none of the agents), restart an agent or add one, publish the next version". After
# every step the invariant must hold: every live agent's current version is the coordinator's
# current version, the agents' files of it are byte-identical, and the next publish commits.
# Bounded: ROUNDS rounds (default 20) and a wall-clock budget of 240 s.
source "$(dirname "$0")/rollout_lib.bash" "$1"

rounds="${ROUNDS:-20}"
budget=240
seed="${SEED:-$RANDOM}"
RANDOM=$seed
echo "seed $seed"
agents=(a1 a2 a3)
max_agents=5

MODEL_SIZE=2MiB CHUNK_SIZE=256KiB make_versions $((rounds + 1))
export CHUNK_SIZE=256KiB
start_coordinator --commit-policy all --prepare-deadline 20s
for a in "${agents[@]}"; do start_agent "$a"; done
rollback() {
  "$wc" rollback --coordinator "$coord" --secret-file "$work/secret" "$channel" "$@"
}

# Every live agent has the fleet's current version, byte-identical to the first agent's.
fleet_settled() {
  local want a
  want="$(fleet_current)"
  [[ -n "$want" && "$want" != 0 ]] || return 1
  for a in "${agents[@]}"; do [[ "$(current_of "$a")" == "$want" ]] || return 1; done
}
check_invariant() {
  local want a
  wait_for 60 fleet_settled || {
    for a in "${agents[@]}"; do echo "$a: current v$(current_of "$a")"; done
    fail "round $1: the agents did not all reach the fleet's current v$(fleet_current)"
  }
  want="$(fleet_current)"
  for a in "${agents[@]:1}"; do
    diff -r "$work/${agents[0]}/$channel/versions/$want" "$work/$a/$channel/versions/$want" \
      >/dev/null || fail "round $1: $a's v$want differs from ${agents[0]}'s"
  done
}

publish 1
wait_for 40 all_current 1 "${agents[@]}" || fail "v1 was not committed"
published=1
refused=0
accepted=0
started=$SECONDS
for ((round = 1; round <= rounds; round++)); do
  ((SECONDS - started < budget)) || fail "over the ${budget}s budget after $((round - 1)) rounds"
  current="$(fleet_current)"
  if ((current > 1 && RANDOM % 3 != 0)); then
    # Half the time the one below the current one (kept by every agent that followed the
    # channel through it), else any earlier one (kept by some, all or none). With two of every
    # three rounds rolling back, a run of 20 rounds accepts none about once in 10^4 seeds; when
    # the near choice also reached two below, about once in 50 seeds did (seed 12856 among them).
    if ((RANDOM % 2 == 0)); then
      target=$((current - 1))
    else
      target=$((1 + RANDOM % (current - 1)))
    fi
    if out="$(rollback "$target" 2>&1)"; then
      accepted=$((accepted + 1))
      echo "round $round: rollback to v$target accepted"
    else
      refused=$((refused + 1))
      echo "round $round: rollback to v$target refused: $out"
      grep -Eq 'kept by none|never committed|is not below' <<<"$out" || fail "unexpected refusal: $out"
      [[ "$(fleet_current)" == "$current" ]] || fail "a refused rollback changed the current version"
    fi
    check_invariant "$round"
  fi
  case $((RANDOM % 3)) in
    0)
      a="${agents[RANDOM % ${#agents[@]}]}"
      echo "round $round: restart $a"
      kill_process "$a"
      start_agent "$a"
      ;;
    1)
      if ((${#agents[@]} < max_agents)); then
        a="a$((${#agents[@]} + 1))"
        echo "round $round: $a joins"
        agents+=("$a")
        start_agent "$a"
      fi
      ;;
  esac
  check_invariant "$round"
  published=$((published + 1))
  publish "$published"
  wait_for 60 all_current "$published" "${agents[@]}" ||
    fail "round $round: v$published was not committed by every agent"
  for a in "${agents[@]}"; do same_files "$published" "$a" || fail "$a's v$published differs"; done
done
echo "rollbacks: $accepted accepted, $refused refused; $published versions published"
((accepted > 0)) || fail "no rollback was accepted: the loop tested nothing"
echo "PASS rollback_fault_loop"
