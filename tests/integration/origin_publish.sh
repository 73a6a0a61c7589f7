#!/usr/bin/env bash
# weightcast publish --from an HTTPS origin (nginx, TLS from a test CA, Range requests, a bearer
# token): a sharded model in Hugging Face's layout is streamed into a version with no local copy,
# seeded from the origin, and committed by three agents byte for byte. Then a file replaced at
# the origin while its version is seeded aborts the version fleet-wide, naming the cause. Bad
# origin input (no token, a wrong URL) fails the publish before anything is published.
# shellcheck source=tests/integration/rollout_lib.bash
source "$(dirname "$0")/rollout_lib.bash" "$1"
# shellcheck source=tests/integration/origin_lib.bash
source "$(dirname "$0")/origin_lib.bash"

start_origin
"$wc" synth model -o "$work/model" --size 12MiB --shard-size 4MiB --seed 3 >/dev/null
cp "$work/model"/*.safetensors "$work/model/model.safetensors.index.json" "$work/origin/"
shards=$(ls "$work/origin"/*.safetensors | wc -l)
((shards >= 3)) || fail "expected a sharded model, got $shards shard(s)"
model_bytes=$(cat "$work/origin"/* | wc -c)

start_coordinator --commit-policy all --prepare-deadline 60s
# The agents read the origin too: the coordinator grants each a share of the chunks.
for a in a1 a2 a3; do
  start_agent "$a" --origin-ca "$work/ca.pem" --origin-token-file "$work/origin.token"
done

publish_from() {  # publish_from URL [FLAGS...]: a one-shot publish, its stdout in $work/pub.out
  local url="$1"
  shift
  timeout 120 "$wc" publish --coordinator "$coord" --store "$work/pub" --channel "$channel" \
    --from "$url" --origin-ca "$work/ca.pem" --chunk-size 1MiB --secret-file "$work/secret" \
    "$@" >"$work/pub.out" 2>>"$work/pub.log"
}

# Without the token the origin answers 401: the publish fails at once and publishes nothing.
rc=0
publish_from "$origin_url" --until complete || rc=$?
[[ "$rc" == 1 ]] || fail "a publish without the token: exit $rc, expected 1"
grep -q "the origin refused the request (HTTP 401); no token was sent" "$work/pub.log" ||
  fail "the 401 was not named"
[[ "$(decision_of 1)" == UNKNOWN ]] || fail "a refused publish logged a version"

before=$(origin_bytes)
publish_from "$origin_url" --origin-token-file "$work/origin.token" --until complete ||
  fail "publish --from failed"
[[ "$(cat "$work/pub.out")" == 1 ]] || fail "publish printed $(cat "$work/pub.out"), expected 1"
wait_for 60 all_current 1 a1 a2 a3 || fail "the agents did not commit v1"
for a in a1 a2 a3; do
  n=0
  for f in "$work/origin"/*; do
    cmp -s "$f" "$work/$a/$channel/versions/1/$(basename "$f")" || fail "$a: $(basename "$f") differs"
    n=$((n + 1))
  done
  [[ "$(ls "$work/$a/$channel/versions/1" | wc -l)" == "$n" ]] || fail "$a holds other files"
done
# Nothing of the model was stored by the publisher, and the token is in no log.
[[ ! -e "$work/pub/$channel/versions/1" ]] || fail "the publisher stored the version"
! grep -rqF "$(cat "$work/origin.token")" "$work"/*.log || fail "the token reached a log"
served=$(($(origin_bytes) - before))
pass=$(grep -o 'origin_bytes=[0-9]*' "$work/pub.log" | tail -n 1 | cut -d= -f2)
[[ -n "$pass" ]] || fail "the publisher did not log the bytes of its pass"
ratio() { python3 -c "print(round($1 / $model_bytes, 3))"; }
echo "origin served $(ratio "$served")x the model: $(ratio "$pass")x to build the manifest, $(ratio $((served - pass)))x to distribute it"
# Each chunk leaves the origin about once for the distribution: the agents' shares and the
# publisher's reads for what the shares have not brought yet.
((served - pass <= 2 * model_bytes)) || fail "the distribution read the origin $(ratio $((served - pass)))x"

# A file replaced at the origin while its version is seeded: the publisher's reads are refused
# (If-Match on the ETag it recorded), it reports the version FAILED, the coordinator aborts it,
# and the publish exits 1 naming the cause. The agents are stopped while v2 is published, so its
# chunks are read from the origin only after the change, when one of them comes back.
for a in a1 a2 a3; do kill_process "$a"; done
mkdir -p "$work/origin/b"
"$wc" synth model -o "$work/model-b" --size 6MiB --shard-size 2MiB --seed 4 >/dev/null
cp "$work/model-b"/*.safetensors "$work/model-b/model.safetensors.index.json" "$work/origin/b/"
(
  rc=0
  publish_from "${origin_url}b/" --origin-token-file "$work/origin.token" --until complete || rc=$?
  echo "$rc" >"$work/pub.rc"
) &
pids[pub]=$!
wait_for 60 decided 2 NONE || fail "v2 was not published"
shard="$(ls "$work/origin/b"/*.safetensors | head -n 1)"
python3 - "$shard" <<'PY'
import os, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    f.seek(-1, os.SEEK_END)
    last = f.read(1)
    f.seek(-1, os.SEEK_END)
    f.write(bytes([last[0] ^ 1]))
st = os.stat(path)
os.utime(path, (st.st_atime, st.st_mtime + 10))  # nginx's ETag is mtime-size
PY
start_agent a1
wait_for 60 decided 2 ABORT || fail "v2 was not aborted after its origin changed"
reason="$(abort_reason_of 2)"
echo "v2 aborted: $reason"
[[ "$reason" == *"changed at the origin"* ]] || fail "the abort reason does not name the change: $reason"
wait_for 30 test -s "$work/pub.rc" || fail "the publish of v2 did not end"
[[ "$(cat "$work/pub.rc")" == 1 ]] || fail "the publish of v2 exited $(cat "$work/pub.rc"), expected 1"
grep -q "v2 was aborted" "$work/pub.log" || fail "the publisher did not say v2 was aborted"
[[ "$(current_of a1)" == 1 ]] || fail "a1 left v1"
[[ ! -e "$work/a1/$channel/versions/2" ]] || fail "a1 kept a half-done v2"

# An origin URL that names no model is refused before anything starts (exit 2).
rc=0
timeout 30 "$wc" publish --coordinator "$coord" --store "$work/pub" --channel "$channel" \
  --from "${origin_url}config.json" --secret-file "$work/secret" 2>"$work/bad.err" || rc=$?
[[ "$rc" == 2 ]] || fail "--from a non-model URL: exit $rc, expected 2"
grep -q "names neither a .safetensors file" "$work/bad.err" || fail "no reason: $(cat "$work/bad.err")"
echo "origin publish: ok"
