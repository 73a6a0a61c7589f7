# Shared helpers of the swarm integration tests (tests/integration/swarm_*.sh; sourced, not a
# test itself: CTest runs only *.sh). Real processes on 127.0.0.1 only; every process started
# here is killed by the EXIT trap, by its pid.
#
#   source "$(dirname "$0")/swarm_lib.bash" "$1"
#   start_coordinator
#   make_versions 4            # $work/ckpt/1..4: a model and RL-like steps of it
#   start_agent a1 [FLAGS]     # store $work/a1, log $work/a1.log
#   publish 1 [FLAGS]          # publishes $work/ckpt/1 as the next version (background)
#   wait_for 30 all_current 1 a1 a2
# shellcheck source=tests/integration/cluster_common.bash
source "$(dirname "${BASH_SOURCE[0]}")/cluster_common.bash" "$1"
default_model_size=8MiB  # make_versions' size unless MODEL_SIZE is set

# start_coordinator [FLAGS...]: on a free port, heartbeat timeout HEARTBEAT_TIMEOUT (default
# 1500ms); sets $coord.
start_coordinator() {
  rm -f "$work/coord.addr"
  local listen="127.0.0.1:0"
  [[ -n "$coord" ]] && listen="$coord"  # a restart keeps the address agents know
  "$wc" coordinator --listen "$listen" --state-dir "$work/coord-state" \
    --address-file "$work/coord.addr" --heartbeat-timeout "${HEARTBEAT_TIMEOUT:-1500ms}" \
    --secret-file "$work/secret" "$@" >>"$work/coord.log" 2>&1 &
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

node_id_of() { echo $((1000 + $(cksum <<<"$1" | cut -d' ' -f1) % 100000)); }

# start_agent NAME [FLAGS...]: an agent of the channel with its store under $work/NAME and a
# fixed node id (a restart is the same node).
start_agent() {
  local name="$1"
  shift
  "$wc" agent --coordinator "$coord" --store "$work/$name" --channel "$channel" \
    --node-id "$(node_id_of "$name")" --secret-file "$work/secret" "$@" >>"$work/$name.log" 2>&1 &
  pids[$name]=$!
}

# publish I [FLAGS...]: publishes $work/ckpt/I as the channel's next version (background).
publish() {
  local i="$1"
  shift
  kill_process pub
  "$wc" publish --coordinator "$coord" --store "$work/pub" --channel "$channel" \
    --dir "$work/ckpt/$i" --chunk-size "${CHUNK_SIZE:-256KiB}" --secret-file "$work/secret" \
    --node-id 1 "$@" >>"$work/pub.log" 2>&1 &
  pids[pub]=$!
}

# all_registered NAME...: every named agent's log says it registered with the coordinator.
all_registered() {
  local name
  for name in "$@"; do grep -q "registered with the coordinator" "$work/$name.log" || return 1; done
}

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

# same_files V NAME...: every named agent's committed version V is byte-identical to ckpt I=V.
same_files() {
  local v="$1" name f
  shift
  for name in "$@"; do
    for f in "$work/ckpt/$v"/*; do
      cmp -s "$f" "$work/$name/$channel/versions/$v/$(basename "$f")" ||
        fail "$name: $(basename "$f") of v$v differs from the publisher's"
    done
  done
}

# metric NAME AGENT_LOG: the value of a metric the agent serves (its address is in its log).
metric() {
  local name="$1" log="$2" addr
  addr="$(grep -o 'http://127.0.0.1:[0-9]*/metrics' "$log" | head -n 1)"
  curl -s "$addr" | awk -v n="$name" '$1 ~ "^"n"({|$)" {print $2; exit}'
}
