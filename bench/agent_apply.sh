#!/usr/bin/env bash
# Agent CPU per delta version, OLD vs NEW agent binary side by side: one coordinator, one
# publisher and one agent (real processes on 127.0.0.1). The agent receives a full version
# (synth bf16 model, default 128 MiB), then one training step of it (~1% of elements changed) as
# a delta; the figure is the agent process's CPU seconds (user + system, /proc/PID/stat) from
# just before `weightcast publish` of the delta starts to the agent's commit of it. Rounds
# alternate OLD and NEW agents; the publisher and coordinator are the same binary (NEW) in every
# round, so only the agent differs.
#
#   bash bench/agent_apply.sh OLD_WEIGHTCAST NEW_WEIGHTCAST [size=128MiB] [chunk=256KiB] [rounds=3]
#
# Last line: one JSON object (per-round figures, medians, and old/new).
set -euo pipefail

old=${1:?usage: agent_apply.sh OLD_WEIGHTCAST NEW_WEIGHTCAST [size] [chunk] [rounds]}
new=${2:?usage: agent_apply.sh OLD_WEIGHTCAST NEW_WEIGHTCAST [size] [chunk] [rounds]}
size=${3:-128MiB}
chunk=${4:-256KiB}
rounds=${5:-3}
for b in "$old" "$new"; do [[ -x $b ]] || { echo "no weightcast binary at $b" >&2; exit 1; }; done

work="$(mktemp -d /dev/shm/wc-agent-apply.XXXXXX)"
declare -A pids=()
cleanup() {
  local n
  for n in "${!pids[@]}"; do kill -9 "${pids[$n]}" 2>/dev/null || true; done
  for n in "${!pids[@]}"; do wait "${pids[$n]}" 2>/dev/null || true; done
  if [[ "${KEEP_WORK:-}" == 1 ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# cpu_ticks PID: utime + stime of a process, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

head -c 48 /dev/urandom | base64 >"$work/secret"
"$new" synth model -o "$work/data/step-0000" --size "$size" --seed 11 >/dev/null
"$new" synth steps --from "$work/data/step-0000" -o "$work/data" --steps 1 --lr 5e-7 --seed 11 \
  >/dev/null

# is_current DIR V: the agent store DIR has committed version V.
is_current() { [[ "$(basename "$(readlink "$1/policy/current" 2>/dev/null)")" == "$2" ]]; }

# one_round BIN R: sets `result` to the agent's CPU seconds for the delta step. Runs in this
# shell (not a $(...) subshell) so the EXIT trap sees every process it starts.
one_round() {
  local bin="$1" r="$2" d="$work/r$2" coord before after
  mkdir -p "$d"
  "$new" coordinator --listen 127.0.0.1:0 --state-dir "$d/coord" --address-file "$d/coord.addr" \
    --secret-file "$work/secret" 2>"$d/coord.log" &
  pids[coord]=$!
  wait_for 20 test -s "$d/coord.addr" || { echo "coordinator did not start" >&2; exit 1; }
  coord="$(cat "$d/coord.addr")"
  "$bin" agent --coordinator "$coord" --store "$d/agent" --channel policy --node-id 101 \
    --secret-file "$work/secret" 2>"$d/agent.log" &
  pids[agent]=$!
  local v dir
  for v in 1 2; do
    dir="$work/data/step-000$((v - 1))"
    if [[ $v == 2 ]]; then
      before=$(cpu_ticks "${pids[agent]}")
      # THREADS=1: also report the agent's CPU per thread for the delta step (diagnosis).
      [[ -n ${THREADS:-} ]] && for t in /proc/"${pids[agent]}"/task/*; do
        echo "$(basename "$t") $(awk '{print $14 + $15}' "$t/stat")"; done >"$d/threads.before"
      # PERF_DIR=DIR: also profile the agent during the delta step (perf record -g).
      if [[ -n ${PERF_DIR:-} ]]; then
        perf record -g -o "$PERF_DIR/agent-$r.data" -p "${pids[agent]}" 2>/dev/null &
        pids[perf]=$!
      fi
    fi
    "$new" publish --coordinator "$coord" --store "$d/pub" --channel policy --dir "$dir" \
      --chunk-size "$chunk" --until complete --node-id 1 --secret-file "$work/secret" \
      >"$d/pub$v.out" 2>"$d/pub$v.log" &
    pids[pub]=$!
    wait_for 120 is_current "$d/agent" "$v" ||
      { echo "agent did not commit v$v" >&2; tail "$d/agent.log" >&2; exit 1; }
    if [[ $v == 2 ]]; then
      after=$(cpu_ticks "${pids[agent]}")
      if [[ -n ${THREADS:-} ]]; then
        for t in /proc/"${pids[agent]}"/task/*; do
          echo "$(basename "$t") $(awk '{print $14 + $15}' "$t/stat")"; done >"$d/threads.after"
        join -a 2 "$d/threads.before" "$d/threads.after" |
          awk -v r="$r" '{d = (NF == 3 ? $3 - $2 : $2); if (d > 0) printf "round %s thread %s: %d ticks\n", r, $1, d}' >&2
      fi
      if [[ -n ${pids[perf]:-} ]]; then
        kill -INT "${pids[perf]}"
        wait "${pids[perf]}" 2>/dev/null || true
        unset "pids[perf]"
      fi
    fi
    wait "${pids[pub]}" || true
    unset "pids[pub]"
  done
  # The delta step must have moved payloads, not whole chunks (a decode failure falls back).
  local received
  received=$(grep -o 'v2 complete in [0-9.]* s: received [0-9]*' "$d/agent.log" | awk '{print $NF}')
  [[ -n $received ]] && ((received < 16 << 20)) ||
    { echo "round $r: the agent did not apply the delta (received '$received' bytes)" >&2; exit 1; }
  cmp -s "$work/data/step-0001/model.safetensors" "$d/agent/policy/versions/2/model.safetensors" ||
    { echo "round $r: the agent's v2 differs from the published files" >&2; exit 1; }
  kill "${pids[agent]}" "${pids[coord]}"
  wait "${pids[agent]}" "${pids[coord]}" 2>/dev/null || true
  unset "pids[agent]" "pids[coord]"
  rm -rf "$d"
  result=$(python3 -c "print(($after - $before) / $hz)")
}

old_s=() new_s=()
for ((r = 0; r < rounds; r++)); do
  one_round "$old" "o$r"
  o=$result
  one_round "$new" "n$r"
  n=$result
  echo "round $r: agent CPU for the delta step: old $o s, new $n s" >&2
  old_s+=("$o") new_s+=("$n")
done

python3 - "$size" "$chunk" "${old_s[*]}" "${new_s[*]}" <<'PY'
import json, statistics, sys
size, chunk = sys.argv[1], sys.argv[2]
old = [float(x) for x in sys.argv[3].split()]
new = [float(x) for x in sys.argv[4].split()]
mo, mn = statistics.median(old), statistics.median(new)
print(f"agent CPU per {size} delta step (chunks {chunk}): old median {mo:.3f} s, new median "
      f"{mn:.3f} s, old/new {mo / mn:.2f}")
print(json.dumps({"bench": "agent_apply", "size": size, "chunk": chunk, "old_cpu_s": old,
                  "new_cpu_s": new, "old_median_cpu_s": mo, "new_median_cpu_s": mn,
                  "old_over_new": round(mo / mn, 2)}))
PY
