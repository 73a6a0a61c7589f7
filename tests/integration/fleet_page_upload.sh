#!/usr/bin/env bash
# The fleet's upload figures outlive the publisher: `weightcast publish --dir` leaves once its
# --until holds, and its upload must still show on the fleet page ("source upload", beside what
# the agents received) and in `weightcast status`. A 16 MiB version to two agents: the source
# uploads one copy of every chunk, the agents receive two copies in all. Skips the page checks
# with a message where Chromium is not installed.
source "$(dirname "$0")/rollout_lib.bash" "$1"

MODEL_SIZE=16MiB make_versions 1
start_coordinator --commit-policy all --prepare-deadline 60s --metrics 127.0.0.1:0
wait_for 10 grep -q 'serving the fleet page' "$work/coord.log" || fail "no fleet page"
page="$(grep 'serving the fleet page' "$work/coord.log" | grep -o 'http://[0-9.:]*/' | head -1)"
start_agent a1
start_agent a2
# In the foreground, with the default --until: it returns once it has left the fleet.
"$wc" publish --coordinator "$coord" --store "$work/pub" --channel "$channel" \
  --dir "$work/ckpt/1" --chunk-size 1MiB --secret-file "$work/secret" >>"$work/pub.log" 2>&1 ||
  fail "publish failed: $(tail -3 "$work/pub.log")"
wait_for 60 all_current 1 a1 a2 || fail "v1 was not committed"
model_bytes="$(du -cb "$work/ckpt/1"/* | tail -1 | cut -f1)"

curl -s "${page}api/status" >"$work/api.json"
python3 - "$work/api.json" "$model_bytes" <<'PY' || fail "/api/status lost the source's upload"
import json, sys
status, model = json.load(open(sys.argv[1])), int(sys.argv[2])
sources = [n for n in status["nodes"] if n["source"]]
assert len(sources) == 1 and sources[0]["left"], "want the publisher, listed as left: %s" % sources
sent = int(sources[0]["channels"][0]["bytes_sent"])
assert sent >= model, "the source reports %d bytes sent, under the model's %d" % (sent, model)
PY

"$wc" status --coordinator "$coord" --secret-file "$work/secret" --once >"$work/status.txt"
sent="$(grep -o 'sent [0-9.]* [KMG]*i*B in all' "$work/status.txt")" ||
  fail "no 'sent ... in all': $(cat "$work/status.txt")"
echo "status: $sent"
# What the agents received, every byte of it, someone sent: the source one copy, the agents the
# other to each other.
[[ "$sent" == "sent 32.04 MiB in all" ]] || fail "status counts $sent, not the 32.04 MiB sent"

browser="$(command -v chromium || command -v chromium-browser || true)"
if [[ -z "$browser" ]]; then
  echo "SKIP the page checks: chromium is not installed (apt-get install chromium)"
  echo "PASS fleet_page_upload"
  exit 0
fi
timeout 60 "$browser" --headless --no-sandbox --disable-gpu --virtual-time-budget=2500 \
  --dump-dom "$page" 2>/dev/null >"$work/page.html"
totals="$(grep -o 'source upload [^<]*' "$work/page.html" | head -1)" || fail "no totals on the page"
echo "$totals"
[[ "$totals" == "source upload 16.02 MiB · agents received 32.04 MiB"* ]] ||
  fail "want the source's 16.02 MiB upload beside the agents' 32.04 MiB: $totals"
echo "PASS fleet_page_upload"
