# shellcheck shell=bash
# The weightcast part of bench/cluster/run.sh (sourced by it; uses its variables and phase_*
# helpers). On host 0: the coordinator and, per step, `weightcast publish --dir ... --until
# complete`; on hosts 1..N-1: one agent each, started once and kept running through both steps
# (as a fleet would be: a host that has committed keeps serving its peers, like a libtorrent peer
# that keeps seeding). A host's completion time is the time its agent logs
# "agent: committed vV" (the version is verified end to end and current).
# Step 1 publishes v1 (full); step 2 publishes v2, a ~1%-changed step, which the publisher sends as
# a delta against v1: agents that hold v1 fetch only the payloads. T0 of a step is the moment
# `publish` starts: the publisher's hashing and delta encoding are part of the measured time.

WC_PORT_COORD=7000
WC_PORT_AGENT=7100
WC_PORT_PUB=7200
WC_CHANNEL=bench
WC_AGENT_PIDS=()
# wc_certs NAME: certificate mode's flags for node NAME (empty without --certificates).
wc_certs() {
  [[ $WC_CERTS -eq 1 ]] || return 0
  echo --ca "$WCD/ca/ca.pem" --cert "$WCD/$1.pem" --key "$WCD/$1.key"
}

# Counts live non-source nodes the coordinator knows (agents), from `status --json --once`.
wc_live_agents() {
  # shellcheck disable=SC2046
  cluster_exec "$ID" 0 timeout 5 "$WC" status --coordinator "$WC_COORD" --secret-file "$WC_SECRET" \
    $(wc_certs operator) --json --once 2>/dev/null | $PY -c '
import json, sys
try:
    d = json.loads(sys.stdin.read().strip().splitlines()[-1])
    print(sum(1 for n in d.get("nodes", []) if n.get("alive") and not n.get("source")))
except Exception:
    print(-1)'
}

# The epoch time of a log line's timestamp ("2026-11-29T13:37:05.004Z INFO ...").
wc_log_time() { date -u -d "$(cut -d' ' -f1 <<<"$1" | sed 's/T/ /; s/Z$//')" +%s.%N; }

