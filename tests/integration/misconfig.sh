#!/usr/bin/env bash
# Misconfiguration that waiting will not fix ends in a clear error: bad addresses and
# a missing --dir are flag errors (exit 2) before anything starts; a wrong cluster secret is an
# ERROR line and a weightcast_agent_error metric on an agent, and a prompt exit 1 of a one-shot
# command; an agent whose coordinator stays away says so at ERROR, without a line per retry; a
# one-shot publish to a closed port gives up within its documented 30 s. Every process is bounded.
source "$(dirname "$0")/rollout_lib.bash" "$1"

make_versions 1
start_coordinator
head -c 48 /dev/urandom | base64 >"$work/wrong-secret"
chmod 600 "$work/secret" "$work/wrong-secret"

# A port nobody listens on: bound once by the kernel's choice, then closed.
closed="127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

# A one-shot publish to the closed port, in the background: it must give up by itself.
pub_start=$SECONDS
timeout 60 "$wc" publish --coordinator "$closed" --store "$work/pub-closed" --channel "$channel" \
  --dir "$work/ckpt/1" --until complete --secret-file "$work/secret" >"$work/pub-closed.log" 2>&1 &
pids[pub_closed]=$!
# An agent of the closed port: INFO at first, one ERROR once the outage lasts 10 s.
timeout 60 "$wc" agent --coordinator "$closed" --store "$work/away" --channel "$channel" \
  --secret-file "$work/secret" >"$work/away.log" 2>&1 &
pids[away]=$!

# expect_exit NAME RC PATTERN CMD...: CMD exits with RC within 10 s and prints PATTERN.
expect_exit() {
  local name="$1" want="$2" pattern="$3" rc=0 out start=$SECONDS
  shift 3
  out="$(timeout 10 "$@" 2>&1)" || rc=$?
  [[ "$rc" == "$want" ]] || fail "$name: exit $rc, wanted $want: $out"
  grep -q -- "$pattern" <<<"$out" || fail "$name: output lacks '$pattern': $out"
  echo "ok   $name (exit $rc in $((SECONDS - start)) s): $(tail -n 1 <<<"$out")"
}

# Flag errors: exit 2 at once, naming the flag, nothing started.
for bad in 127.0.0.1:99999 127.0.0.1 127.0.0.1:0 'bad_name!:7000' -host:7000; do
  expect_exit "agent --coordinator $bad" 2 "--coordinator" \
    "$wc" agent --coordinator "$bad" --store "$work/flag-agent" --channel "$channel" \
    --secret-file "$work/secret"
  expect_exit "publish --coordinator $bad" 2 "--coordinator" \
    "$wc" publish --coordinator "$bad" --store "$work/flag-pub" --channel "$channel" \
    --dir "$work/ckpt/1" --secret-file "$work/secret"
done
expect_exit "status --coordinator" 2 "--coordinator" \
  "$wc" status --coordinator 127.0.0.1:70000 --once --secret-file "$work/secret"
expect_exit "rollback --coordinator" 2 "--coordinator" \
  "$wc" rollback --coordinator 127.0.0.1 "$channel" --secret-file "$work/secret"
expect_exit "agent --listen" 2 "--listen" \
  "$wc" agent --coordinator "$coord" --listen 127.0.0.1:65536 --store "$work/flag-agent" \
  --channel "$channel" --secret-file "$work/secret"
# Host names are resolved: localhost reaches the coordinator; a name that does not resolve is
# named (the .invalid domain never resolves).
# A bare container may have no /etc/hosts: then localhost names nothing here, and the check says so.
coord_port="${coord##*:}"
if getent hosts localhost >/dev/null; then
  expect_exit "status --coordinator localhost" 0 "" \
    "$wc" status --coordinator "localhost:$coord_port" --once --secret-file "$work/secret"
else
  echo "skip status --coordinator localhost: localhost does not resolve on this machine"
fi
expect_exit "status --coordinator unresolvable" 1 "cannot resolve 'no-such-host.invalid'" \
  "$wc" status --coordinator no-such-host.invalid:7000 --once --secret-file "$work/secret"

# No secret, or a secret file that is not there: a usage error naming what is missing.
expect_exit "agent without a secret" 2 "no cluster secret" \
  env -u WEIGHTCAST_SECRET "$wc" agent --coordinator "$coord" --store "$work/flag-agent" \
  --channel "$channel"
expect_exit "agent --secret-file missing" 2 "secret file $work/no-such-secret" \
  "$wc" agent --coordinator "$coord" --store "$work/flag-agent" --channel "$channel" \
  --secret-file "$work/no-such-secret"
