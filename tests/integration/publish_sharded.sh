#!/usr/bin/env bash
# Sharded publish (docs/sharded_publish.md) through `weightcast publish --rank/--world`:
# 4 rank processes, each with its own store and files, publish one version together to 2
# agents; every agent's copy holds each rank's files byte for byte; the next step is a delta per
# part; a second, unsharded writer is refused; a rank that never comes aborts the version at the
# coordinator's --part-timeout (the other ranks exit 1 with the reason); a rank killed mid-version
# and restarted completes it; --take-over by another writer fences every rank.
source "$(dirname "$0")/rollout_lib.bash" "$1"

# shellcheck source=tests/integration/sharded_lib.bash
source "$(dirname "$0")/sharded_lib.bash"

make_parts 5
start_coordinator --part-timeout 4s
start_agent a1
start_agent a2

# v1: four ranks, one version.
publish_step 1 0
echo "ok   4 ranks published v1 as one version; both agents hold every rank's files"

# v2: each rank restarted on its store with the next step: a delta per part.
publish_step 2 1
grep -q 'published a part.*version=2.*delta=true' "$work/rank0.log" || fail "rank 0's part of v2 is not a delta"
echo "ok   v2 is a delta on v1, part by part; agents hold it byte for byte"

# A second, unsharded writer is refused while the rank set holds the channel.
rc=0
timeout 60 "$wc" publish --coordinator "$coord" --store "$work/other" --channel "$channel" \
  --dir "$work/part/0/3" --chunk-size 256KiB --secret-file "$work/secret" \
  >/dev/null 2>"$work/other.log" || rc=$?
[[ "$rc" == 1 ]] || fail "a second writer: exit $rc, not 1"
grep -q "already has a writer: writer trainer (4 ranks" "$work/other.log" ||
  fail "the refusal does not name the rank set: $(tail -n 2 "$work/other.log")"
echo "ok   a second writer is refused: $(grep -o 'already has a writer: [^;]*' "$work/other.log" | head -n 1)"

# A rank that never comes: v3 is aborted at --part-timeout; the ranks that gave their part exit 1
# with the reason (one-shot --dir with --until replicated).
for ((r = 0; r < world - 1; r++)); do
  kill_process "rank$r" TERM
  "$wc" publish --coordinator "$coord" --store "$work/rank$r" --channel "$channel" \
    --dir "$work/part/$r/3" --rank "$r" --world "$world" --writer-id trainer \
    --chunk-size 256KiB --secret-file "$work/secret" >/dev/null 2>>"$work/rank$r.log" &
  pids[rank$r]=$!
done
kill_process "rank3" TERM
start=$SECONDS
for ((r = 0; r < world - 1; r++)); do
  rc=0
  timeout 60 tail --pid="${pids[rank$r]}" -f /dev/null || fail "rank $r still runs"
  wait "${pids[rank$r]}" || rc=$?
  unset "pids[rank$r]"
  [[ "$rc" == 1 ]] || fail "rank $r exited $rc, not 1, when rank 3 never came"
done
grep -q "the parts of ranks 3 did not arrive within 4 s" "$work/rank0.log" ||
  fail "rank 0 does not say why: $(tail -n 3 "$work/rank0.log")"
logged 3 && fail "the aborted v3 was published"
echo "ok   a missing part aborts the version after $((SECONDS - start)) s: $(grep -o 'the parts of ranks 3 [^"]*' "$work/rank0.log" | head -n 1)"

# The next version goes above the aborted one; rank 2 is killed (-9) before it gives its part
# and restarted: the version completes with the restarted rank.
for ((r = 0; r < world; r++)); do [[ $r == 2 ]] || rank "$r" 4; done
rank 2 4
sleep 0.5
kill_process rank2 KILL
rank 2 4
wait_for 60 logged 4 || fail "v4 was not assembled after rank 2 restarted"
wait_for 60 all_current 4 a1 a2 || fail "the agents did not commit v4"
same_parts 4 4 a1 && same_parts 4 4 a2 || fail "an agent's v4 differs from the ranks' files"
echo "ok   rank 2 killed mid-version and restarted: v4 assembled; agents hold it"

# --take-over by another writer fences every rank: each exits 1.
"$wc" publish --coordinator "$coord" --store "$work/other" --channel "$channel" \
  --dir "$work/part/0/5" --chunk-size 256KiB --until never --take-over \
  --secret-file "$work/secret" >/dev/null 2>"$work/other.log" &
pids[other]=$!
wait_for 30 logged 5 || fail "the take-over did not publish v5"
for ((r = 0; r < world; r++)); do
  rc=0
  timeout 30 tail --pid="${pids[rank$r]}" -f /dev/null || fail "rank $r still runs after a take-over"
  wait "${pids[rank$r]}" || rc=$?
  unset "pids[rank$r]"
  [[ "$rc" == 1 ]] || fail "fenced rank $r exited $rc, not 1"
  grep -q "fenced by writer" "$work/rank$r.log" || fail "rank $r does not say it was fenced"
done
echo "ok   --take-over fences all 4 ranks; each exits 1"
echo "PASS publish_sharded"
