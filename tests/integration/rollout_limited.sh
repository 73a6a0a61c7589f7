#!/usr/bin/env bash
# An agent whose download is rate limited below the chunk size per heartbeat
# timeout (2 MiB/s, 8 MiB chunks, 3 s timeout) stays alive at the coordinator and commits in
# about the time its limit allows: control traffic is never paced behind chunk data, and a chunk
# arriving slowly is progress, not silence.
source "$(dirname "$0")/rollout_lib.bash" "$1"

MODEL_SIZE=32MiB make_versions 1
HEARTBEAT_TIMEOUT=3s start_coordinator --commit-policy all --prepare-deadline 90s
start_agent a1 --download-limit 2MiB
start_agent a2
begun=$(date +%s)
CHUNK_SIZE=8MiB publish 1
wait_for 60 all_current 1 a1 a2 || fail "v1 was not committed by the download-limited agent"
took=$(($(date +%s) - begun))
echo "committed in ${took}s (the limit allows ~16 s for 32 MiB)"
# At 2 MiB/s, 32 MiB cannot arrive in under ~14 s (the burst is 1 MiB): the limit held.
((took >= 12)) || fail "the download limit was not applied (${took}s)"
if grep -q 'ms: dead' "$work/coord.log"; then
  grep 'ms: dead' "$work/coord.log"
  fail "the coordinator marked an agent dead"
fi
same_files 1 a1 || fail "a1's v1 differs"
echo "PASS rollout_limited"