# A missing --dir is found before the store is opened or the coordinator dialled (the closed
# port would make a connect attempt wait).
expect_exit "publish --dir missing" 2 "--dir $work/no-such-dir: no such directory" \
  "$wc" publish --coordinator "$closed" --store "$work/flag-pub" --channel "$channel" \
  --dir "$work/no-such-dir" --secret-file "$work/secret"
[[ ! -e "$work/flag-pub" && ! -e "$work/flag-agent" ]] || fail "a flag error opened a store"

# A wrong secret: one-shot commands exit 1 within seconds, saying so.
expect_exit "publish, wrong secret" 1 "refused our handshake: wrong cluster secret" \
  "$wc" publish --coordinator "$coord" --store "$work/pub-wrong" --channel "$channel" \
  --dir "$work/ckpt/1" --until complete --secret-file "$work/wrong-secret"
expect_exit "status --once, wrong secret" 1 "wrong cluster secret" \
  "$wc" status --coordinator "$coord" --once --secret-file "$work/wrong-secret"
expect_exit "status --until-complete, wrong secret" 1 "wrong cluster secret" \
  "$wc" status --coordinator "$coord" --until-complete --secret-file "$work/wrong-secret"
expect_exit "rollback, wrong secret" 1 "wrong cluster secret" \
  "$wc" rollback --coordinator "$coord" "$channel" --secret-file "$work/wrong-secret"
expect_exit "publish, wrong cluster" 1 "wrong cluster" \
  "$wc" publish --coordinator "$coord" --store "$work/pub-cluster" --channel "$channel" \
  --dir "$work/ckpt/1" --cluster other --secret-file "$work/secret"

# An agent with a wrong secret keeps retrying (the secret may be fixed at the coordinator) but
# logs ERROR at once and shows the cause on /metrics.
timeout 60 "$wc" agent --coordinator "$coord" --store "$work/wrong" --channel "$channel" \
  --metrics 127.0.0.1:0 --secret-file "$work/wrong-secret" >"$work/wrong.log" 2>&1 &
pids[wrong]=$!
wait_for 10 grep -q 'ERROR.*refused our handshake: wrong cluster secret' "$work/wrong.log" ||
  fail "the wrong-secret agent logged no ERROR within 10 s"
metrics_url="$(grep -o 'http://[0-9.:]*/metrics' "$work/wrong.log" | head -n 1)"
[[ -n "$metrics_url" ]] || fail "the agent did not say where its metrics are"
scrape() { python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "$metrics_url"; }
# Into a variable first: `scrape | grep -q` closes the pipe at the first match, and the writer's
# BrokenPipeError under pipefail failed the check although the line was there.
page_text="$(scrape)"
grep -q 'weightcast_agent_error{.*cause="wrong_secret".*} 1' <<<"$page_text" ||
  fail "no weightcast_agent_error{cause=wrong_secret} on /metrics: $(grep agent_error <<<"$page_text")"
grep -q "WARN.*refused peer .*does not verify" "$work/coord.log" || fail "the coordinator did not WARN of it"

# The agent of the closed port: ERROR after its 10 s outage, a handful of lines in all.
wait_for 20 grep -q 'ERROR.*unreachable for' "$work/away.log" ||
  fail "the agent of a closed port logged no ERROR"
lines="$(grep -c "$closed" "$work/away.log")"
((lines <= 3)) || fail "the agent of a closed port logged $lines lines about it (spam)"
errors="$(grep -c ERROR "$work/wrong.log")"
((errors <= 2)) || fail "the wrong-secret agent logged $errors ERROR lines (spam)"
lines="$(grep -c "$coord" "$work/wrong.log")"
((lines <= 3)) || fail "the wrong-secret agent logged $lines lines about its coordinator (spam)"

# The one-shot publish to the closed port ended by itself, non-zero, within its 30 s bound.
rc=0
wait "${pids[pub_closed]}" || rc=$?
unset "pids[pub_closed]"
took=$((SECONDS - pub_start))
[[ "$rc" == 1 ]] || fail "publish to a closed port: exit $rc (124: it hung): $(tail -n 3 "$work/pub-closed.log")"
((took <= 45)) || fail "publish to a closed port took $took s"
grep -q 'gave up on the coordinator at .* after 30s' "$work/pub-closed.log" ||
  fail "publish to a closed port: unclear error: $(tail -n 2 "$work/pub-closed.log")"
echo "ok   publish to a closed port: exit 1 after $took s"
echo "PASS misconfig"
