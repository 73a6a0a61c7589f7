#!/usr/bin/env bash
# Two-phase commit with policy `all`: three agents prepare each version while the old one keeps
# serving, the coordinator commits only once all of them prepared, every agent switches and runs
# its engine hook (a command for two agents, an HTTP POST for the third), and the files are
# byte-identical to the publisher's.
source "$(dirname "$0")/rollout_lib.bash" "$1"

make_versions 2
start_coordinator --commit-policy all --prepare-deadline 30s

# The HTTP hook target: a tiny server that appends each POSTed body to a file.
python3 - "$work/http.port" "$work/http.hooks" >"$work/http.log" 2>&1 <<'EOF' &
import http.server, sys
port_file, out = sys.argv[1], sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with open(out, "ab") as f:
            f.write(body + b"\n")
        self.send_response(200)
        self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(port_file, "w").write(str(s.server_address[1]))
s.serve_forever()
EOF
pids[http]=$!
wait_for 10 test -s "$work/http.port" || fail "hook server did not start"

hook='echo "$WEIGHTCAST_CHANNEL $WEIGHTCAST_VERSION $WEIGHTCAST_DIR" >>'
start_agent a1 --hook-command "$hook $work/a1.hooks #"
start_agent a2 --hook-command "$hook $work/a2.hooks #"
start_agent a3 --hook-url "http://127.0.0.1:$(cat "$work/http.port")/reload"

publish 1
wait_for 40 all_current 1 a1 a2 a3 || fail "v1 was not committed on every agent"
[[ "$(decision_of 1)" == COMMIT ]] || fail "v1 is not COMMIT in the coordinator's log"

# v2: while it is being prepared, v1 stays current everywhere (never a mix).
publish 2
saw_prepared_with_v1=0
for _ in $(seq 200); do
  for a in a1 a2 a3; do
    c="$(current_of "$a")"
    [[ "$c" == 1 || "$c" == 2 ]] || fail "$a has current $c"
  done
  if grep -q 'prepared v2' "$work/a1.log" && [[ "$(current_of a1)" == 1 ]]; then
    saw_prepared_with_v1=1
  fi
  all_current 2 a1 a2 a3 && break
  sleep 0.1
done
all_current 2 a1 a2 a3 || fail "v2 was not committed on every agent"
for a in a1 a2 a3; do
  same_files 2 "$a" || fail "$a's v2 differs from the publisher's"
  "$wc" store verify --root "$work/$a" --channel "$channel" 2 >/dev/null || fail "$a v2 verify"
done
echo "an agent was seen prepared with v1 still current: $saw_prepared_with_v1"

# The hooks ran once per commit, with the channel, the version and its directory.
wait_for 10 grep -q "policy 2 $work/a1/policy/versions/2" "$work/a1.hooks" || fail "a1 hook v2"
grep -q "policy 1 $work/a2/policy/versions/1" "$work/a2.hooks" || fail "a2 hook v1"
wait_for 10 grep -q '"version":2' "$work/http.hooks" || fail "a3 HTTP hook v2"
python3 - "$work/http.hooks" "$work/a3/policy/versions/2" <<'EOF' || fail "a3 HTTP hook body"
import json, sys
bodies = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert {"channel": "policy", "version": 2, "dir": sys.argv[2]} in bodies, bodies
EOF
[[ "$(wc -l <"$work/a1.hooks")" == 2 ]] || fail "a1 ran its hook $(wc -l <"$work/a1.hooks") times"
echo "PASS rollout_commit"
