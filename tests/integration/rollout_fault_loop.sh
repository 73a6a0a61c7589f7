#!/usr/bin/env bash
# Fault loop: rounds of "publish the next version, then SIGKILL the coordinator or an agent at a
# random point of the rollout and start it again". After each round, once the rollout settles,
# the invariant must hold: every agent's current version is one the coordinator committed, its
# files verify against the manifest, and all live agents have the fleet's current version.
# Bounded: ROUNDS rounds (default 8) and a wall-clock budget of 80 s.
source "$(dirname "$0")/rollout_lib.bash" "$1"

rounds="${ROUNDS:-8}"
budget=80
seed="${SEED:-$RANDOM}"
RANDOM=$seed
echo "seed $seed"
agents=(a1 a2 a3)

MODEL_SIZE=4MiB make_versions $((rounds + 1))
start_coordinator --commit-policy all --prepare-deadline 8s
for a in "${agents[@]}"; do start_agent "$a"; done
publish 1
wait_for 40 all_current 1 "${agents[@]}" || fail "v1 was not committed"

committed_versions() {
  status_json | python3 -c '
import json, sys
for ch in json.load(sys.stdin).get("channels", []):
    print(" ".join(str(e["version"]) for e in ch.get("versions", [])
                   if e.get("decision") == "DECISION_COMMIT"))'
}

# Every agent's current version was committed by the coordinator and verifies.
check_invariant() {
  local committed a c
  committed=" $(committed_versions) "
  for a in "${agents[@]}"; do
    c="$(current_of "$a")"
    [[ "$c" == 0 ]] && continue
    [[ "$committed" == *" $c "* ]] || fail "$a has current v$c, not committed (committed:$committed)"
    "$wc" store verify --root "$work/$a" --channel "$channel" "$c" >/dev/null ||
      fail "$a's current v$c does not verify"
  done
}

# The rollout settled: the newest version is decided and every agent has the fleet's current.
settled() {
  local v="$1" d cur
  d="$(decision_of "$v")"
  [[ "$d" == COMMIT || "$d" == ABORT ]] || return 1
  cur="$(fleet_current)"
  all_current "$cur" "${agents[@]}"
}

start=$SECONDS
for ((round = 2; round <= rounds + 1; round++)); do
  ((SECONDS - start < budget)) || { echo "budget spent after $((round - 2)) rounds"; break; }
  publish "$round"
  sleep "0.$((RANDOM % 10))"
  case $((RANDOM % 4)) in
    0)
      echo "round $round: kill -9 the coordinator"
      kill_process coord
      sleep "0.$((RANDOM % 10))"
      start_coordinator
      ;;
    *)
      victim="${agents[$((RANDOM % ${#agents[@]}))]}"
      echo "round $round: kill -9 $victim"
      kill_process "$victim"
      sleep "0.$((RANDOM % 10))"
      start_agent "$victim"
      ;;
  esac
  wait_for 30 settled "$round" || fail "round $round did not settle"
  check_invariant
  echo "round $round: v$round $(decision_of "$round"), fleet on v$(fleet_current)"
done
# A kill can abort a round's version; the last round's version must have committed unless it
# was aborted, and the fleet agrees either way (checked by settled above).
echo "PASS rollout_fault_loop ($((SECONDS - start)) s)"
