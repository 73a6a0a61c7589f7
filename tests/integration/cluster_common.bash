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
  local name
  for name in "${!pids[@]}"; do kill -9 "${pids[$name]}" 2>/dev/null || true; done
  for name in "${!pids[@]}"; do wait "${pids[$name]}" 2>/dev/null || true; done
  if [[ "${KEEP_WORK:-}" == 1 ]]; then echo "work dir kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

head -c 48 /dev/urandom | base64 >"$work/secret"

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
