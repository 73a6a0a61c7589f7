#!/usr/bin/env bash
# The cluster benchmark in small: 4 hosts in network namespaces at 100 Mbit/s, an 8 MiB
# version, every system (HTTP, libtorrent where python3-libtorrent is installed, weightcast
# where the binary has the daemons) through bench/cluster/run.sh. Checks that
#   - every host of every system ends with the source's files (run.sh cmp's them),
#   - the shaping holds: iperf3 between two hosts is at most 110% of the rate, no system's
#     slowest host beats the lower bound S/B, and HTTP (3 clients on one uplink) takes >= 2.7 S/B,
#   - nothing is left behind: no namespace of the run, no work directory, also when the run is
#     interrupted (SIGTERM; a background job of a script ignores SIGINT) while the hosts are up.
# Exits 77 (skipped) when not root or where namespaces cannot be created (e.g. a chroot).
#
#   bash tests/netns/cluster.sh path/to/weightcast
set -uo pipefail

WC=${1:?usage: cluster.sh path/to/weightcast}
here=$(cd "$(dirname "$0")" && pwd)
RUN=$here/../../bench/cluster/run.sh
if [[ $(id -u) -ne 0 ]]; then echo "SKIP: needs root for network namespaces"; exit 77; fi
if ! mountpoint -q / 2>/dev/null; then echo "SKIP: / is not a mount point (a chroot?)"; exit 77; fi
command -v iperf3 >/dev/null || { echo "SKIP: iperf3 is not installed"; exit 77; }

systems=http
if /usr/bin/python3 -c 'import libtorrent' 2>/dev/null; then systems+=,libtorrent
else echo "note: python3-libtorrent not installed; libtorrent not run"; fi
subcommands=$("$WC" --help 2>/dev/null | awk '/^Subcommands:/ { on = 1; next } on { print $1 }')
if grep -qx agent <<<"$subcommands" && grep -qx publish <<<"$subcommands" &&
  grep -qx coordinator <<<"$subcommands" && grep -qx status <<<"$subcommands"; then systems+=,weightcast
else echo "note: $WC has no agent/publish/coordinator yet; weightcast not run"; fi

tmp=$(mktemp -d)
bg=""
cleanup() {
  [[ -n $bg ]] && kill "$bg" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
leftovers() {  # ID: namespaces or work directory of run ID still present
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^wcc$1(h[0-9]+|sw|probe)$"
  ls -d "/dev/shm/wcc-$1" 2>/dev/null
}

# 1. A whole run.
timeout 150 bash "$RUN" 4 100mbit 8MiB --wc "$WC" --systems "$systems" --check-seconds 2 \
  >"$tmp/out" 2>"$tmp/err" &
bg=$!
wait "$bg"
rc=$?
bg=""
cat "$tmp/out"
[[ $rc -eq 77 ]] && { echo "SKIP: $(head -1 "$tmp/out")"; exit 77; }
[[ $rc -eq 0 ]] || fail "run.sh exited $rc: $(tail -20 "$tmp/err")"
run_id=$(tail -n 1 "$tmp/out" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["cluster_id"])')
[[ -z $(leftovers "$run_id") ]] || fail "left behind: $(leftovers "$run_id")"
tail -n 1 "$tmp/out" | /usr/bin/python3 -c '
import json, sys
systems = sys.argv[1].split(",")
d = json.loads(sys.stdin.read())
bound = d["bound_s"]
def check(cond, msg):
    if not cond:
        print("FAIL:", msg); sys.exit(1)
mbit = d["iperf3_mbit"]
check(0 < mbit <= 110, f"iperf3 {mbit} Mbit/s on a 100mbit link")
want = {"http": ["http"], "libtorrent": ["libtorrent"],
        "weightcast": ["weightcast", "weightcast_delta"]}
for s in systems:
    for ph in want[s]:
        f = d["phases"].get(ph)
        check(f is not None, f"no {ph} phase")
        check(f["hosts_done"] == 3 and not f["missing_hosts"], f"{ph}: hosts missing {f}")
        check(f["mismatched_hosts"] == 0, f"{ph}: hosts with wrong files")
        if ph != "weightcast_delta":
            t = f["slowest_s"]
            check(t >= 0.95 * bound, f"{ph}: {t} s beats S/B {bound} s")
check(d["phases"]["http"]["slowest_s"] >= 2.7 * bound, "http: 3 clients on one uplink under 2.7 S/B")
check(d["phases"]["http"]["source_upload_vs_size"] >= 2.9, "http: source sent under 3 S")
print("ok: JSON figures consistent")' "$systems" || exit 1
echo "ok: all systems delivered identical files, nothing left behind"

# 2. Interrupted while the hosts are up: everything is still removed.
bash "$RUN" 4 100mbit 8MiB --wc "$WC" --systems http --check-seconds 5 >"$tmp/out2" 2>"$tmp/err2" &
bg=$!
run_id=c$bg
for _ in $(seq 1 150); do
  ip netns list 2>/dev/null | grep -q "^wcc${run_id}h3" && break
  sleep 0.1
done
ip netns list 2>/dev/null | grep -q "^wcc${run_id}h3" || fail "second run never brought its hosts up: $(cat "$tmp/err2")"
kill -TERM "$bg"
wait "$bg"
rc=$?
bg=""
[[ $rc -ne 0 ]] || fail "an interrupted run exited 0"
[[ -z $(leftovers "$run_id") ]] || fail "left behind after SIGTERM: $(leftovers "$run_id")"
echo "ok: interrupted run (exit $rc) removed its namespaces and data"
echo PASS
