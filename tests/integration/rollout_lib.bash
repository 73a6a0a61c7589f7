# Shared helpers of the rollout integration tests (tests/integration/rollout_*.sh; sourced, not
# a test itself: CTest runs only *.sh). Real processes on 127.0.0.1 only; every process started
# here is killed by the EXIT trap, by its pid.
#
#   source "$(dirname "$0")/rollout_lib.bash" "$1"
#   start_coordinator --commit-policy all --prepare-deadline 20s
#   make_versions 3            # $work/ckpt/1..3: a model and RL-like steps of it
#   start_agent a1             # store $work/a1, log $work/a1.log
#   publish 1                  # publishes $work/ckpt/1 as the next version, in the background
#   wait_for 30 all_current 1 a1 a2
# shellcheck source=tests/integration/cluster_common.bash
source "$(dirname "${BASH_SOURCE[0]}")/cluster_common.bash" "$1"
default_model_size=6MiB  # make_versions' size unless MODEL_SIZE is set

coordinator_flags=()
start_coordinator() {
  [[ $# -gt 0 ]] && coordinator_flags=("$@")
  rm -f "$work/coord.addr"
  local listen="127.0.0.1:0"
  [[ -n "$coord" ]] && listen="$coord"  # a restart keeps the address agents know
  "$wc" coordinator --listen "$listen" --state-dir "$work/coord-state" \
    --address-file "$work/coord.addr" --heartbeat-timeout "${HEARTBEAT_TIMEOUT:-1500ms}" \
    --secret-file "$work/secret" "${coordinator_flags[@]}" >>"$work/coord.log" 2>&1 &
  pids[coord]=$!
  wait_for 20 test -s "$work/coord.addr" || fail "the coordinator did not start"
  coord="$(cat "$work/coord.addr")"
}

kill_process() {  # kill_process NAME [SIGNAL]
  local name="$1" sig="${2:-KILL}"
  [[ -n "${pids[$name]:-}" ]] || return 0
  kill -"$sig" "${pids[$name]}" 2>/dev/null || true
  wait "${pids[$name]}" 2>/dev/null || true
  unset "pids[$name]"
}

declare -A agent_flags=()
# start_agent NAME [FLAGS...]: an agent of the channel with its store under $work/NAME and a
# fixed node id (a restart is the same node).
start_agent() {
  local name="$1"
  shift
  # Flags are kept quoted (printf %q) so that a restart gets them word for word.
  if [[ $# -gt 0 ]]; then
    agent_flags[$name]="$(printf '%q ' "$@")"
  elif [[ -z "${agent_flags[$name]+set}" ]]; then
    agent_flags[$name]=""
  fi
  local id extra=()
  eval "extra=(${agent_flags[$name]})"
  id=$((1000 + $(cksum <<<"$name" | cut -d' ' -f1) % 100000))
  "$wc" agent --coordinator "$coord" --store "$work/$name" --channel "$channel" \
    --node-id "$id" --secret-file "$work/secret" "${extra[@]}" >>"$work/$name.log" 2>&1 &
  pids[$name]=$!
}

# publish I [FLAGS...]: publishes $work/ckpt/I as the channel's next version (background; seeds
# until --until, default never: the publisher stays a seed).
publish() {
  local i="$1"
  shift
  kill_process "pub"
  "$wc" publish --coordinator "$coord" --store "$work/pub" --channel "$channel" \
    --dir "$work/ckpt/$i" --chunk-size "${CHUNK_SIZE:-1MiB}" --until never \
    --secret-file "$work/secret" \
    "$@" >>"$work/pub.log" 2>&1 &
  pids[pub]=$!
}

# The version NAME's store has current (0: none).
current_of() {
  local link
  link="$(readlink "$work/$1/$channel/current" 2>/dev/null)" || { echo 0; return; }
  basename "$link"
}

# all_current V NAME...: every named agent has version V current.
all_current() {
  local v="$1" name
  shift
  for name in "$@"; do [[ "$(current_of "$name")" == "$v" ]] || return 1; done
}

status_json() {
  "$wc" status --coordinator "$coord" --channel "$channel" --once --json \
    --secret-file "$work/secret" 2>/dev/null
}

# decision_of V: COMMIT, ABORT or NONE as the coordinator logged it.
decision_of() {
  status_json | python3 -c '
import json, sys
v = int(sys.argv[1])
s = json.load(sys.stdin)
for ch in s.get("channels", []):
    for e in ch.get("versions", []):
        if int(e["version"]) == v:
            print(e.get("decision", "DECISION_NONE").replace("DECISION_", ""))
            sys.exit(0)
print("UNKNOWN")' "$1"
}

# abort_reason_of V
abort_reason_of() {
  status_json | python3 -c '
import json, sys
v = int(sys.argv[1])
for ch in json.load(sys.stdin).get("channels", []):
    for e in ch.get("versions", []):
        if int(e["version"]) == v:
            print(e.get("abort_reason", ""))' "$1"
}

fleet_current() {
  status_json | python3 -c '
import json, sys
for ch in json.load(sys.stdin).get("channels", []):
    print(ch.get("current_version", 0))'
}

decided() { [[ "$(decision_of "$1")" == "$2" ]]; }

# same_files V NAME: the agent's version V is byte-identical to $work/ckpt/I for the version
# the publisher published from it (the publisher's store has it as version V).
same_files() {
  local v="$1" name="$2" f
  for f in "$work/pub/$channel/versions/$v"/*; do
    cmp -s "$f" "$work/$name/$channel/versions/$v/$(basename "$f")" || return 1
  done
}
