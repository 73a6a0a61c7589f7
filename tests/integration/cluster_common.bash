# The prologue the swarm and rollout integration libraries share (sourced by swarm_lib.bash and
# rollout_lib.bash, not a test itself): a work dir, the processes by name for the EXIT trap, the
# cluster secret, fail (with every log's tail) and wait_for. Real processes on 127.0.0.1 only.
set -euo pipefail
wc="$1"
work="$(mktemp -d)"
declare -A pids=()
channel=policy
coord=""

cleanup() {
  local name p
  for name in "${!pids[@]}"; do
    p="${pids[$name]}"
    # A command started under `timeout` runs in the group timeout leads: killing timeout alone
    # would leave the command running, orphaned. So a group leader's group goes whole.
    if [[ "$(ps -o pgid= -p "$p" 2>/dev/null | tr -d ' ')" == "$p" ]]; then
      kill -9 -- "-$p" 2>/dev/null || true
    fi
    kill -9 "$p" 2>/dev/null || true
  done
  for name in "${!pids[@]}"; do wait "${pids[$name]}" 2>/dev/null || true; done
  if [[ "${KEEP_WORK:-}" == 1 ]]; then echo "work dir kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

(umask 077 && head -c 48 /dev/urandom | base64 >"$work/secret")

fail() {
  echo "FAIL: $*"
  local f
  for f in "$work"/*.log; do
    [[ -e "$f" ]] || continue
    echo "--- $(basename "$f") (last 25 lines)"
    tail -n 25 "$f"
  done
  exit 1
}

# wait_for SECONDS CMD...: polls CMD every 0.2 s until it succeeds.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  while ! "$@" 2>/dev/null; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# make_versions N: $work/ckpt/1 is a small model (MODEL_SIZE, else the sourcing library's
# default_model_size), 2..N training steps of it.
make_versions() {
  local n="$1" i
  "$wc" synth model -o "$work/ckpt/step-0000" --size "${MODEL_SIZE:-${default_model_size:-8MiB}}" \
    --seed 7 >/dev/null
  if ((n > 1)); then
    "$wc" synth steps --from "$work/ckpt/step-0000" -o "$work/ckpt" --steps $((n - 1)) \
      --seed 7 >/dev/null
  fi
  for ((i = 1; i <= n; i++)); do
    mv "$work/ckpt/step-$(printf %04d $((i - 1)))" "$work/ckpt/$i"
  done
}
