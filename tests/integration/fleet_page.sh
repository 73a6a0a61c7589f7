#!/usr/bin/env bash
# The coordinator's fleet page in a real browser: headless Chromium loads the page of a
# loopback fleet during a rollout and afterwards. The DOM must show every node's progress, a node
# killed mid-rollout as dead and first in the list, the committed version, and a hostile rack
# name as text; /api/status must equal `weightcast status --json --all`; rollback from the page needs
# the admin secret. A screenshot is left in $work (and copied to $SCREENSHOT_OUT when set).
# Skips with a message where Chromium is not installed.
source "$(dirname "$0")/rollout_lib.bash" "$1"

browser="$(command -v chromium || command -v chromium-browser || true)"
if [[ -z "$browser" ]]; then
  echo "SKIP fleet_page: chromium is not installed (apt-get install chromium)"
  exit 0
fi
dom() {  # dom FILE: the page's DOM after its script ran a few polls
  timeout 60 "$browser" --headless --no-sandbox --disable-gpu --virtual-time-budget=2500 \
    --dump-dom "$page" 2>/dev/null >"$1"
}
node_id() { echo $((1000 + $(cksum <<<"$1" | cut -d' ' -f1) % 100000)); }

MODEL_SIZE=24MiB make_versions 2
"$wc" keygen --out "$work/admin" >/dev/null
HEARTBEAT_TIMEOUT=2s start_coordinator --commit-policy all --prepare-deadline 60s \
  --metrics 127.0.0.1:0 --admin-secret-file "$work/admin"
wait_for 10 grep -q 'serving the fleet page' "$work/coord.log" || fail "no fleet page"
page="$(grep 'serving the fleet page' "$work/coord.log" | grep -o 'http://[0-9.:]*/' | head -1)"
echo "page $page"
hostile='<img src=x onerror=alert(1)>'
start_agent a1
start_agent a2 --rack "$hostile"
start_agent a3 --download-limit 1MiB  # slow: still fetching while the others are done
CHUNK_SIZE=1MiB publish 1
wait_for 60 all_current 0 a3 || true
wait_for 60 bash -c "'$wc' status --coordinator '$coord' --secret-file '$work/secret' --once \
  --json 2>/dev/null | grep -q PHASE_PREPARED" || fail "no agent prepared v1"

# Mid-rollout: four rows (three agents and the publisher), a3 still fetching.
dom "$work/during.html"
python3 - "$work/during.html" "$(node_id a3)" <<'PY' || fail "the page mid-rollout is wrong"
import re, sys
html = open(sys.argv[1]).read()
rows = re.findall(r'<tr class="node ([^"]*)" data-node="(\d+)">(.*?)</tr>', html)
print("rows:", [(r[1], r[0]) for r in rows])
assert len(rows) == 4, "want 4 node rows"
a3 = [r for r in rows if r[1] == sys.argv[2]]
assert a3 and "fetching" in a3[0][0], "a3 is not shown fetching: %s" % (a3,)
assert re.search(r'style="width:\d', a3[0][2]), "a3 has no progress bar"
assert "current v0" in html, "the channel should have no current version yet"
PY

# a3 dies mid-rollout: shown dead, first; under `all` the others then commit without it.
kill_process a3
wait_for 40 all_current 1 a1 a2 || fail "v1 was not committed after a3 died"
timeout 60 "$browser" --headless --no-sandbox --disable-gpu --virtual-time-budget=2500 \
  --window-size=1280,760 --screenshot="$work/page.png" "$page" 2>/dev/null >/dev/null || true
[[ -s "$work/page.png" ]] || fail "no screenshot"
[[ -z "${SCREENSHOT_OUT:-}" ]] || cp "$work/page.png" "$SCREENSHOT_OUT"
dom "$work/after.html"
python3 - "$work/after.html" "$(node_id a3)" <<'PY' || fail "the page after the rollout is wrong"
import re, sys
html = open(sys.argv[1]).read()
rows = re.findall(r'<tr class="node ([^"]*)" data-node="(\d+)">', html)
print("rows:", [(r[1], r[0]) for r in rows])
assert rows[0] == ("dead", sys.argv[2]), "the dead a3 is not first: %s" % rows[:1]
assert '<span class="current">current v1</span>' in html, "committed version not shown"
assert sum(1 for r in rows if "committed" in r[0]) == 2, "a1 and a2 should show committed"
assert "&lt;img src=x onerror=alert(1)&gt;" in html, "the hostile rack is not shown as text"
assert "<img" not in html, "the hostile rack became an element"
PY

# The JSON endpoint is `weightcast status --json --all`: nodes that left are listed too.
curl -s "${page}api/status" >"$work/api.json"
"$wc" status --coordinator "$coord" --secret-file "$work/secret" --once --json --all >"$work/cli.json"
python3 - "$work/api.json" "$work/cli.json" <<'PY' || fail "/api/status and status --json differ"
import json, sys
def norm(s):
    s.pop("now_unix_ms", None)
    for n in s["nodes"]:
        n.pop("last_heartbeat_ms_ago", None)
    s["nodes"].sort(key=lambda n: n["node_id"])
    return s
a, b = (norm(json.load(open(p))) for p in sys.argv[1:])
assert a == b, "differ:\n%s\n%s" % (a, b)
PY

# Rollback from the page: only with the admin secret.
CHUNK_SIZE=1MiB publish 2
wait_for 40 all_current 2 a1 a2 || fail "v2 was not committed"
code="$(curl -s -o "$work/rb.json" -w '%{http_code}' -X POST -d '{"channel":"policy","version":1}' \
  "${page}api/rollback")"
[[ "$code" == 401 ]] || fail "a rollback without the admin secret got HTTP $code"
code="$(curl -s -o "$work/rb.json" -w '%{http_code}' -X POST \
  -H "Authorization: Bearer $(cat "$work/secret")" -d '{"channel":"policy","version":1}' \
  "${page}api/rollback")"
[[ "$code" == 401 ]] || fail "the cluster secret was taken as the admin secret (HTTP $code)"
code="$(curl -s -o "$work/rb.json" -w '%{http_code}' -X POST \
  -H "Authorization: Bearer $(head -n1 "$work/admin")" -d '{"channel":"policy","version":1}' \
  "${page}api/rollback")"
[[ "$code" == 200 ]] || fail "the admin rollback got HTTP $code: $(cat "$work/rb.json")"
wait_for 20 all_current 1 a1 a2 || fail "the fleet did not roll back to v1"
echo "PASS fleet_page"