# Writes res.<i>.json for every agent that has logged the commit of VERSION, or that exited
# without it (rc 1); runs in the background until the step's phase directory says stop. The time
# is the log line's own timestamp, so polling often buys no accuracy: one grep over the logs
# every 0.25 s (15 greps every 50 ms took ~15% of this 2-core machine's CPU during a step).
wc_watch() {  # VERSION
  local v=$1 i line
  local -A seen=() hits=()
  while [[ ! -e $PH/stop ]]; do
    hits=()
    while IFS= read -r line; do
      i=${line%%:*}
      i=${i#log.}
      hits[$i]=${line#*:}
    done < <(cd "$WCD" && grep -m1 -H "agent: committed v$v\$" log.* 2>/dev/null)
    for ((i = 1; i < N; i++)); do
      [[ -n ${seen[$i]:-} ]] && continue
      line=${hits[$i]:-}
      if [[ -n $line ]]; then
        printf '{"done": %s, "rc": 0}\n' "$(wc_log_time "$line")" >"$PH/res.$i.json.tmp" &&
          mv "$PH/res.$i.json.tmp" "$PH/res.$i.json"
        seen[$i]=1
      elif ! kill -0 "${WC_AGENT_PIDS[$i]}" 2>/dev/null; then
        [[ $FAULT == kill && $i -eq $FH ]] || log "agent on host $i exited: $(tail -2 "$WCD/log.$i")"
        printf '{"done": %s, "rc": 1}\n' "$(date +%s.%N)" >"$PH/res.$i.json"
        seen[$i]=1
      fi
    done
    sleep 0.25
  done
}

# One step: publish DIR as version V and wait until every agent has committed it.
wc_step() {  # PHASE VERSION DIR
  local name=$1 v=$2 dir=$3 i
  log "weightcast $name: v$v from $dir, $((N - 1)) agents (timeout $SHORT_TIMEOUT s)"
  phase_begin "$name" weightcast
  # Every agent registered and alive before the clock starts (the publish is what is timed).
  local until=$((SECONDS + 30)) live=0 want=$((N - 1))
  [[ $FAULT == kill && $v -gt 1 ]] && want=$((N - 2))  # the agent killed in step 1 stays dead
  while [[ $SECONDS -lt $until ]]; do
    live=$(wc_live_agents)
    [[ $live -eq $want || $live -lt 0 ]] && break
    sleep 0.3
  done
  if [[ $live -ne $want ]]; then
    log "$live of $want agents alive at the coordinator"
    return 1
  fi
  for ((i = 0; i < N; i++)); do : >"$PH/ready.$i"; done
  phase_go "$N" 5 || return 1
  wc_watch "$v" &
  local watcher=$!
  pids+=("$watcher")
  ip netns exec "$(cluster_ns "$ID" 0)" env ${WC_TRACE:+WEIGHTCAST_SWARM_TRACE=$WC_TRACE} \
    timeout $((SHORT_TIMEOUT + 30)) "$WC" publish \
    --coordinator "$WC_COORD" --store "$WCD/pub" --channel "$WC_CHANNEL" --dir "$dir" \
    --listen "$(cluster_addr 0):$WC_PORT_PUB" --secret-file "$WC_SECRET" --node-id 1000 \
    $(wc_certs publisher) --until complete ${WC_CHUNK_SIZE:+--chunk-size "$WC_CHUNK_SIZE"} --log-format text \
    >"$PH/log.0" 2>&1 &
  pids+=($!)
  local rc=0
  phase_wait 1 "$SHORT_TIMEOUT" || rc=1
  touch "$PH/stop"
  wait "$watcher" 2>/dev/null
  # The coordinator's view at the end (version log: total and payload bytes of the version).
  # shellcheck disable=SC2046
  cluster_exec "$ID" 0 timeout 5 "$WC" status --coordinator "$WC_COORD" --secret-file "$WC_SECRET" \
    $(wc_certs operator) --json --once >"$PH/status.json" 2>/dev/null
  for ((i = 1; i < N; i++)); do cp "$WCD/log.$i" "$PH/log.$i" 2>/dev/null; done
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
  local life=$((3 * SHORT_TIMEOUT + 120)) i
  if [[ $WC_CERTS -eq 1 ]]; then
    "$WC" ca init --dir "$WCD/ca" 2>/dev/null || { log "ca init failed"; return 1; }
    local issue=(coordinator:coordinator:1 publisher:publisher:"$WC_CHANNEL":1000 operator:operator:0)
    for ((i = 1; i < N; i++)); do issue+=("h$i:agent:$((1000 + i))"); done
    local spec name role id
    for spec in "${issue[@]}"; do
      name=${spec%%:*} id=${spec##*:} role=${spec#*:} role=${role%:*}
      "$WC" ca issue --dir "$WCD/ca" --name "$name" --role "$role" --out "$WCD/$name" \
        $([[ $id != 0 ]] && echo --node-id "$id") >/dev/null || { log "ca issue $name failed"; return 1; }
    done
  fi
  ip netns exec "$(cluster_ns "$ID" 0)" timeout "$life" "$WC" coordinator \
    --listen "$WC_COORD" --state-dir "$WCD/coord" --secret-file "$WC_SECRET" --node-id 1 \
    $(wc_certs coordinator) \
    --address-file "$WCD/coord.addr" ${WC_HEARTBEAT_TIMEOUT:+--heartbeat-timeout "$WC_HEARTBEAT_TIMEOUT"} ${WC_DEGREE:+--degree "$WC_DEGREE"} \
    ${WC_COMMIT_POLICY:+--commit-policy "$WC_COMMIT_POLICY"} \
    >"$WCD/coord.log" 2>&1 &
  local coord=$!
  pids+=("$coord")
  # `timeout` leads its own process group: phase_end spares these groups between the steps.
  KEEP_PGIDS="$coord"
  local until=$((SECONDS + 15))
  while [[ ! -s $WCD/coord.addr ]]; do
    kill -0 "$coord" 2>/dev/null || { log "coordinator exited: $(tail -3 "$WCD/coord.log")"; return 1; }
    [[ $SECONDS -lt $until ]] || { log "coordinator did not listen"; return 1; }
    sleep 0.1
  done
  for ((i = 1; i < N; i++)); do
    ip netns exec "$(cluster_ns "$ID" "$i")" env ${WC_TRACE:+WEIGHTCAST_SWARM_TRACE=$WC_TRACE} \
      timeout "$life" "$WC" agent \
      --coordinator "$WC_COORD" --store "$WCD/h$i" --channel "$WC_CHANNEL" \
      --listen "$(cluster_addr "$i"):$WC_PORT_AGENT" --secret-file "$WC_SECRET" \
      --node-id $((1000 + i)) $(wc_certs "h$i") --log-format text >"$WCD/log.$i" 2>&1 &
    WC_AGENT_PIDS[i]=$!
    pids+=($!)
    KEEP_PGIDS+=" $!"
  done
  local rc=0
  wc_step weightcast 1 "$W/data/v1" || rc=1
  if [[ $DELTA -eq 1 ]]; then wc_step weightcast_delta 2 "$W/data/v2" || rc=1; fi
  KEEP_PGIDS=""
  kill_hosts TERM
  return $rc
}
