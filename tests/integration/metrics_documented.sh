#!/usr/bin/env bash
# docs/metrics.md and the code agree: a loopback fleet (a coordinator, two agents and
# a publisher, each with --metrics) publishes one version and commits it; then every daemon's
# /metrics is scraped. Each metric in the doc's table for that daemon must be on its page with
# the documented type (histograms as _bucket/_sum/_count lines) and only documented label names,
# and every weightcast_ family on the page must be in the table. A row whose meaning says
# "absent otherwise" or "absent until" is a metric that appears only in that case: checked when
# present, not required.
source "$(dirname "$0")/rollout_lib.bash" "$1"
doc="$(dirname "$0")/../../docs/metrics.md"
[[ -s "$doc" ]] || fail "no $doc"

# metrics_url LOG: the /metrics address a daemon logged.
metrics_url() { grep -o 'http://[0-9.:]*/metrics' "$1" | head -1; }

make_versions 1
start_coordinator --metrics 127.0.0.1:0
wait_for 10 grep -q 'serving metrics' "$work/coord.log" || fail "the coordinator serves no metrics"
start_agent a1 --metrics 127.0.0.1:0
start_agent a2 --metrics 127.0.0.1:0
publish 1 --metrics 127.0.0.1:0
wait_for 60 all_current 1 a1 a2 || fail "v1 was not committed on both agents"
wait_for 10 decided 1 COMMIT || fail "the coordinator did not log v1 as committed"
for log in a1 a2 pub; do
  wait_for 10 grep -q 'serving metrics' "$work/$log.log" || fail "$log serves no metrics"
done
# Let a sweep count the agents and a heartbeat report the commit.
sleep 1

declare -A daemon_of=([coord]=coordinator [a1]=agent [a2]=agent [pub]=publisher)
for name in coord a1 a2 pub; do
  url="$(metrics_url "$work/$name.log")"
  [[ -n "$url" ]] || fail "no metrics address in $name.log"
  curl -sf "$url" >"$work/$name.prom" || fail "cannot scrape $name at $url"
  echo "scraped $name ($url): $(grep -c '^weightcast_' "$work/$name.prom") samples"
  python3 - "$doc" "${daemon_of[$name]}" "$work/$name.prom" <<'PY' || fail "$name: docs/metrics.md and /metrics disagree"
import re, sys

doc_path, daemon, page_path = sys.argv[1:]

# The doc's tables: "### <daemon> (...)" sections under "## Metrics each daemon exports", rows
# "| `name` | type | labels | meaning |".
documented = {}
section = None
in_exports = False
for line in open(doc_path, encoding="utf-8"):
    if line.startswith("## "):
        in_exports = line.startswith("## Metrics each daemon exports")
        section = None
        continue
    if in_exports and line.startswith("### "):
        section = line[4:].split()[0]
        continue
    if section != daemon or not line.startswith("|"):
        continue
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    m = re.fullmatch(r"`(weightcast_[a-z0-9_]+)`", cells[0]) if cells else None
    if not m or len(cells) < 4:
        continue
    labels = set()
    depth, word = 0, ""
    for ch in cells[2] + ",":  # "channel, type (register, ...)": names outside parentheses
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            if word.strip():
                labels.add(word.split()[0])
            word = ""
        elif depth == 0:
            word += ch
    conditional = re.search(r"absent (otherwise|until)", cells[3]) is not None
    documented[m.group(1)] = (cells[1], labels, conditional)
if not documented:
    sys.exit("no table rows for %s in %s" % (daemon, doc_path))

# The page: TYPE lines and the label names of every sample.
types, samples = {}, {}
for line in open(page_path, encoding="utf-8"):
    line = line.rstrip("\n")
    if line.startswith("# TYPE "):
        _, _, name, kind = line.split(" ")
        types[name] = kind
    elif line and not line.startswith("#"):
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? ", line)
        if not m:
            sys.exit("unparsable sample line: " + line)
        names = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(3) or ""))
        samples.setdefault(m.group(1), []).append(names)

problems = []
for name, (kind, labels, conditional) in sorted(documented.items()):
    if name not in types:
        if not conditional:
            problems.append("%s is documented but not exported" % name)
        continue
    if types[name] != kind:
        problems.append("%s is a %s on the page, a %s in the doc" % (name, types[name], kind))
    series = [name + s for s in ("_bucket", "_sum", "_count")] if kind == "histogram" else [name]
    for s in series:
        if s not in samples:
            problems.append("%s has no %s samples" % (name, s))
            continue
        allowed = labels | ({"le"} if s.endswith("_bucket") else set())
        for got in samples[s]:
            if not got <= allowed:
                problems.append("%s has undocumented labels %s" % (s, sorted(got - allowed)))
                break
for name in sorted(types):
    if name.startswith("weightcast_") and name not in documented:
        problems.append("%s is exported but not documented for the %s" % (name, daemon))
for p in problems:
    print("  " + p)
print("%s: %d documented, %d exported, %d problems" % (daemon, len(documented), len(types),
                                                       len(problems)))
sys.exit(1 if problems else 0)
PY
done

# A few values, not just names: the committed version is what the fleet has.
grep -qx 'weightcast_coordinator_current_version{channel="policy"} 1' "$work/coord.prom" ||
  fail "coordinator current_version is not 1"
grep -qx 'weightcast_coordinator_commits_total{channel="policy"} 1' "$work/coord.prom" ||
  fail "coordinator commits_total is not 1"
grep -qx 'weightcast_coordinator_rollout_seconds_count{channel="policy"} 1' "$work/coord.prom" ||
  fail "coordinator rollout_seconds did not observe the commit"
grep -qx 'weightcast_coordinator_agents_failed{channel="policy"} 0' "$work/coord.prom" ||
  fail "coordinator agents_failed is not 0"
grep -qx 'weightcast_agent_failed{channel="policy"} 0' "$work/a1.prom" || fail "a1 reads failed"
awk '$1 ~ /^weightcast_agent_chunk_fetch_seconds_count/ { n += $2 } END { exit !(n > 0) }' \
  "$work/a1.prom" "$work/a2.prom" || fail "no chunk fetch was timed on either agent"
awk '$1 ~ /^weightcast_agent_transport_bytes_total.*direction="rx"/ && $2 > 0 { ok = 1 }
     END { exit !ok }' "$work/a1.prom" || fail "a1 counted no transport bytes received"
echo "PASS metrics_documented"
