# The weightcast part of bench/cluster/run.sh (sourced by it; uses its variables and phase_*
# helpers). On host 0: the coordinator (for both steps) and, per step, `weightcast publish --dir`;
# on hosts 1..N-1: one agent each with --exit-after VERSION, whose exit time is the host's
# completion time. Step 1 publishes v1 (full); step 2 publishes v2, a ~1%-changed step, which the
# publisher sends as a delta against v1 (agents restart onto their committed v1 and fetch only
# the payloads). T0 of a step is the moment `publish` starts: the publisher's hashing and delta
# encoding are part of the measured time.

WC_PORT_COORD=7000
WC_PORT_AGENT=7100
WC_PORT_PUB=7200
WC_CHANNEL=bench

# Counts live non-source nodes the coordinator knows (agents), from `status --json --once`.
wc_live_agents() {
  cluster_exec "$ID" 0 timeout 5 "$WC" status --coordinator "$WC_COORD" --secret-file "$WC_SECRET" \
    --json --once 2>/dev/null | $PY -c '
import json, sys
try:
    d = json.loads(sys.stdin.read().strip().splitlines()[-1])
    print(sum(1 for n in d.get("nodes", []) if n.get("alive") and not n.get("source")))
except Exception:
    print(-1)'
}

# Starts one agent on HOST following the channel until VERSION is committed; its wrapper writes
# the result file with the exit time and status.
wc_start_agent() {  # HOST VERSION
  local i=$1 v=$2
  ip netns exec "$(cluster_ns "$ID" "$i")" timeout $((SHORT_TIMEOUT + 30)) bash -c '
    res=$1; shift
    "$@"; rc=$?
    printf "{\"done\": %s, \"rc\": %d}\n" "$(date +%s.%N)" "$rc" >"$res.tmp" && mv "$res.tmp" "$res"' \
    _ "$PH/res.$i.json" "$WC" agent --coordinator "$WC_COORD" --store "$WCD/h$i" \
    --channel "$WC_CHANNEL" --listen "$(cluster_addr "$i"):$WC_PORT_AGENT" \
    --secret-file "$WC_SECRET" --node-id $((1000 + i)) --exit-after "$v" 2>>"$PH/log.$i" &
  pids+=($!)
}

# One step: agents up and registered, then go + publish DIR as the next version.
wc_step() {  # PHASE VERSION DIR
  local name=$1 v=$2 dir=$3 i
  log "weightcast $name: v$v from $dir, $((N - 1)) agents (timeout $SHORT_TIMEOUT s)"
  phase_begin "$name" weightcast
  for ((i = 1; i < N; i++)); do wc_start_agent "$i" "$v"; done
  # Every agent registered before the clock starts (the publish is what is timed).
  local until=$((SECONDS + 30)) live=0
  while [[ $SECONDS -lt $until ]]; do
    live=$(wc_live_agents)
    [[ $live -eq $((N - 1)) || $live -lt 0 ]] && break
    sleep 0.3
  done
  if [[ $live -lt 0 ]]; then
    log "weightcast status gave no count; waiting 3 s for the agents instead"
    sleep 3
  elif [[ $live -ne $((N - 1)) ]]; then
    log "only $live of $((N - 1)) agents registered"
    return 1
  fi
  for ((i = 0; i < N; i++)); do : >"$PH/ready.$i"; done
  phase_go "$N" 5 || return 1
  ip netns exec "$(cluster_ns "$ID" 0)" timeout $((SHORT_TIMEOUT + 30)) bash -c '
    res=$1; shift
    "$@"; rc=$?
    printf "{\"done\": %s, \"rc\": %d}\n" "$(date +%s.%N)" "$rc" >"$res.tmp" && mv "$res.tmp" "$res"' \
    _ "$PH/res.0.json" "$WC" publish --coordinator "$WC_COORD" --store "$WCD/pub" \
    --channel "$WC_CHANNEL" --dir "$dir" --listen "$(cluster_addr 0):$WC_PORT_PUB" \
    --secret-file "$WC_SECRET" --node-id 1000 --until complete 2>"$PH/log.0" &
  pids+=($!)
  local rc=0
  phase_wait 1 "$SHORT_TIMEOUT" || rc=1
  # The coordinator's view at the end (version log: total and payload bytes of the version).
  cluster_exec "$ID" 0 timeout 5 "$WC" status --coordinator "$WC_COORD" --secret-file "$WC_SECRET" \
    --json --once >"$PH/status.json" 2>/dev/null
  phase_end
  verify_hosts "$dir" "$WCD/h%d/$WC_CHANNEL/current"
  return $rc
}

wc_phases() {
  WCD=$W/wc
  mkdir -p "$WCD"
  WC_SECRET=$WCD/secret
  (umask 077 && printf 'cluster-bench-%s-%s\n' "$ID" "$(od -An -tx8 -N16 /dev/urandom | tr -d ' \n')" >"$WC_SECRET")
  WC_COORD=$(cluster_addr 0):$WC_PORT_COORD
  ip netns exec "$(cluster_ns "$ID" 0)" timeout $((3 * SHORT_TIMEOUT + 120)) "$WC" coordinator \
    --listen "$WC_COORD" --state-dir "$WCD/coord" --secret-file "$WC_SECRET" --node-id 1 \
    --address-file "$WCD/coord.addr" 2>"$WCD/coord.log" &
  local coord=$!
  pids+=("$coord")
  KEEP_PGID=$coord  # `timeout` leads its own process group; phase_end spares it
  local until=$((SECONDS + 15))
  while [[ ! -s $WCD/coord.addr ]]; do
    kill -0 "$coord" 2>/dev/null || { log "coordinator exited: $(tail -3 "$WCD/coord.log")"; return 1; }
    [[ $SECONDS -lt $until ]] || { log "coordinator did not listen"; return 1; }
    sleep 0.1
  done
  local rc=0
  wc_step weightcast 1 "$W/data/v1" || rc=1
  if [[ $DELTA -eq 1 ]]; then wc_step weightcast_delta 2 "$W/data/v2" || rc=1; fi
  KEEP_PGID=""
  kill -TERM "$coord" 2>/dev/null
  return $rc
}
