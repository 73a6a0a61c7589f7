#!/usr/bin/env python3
"""Summarises the swarm trace of a kept bench/sharded_netns.sh run.

    WEIGHTCAST_SWARM_TRACE=1000 bash bench/sharded_netns.sh --keep DIR
    python3 bench/cluster/sharded_trace.py DIR [RUN] [STEP]

RUN is sharded (default) or single; STEP the row width in seconds (default 5). Prints one row
per STEP from the publishers' start: the sources' upload rate (sum and each), the agents'
download rate (mean, min), their upload rate (mean), how many still miss chunks, their
outstanding requests (mean) and the refusals they received (sum, in the step); then each
agent's commit time. Reads only the logs.
"""
import collections
import os
import re
import sys

# The trace line's format and the log's timestamps are read as bench/cluster/trace.py reads them.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace import TRACE, when  # noqa: E402  (this directory's trace.py, not the stdlib's)

COMMIT = re.compile(r"^(\S+) .*agent: committed v")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    run = sys.argv[2] if len(sys.argv) > 2 else "sharded"
    step = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    with open(os.path.join(d, run + ".t0")) as f:
        t0 = float(f.read())
    # row -> node -> list of samples (rx, tx, missing, outstanding, refused)
    rows = collections.defaultdict(lambda: collections.defaultdict(list))
    commits = {}
    refused_last = {}
    for name in sorted(os.listdir(d)):
        if not name.startswith(run + ".") or not name.endswith(".log"):
            continue
        node = name[len(run) + 1:-4]  # a<host> or pub<rank>
        with open(os.path.join(d, name), errors="replace") as f:
            for line in f:
                m = TRACE.match(line)
                if m:
                    t = when(m.group(1)) - t0
                    refused = int(m.group(12))
                    delta = refused - refused_last.get(node, 0)
                    refused_last[node] = refused
                    if t >= 0:
                        rows[int(t // step)][node].append(
                            (float(m.group(3)), float(m.group(4)), int(m.group(5)),
                             int(m.group(6)), delta))
                    continue
                m = COMMIT.match(line)
                if m and node.startswith("a") and node not in commits:
                    commits[node] = when(m.group(1)) - t0
    pubs = sorted({n for r in rows.values() for n in r if n.startswith("pub")})
    print("    s  src_tx_sum  [each]                      agent_rx mean/min  agent_tx  "
          "missing>0  outstanding  refused")
    for k in sorted(rows):
        r = rows[k]
        mean = lambda xs: sum(xs) / len(xs) if xs else 0.0
        src = [mean([x[1] for x in r.get(p, [])]) for p in pubs]
        agents = [v for n, v in r.items() if n.startswith("a")]
        if not agents:
            continue
        rx = [mean([x[0] for x in a]) for a in agents]
        tx = [mean([x[1] for x in a]) for a in agents]
        print("%5.0f  %10.1f  [%s]  %7.1f / %-7.1f  %8.1f  %9d  %11.1f  %7d" % (
            k * step, sum(src), " ".join("%5.1f" % x for x in src), mean(rx), min(rx), mean(tx),
            sum(1 for a in agents if a[-1][2] > 0), mean([mean([x[3] for x in a]) for a in agents]),
            sum(x[4] for a in agents for x in a)))
    for node in sorted(commits, key=lambda n: int(n[1:])):
        print("%s committed at %.2f s" % (node, commits[node]))


if __name__ == "__main__":
    main()
