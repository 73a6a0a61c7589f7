#!/usr/bin/env bash
# Fast verify: a delta rollout over three agents, two with the default
# `--verify-result fast` and one with `--verify-result sha256`, commits the same bytes on all of
# them. The fast agents checked every chunk they rebuilt from a payload against the signed
# manifest's XXH3-128 and none against SHA-256; the sha256 agent the other way round (read from
# their /metrics). Then the settings swap for one more delta step (v3), which must commit
# byte-identically too.
source "$(dirname "$0")/rollout_lib.bash" "$1"

make_versions 3
start_coordinator --commit-policy all --prepare-deadline 60s

# delta_chunks NAME CHECK: the agent's weightcast_agent_delta_chunks_total{check=CHECK}.
delta_chunks() {
  local url
  url="$(grep -o 'http://[0-9.:]*/metrics' "$work/$1.log" | head -1)"
  [[ -n "$url" ]] || { echo -1; return; }
  curl -sf "$url" | awk -v c="check=\"$2\"" '
    /^weightcast_agent_delta_chunks_total\{/ && index($0, c) { print $NF; found = 1 }
    END { if (!found) print -1 }'
}

start_agent a1 --metrics 127.0.0.1:0
start_agent a2 --metrics 127.0.0.1:0 --verify-result fast
start_agent a3 --metrics 127.0.0.1:0 --verify-result sha256

publish 1
wait_for 60 all_current 1 a1 a2 a3 || fail "v1 was not committed on every agent"

publish 2
wait_for 60 all_current 2 a1 a2 a3 || fail "v2 was not committed on every agent"
for a in a1 a2 a3; do
  same_files 2 "$a" || fail "$a's v2 differs from the publisher's"
  "$wc" store verify --root "$work/$a" --channel "$channel" 2 >/dev/null || fail "$a v2 verify"
done
cmp -s "$work/a1/$channel/versions/2/model.safetensors" \
  "$work/a3/$channel/versions/2/model.safetensors" || fail "a1 and a3 hold different v2 bytes"
for a in a1 a2; do
  f="$(delta_chunks "$a" fast)" s="$(delta_chunks "$a" sha256)"
  echo "$a (fast): $f chunks checked by xxh3-128, $s by sha256"
  ((f > 0 && s == 0)) || fail "$a: expected only fast checks, got fast=$f sha256=$s"
done
f="$(delta_chunks a3 fast)" s="$(delta_chunks a3 sha256)"
echo "a3 (sha256): $f chunks checked by xxh3-128, $s by sha256"
((s > 0 && f == 0)) || fail "a3: expected only sha256 checks, got fast=$f sha256=$s"
grep -q 'fetching whole chunks from now on' "$work"/a?.log && fail "an agent fell back to whole chunks"

# v3 with the settings swapped: a1 now checks with sha256, a3 with fast.
kill_process a1
kill_process a3
start_agent a1 --metrics 127.0.0.1:0 --verify-result sha256
start_agent a3 --metrics 127.0.0.1:0 --verify-result fast
publish 3
wait_for 60 all_current 3 a1 a2 a3 || fail "v3 was not committed on every agent"
for a in a1 a2 a3; do
  same_files 3 "$a" || fail "$a's v3 differs from the publisher's"
done
# A restarted agent logs a second metrics address: the last one is its current page.
for a in a1 a3; do
  url="$(grep -o 'http://[0-9.:]*/metrics' "$work/$a.log" | tail -1)"
  want=sha256
  [[ $a == a3 ]] && want=fast
  n="$(curl -sf "$url" | awk -v c="check=\"$want\"" \
    '/^weightcast_agent_delta_chunks_total\{/ && index($0, c) { print $NF }')"
  echo "$a ($want) after the swap: $n chunks of v3"
  [[ -n "$n" ]] && ((n > 0)) || fail "$a checked no v3 chunk with $want"
done
echo "PASS rollout_fast_verify"
