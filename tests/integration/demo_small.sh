#!/usr/bin/env bash
# The README's demo at a small size: a coordinator, a publisher and 4 agents as real processes on
# loopback; a full version and 2 delta versions must reach every agent byte-identical. Then the
# demo is interrupted mid-run and must leave no process behind.
set -euo pipefail
wc="$1"
work="$(mktemp -d)"
demo_pid=""
cleanup() {
  if [[ -n "$demo_pid" ]]; then kill "$demo_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# Processes whose command line names this test's work directory (ours only).
leftovers() { pgrep -f -- "$work/" || true; }

out="$(timeout 120 "$wc" demo --work-dir "$work/demo" --size 24MiB --chunk-size 1MiB --steps 2)"
echo "$out"
grep -q "every agent's files are byte-identical to the publisher's, for every version" <<<"$out"
for v in v1 v2 v3; do
  grep -q "$v committed on all 4 agents" <<<"$out"
done
# v2 and v3 went out as deltas: fewer bytes on the wire than four copies of the model.
grep -Eq "^ v2 +<-v1 " <<<"$out"
grep -Eq "^ v3 +<-v2 " <<<"$out"
[[ ! -e "$work/demo" ]] || { echo "the work directory was not removed"; exit 1; }
[[ -z "$(leftovers)" ]] || { echo "processes left behind:"; ps -f -p "$(leftovers | paste -sd,)"; exit 1; }

# Interrupted once the fleet runs: every process it started goes away with it.
"$wc" demo --work-dir "$work/int" --size 24MiB --chunk-size 1MiB --steps 2 >"$work/int.out" 2>&1 &
demo_pid=$!
for _ in $(seq 1 300); do
  grep -q "fleet on loopback" "$work/int.out" 2>/dev/null && break
  kill -0 "$demo_pid" 2>/dev/null || break
  sleep 0.1
done
grep -q "fleet on loopback" "$work/int.out" || { cat "$work/int.out"; exit 1; }
kill -INT "$demo_pid"
status=0
wait "$demo_pid" || status=$?
demo_pid=""
cat "$work/int.out"
[[ "$status" -ne 0 ]] || { echo "an interrupted demo must not report success"; exit 1; }
for _ in $(seq 1 50); do
  [[ -z "$(leftovers)" ]] && break
  sleep 0.1
done
[[ -z "$(leftovers)" ]] || { echo "processes left behind:"; ps -f -p "$(leftovers | paste -sd,)"; exit 1; }
echo "demo_small: ok"
