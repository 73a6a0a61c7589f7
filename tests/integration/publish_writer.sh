#!/usr/bin/env bash
# One writer per channel (docs/publish.md "One writer per channel"): a second
# `publish` on a channel another live publisher holds exits 1 at once naming the holder; the
# same store restarted continues the delta chain; `--take-over` fences the old writer, which
# exits 1 ("fenced by writer ..."); the fence survives a coordinator restart. Also: files that
# are not safetensors are warned about, and `--dir FILE` is refused.
source "$(dirname "$0")/rollout_lib.bash" "$1"

make_versions 4
start_coordinator

writer_of() {  # writer_of FIELD: the channel's writer as the coordinator reports it
  status_json | python3 -c '
import json, sys
for ch in json.load(sys.stdin).get("channels", []):
    print(ch.get("writer", {}).get(sys.argv[1], ""))' "$1"
}
base_of() {  # base_of V: the base version of V (0: full)
  status_json | python3 -c '
import json, sys
for ch in json.load(sys.stdin).get("channels", []):
    for e in ch.get("versions", []):
        if int(e["version"]) == int(sys.argv[1]):
            print(e.get("base_version", 0))' "$1"
}
logged() { [[ "$(decision_of "$1")" != UNKNOWN ]]; }

# Writer A: the store $work/pub, seeding v1 until stopped.
publish 1
wait_for 30 logged 1 || fail "v1 was not published"
writer_a="$(cat "$work/pub/.writer-id")"
[[ "$(writer_of writer_id)" == "$writer_a" ]] || fail "the coordinator's writer is not $writer_a"

# A second writer (another store) is refused at once, naming the holder.
start=$SECONDS
rc=0
timeout 60 "$wc" publish --coordinator "$coord" --store "$work/pub2" --channel "$channel" \
  --dir "$work/ckpt/2" --chunk-size 1MiB --secret-file "$work/secret" \
  >"$work/second.out" 2>"$work/second.log" || rc=$?
[[ "$rc" == 1 ]] || fail "a second writer: exit $rc, not 1"
((SECONDS - start <= 10)) || fail "a second writer took $((SECONDS - start)) s to be refused"
grep -q "channel $channel already has a writer: writer $writer_a (node " "$work/second.log" ||
  fail "the refusal does not name the holder: $(tail -n 2 "$work/second.log")"
[[ "$(base_of 2)" == "" ]] || fail "the refused writer published v2"
echo "ok   a second writer is refused in $((SECONDS - start)) s: $(grep -o 'already has a writer: [^;]*' "$work/second.log" | head -n 1)"

# The same writer restarted (killed, then started on its store again at once) continues: v2 is a
# delta on v1.
kill_process pub KILL
publish 2
wait_for 30 logged 2 || fail "the restarted writer did not publish v2"
[[ "$(base_of 2)" == 1 ]] || fail "v2 after a restart is not a delta on v1 (base $(base_of 2))"
[[ "$(writer_of epoch)" == 2 ]] || fail "the restart did not move the epoch to 2: $(writer_of epoch)"
echo "ok   the restarted writer continues the chain: v2 is a delta on v1, epoch 2"

# --take-over: writer B takes the channel; A (still running) is fenced and exits 1.
# ckpt/3 also holds a file that is not safetensors: the publisher warns about it.
head -c 5000 /dev/urandom >"$work/ckpt/3/optimizer.pt"
"$wc" publish --coordinator "$coord" --store "$work/pub2" --channel "$channel" \
  --dir "$work/ckpt/3" --chunk-size 1MiB --until never --take-over --secret-file "$work/secret" \
  >"$work/pub2.out" 2>"$work/pub2.log" &
pids[pub2]=$!
wait_for 30 logged 3 || fail "the take-over did not publish v3"
[[ "$(writer_of writer_id)" == "$(cat "$work/pub2/.writer-id")" ]] || fail "B is not the writer"
[[ "$(writer_of taken_over)" == True ]] || fail "the writer is not marked taken over"
rc=0
timeout 20 tail --pid="${pids[pub]}" -f /dev/null || fail "the fenced writer still runs"
wait "${pids[pub]}" || rc=$?
unset "pids[pub]"
[[ "$rc" == 1 ]] || fail "the fenced writer exited $rc, not 1"
grep -q "fenced by writer $(cat "$work/pub2/.writer-id")" "$work/pub.log" ||
  fail "the fenced writer does not say who fenced it"
echo "ok   --take-over fences the old writer, which exits 1: $(grep -o 'fenced by writer [^)]*)' "$work/pub.log" | head -n 1)"
grep -q 'not safetensors.*optimizer.pt' "$work/pub2.log" ||
  fail "no warning about optimizer.pt: $(grep -i warn "$work/pub2.log" | head -n 3)"
echo "ok   a file that is not safetensors is warned about"

# The coordinator restarts: the writer and its epoch are in its log. A publisher on A's store is
# still refused (B holds the channel and reconnects).
kill_process coord KILL
start_coordinator
[[ "$(writer_of epoch)" == 3 ]] || fail "epoch after the restart: $(writer_of epoch), not 3"
rc=0
timeout 60 "$wc" publish --coordinator "$coord" --store "$work/pub" --channel "$channel" \
  --dir "$work/ckpt/4" --chunk-size 1MiB --secret-file "$work/secret" \
  >"$work/third.out" 2>"$work/third.log" || rc=$?
[[ "$rc" == 1 ]] || fail "A after the coordinator restart: exit $rc, not 1"
grep -q "already has a writer: writer $(cat "$work/pub2/.writer-id")" "$work/third.log" ||
  fail "A after the restart: $(tail -n 2 "$work/third.log")"
[[ "$(writer_of live)" == True ]] || fail "B did not reconnect as the writer"
echo "ok   the writer survives a coordinator restart: A is still refused, B holds epoch 3"

# --dir given a file is a flag error (exit 2), before anything starts.
rc=0
"$wc" publish --coordinator "$coord" --store "$work/pub3" --channel "$channel" \
  --dir "$work/ckpt/4/model.safetensors" --secret-file "$work/secret" \
  >/dev/null 2>"$work/file.log" || rc=$?
[[ "$rc" == 2 ]] || fail "--dir FILE: exit $rc, not 2"
grep -q "a file, not a directory" "$work/file.log" || fail "--dir FILE: $(cat "$work/file.log")"
[[ ! -e "$work/pub3" ]] || fail "--dir FILE created a store"
echo "ok   --dir FILE is refused: $(tail -n 1 "$work/file.log")"
