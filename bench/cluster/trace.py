#!/usr/bin/env python3
"""Summarises the swarm trace of a kept weightcast cluster run (run.sh --keep --trace MS).

    python3 bench/cluster/trace.py WORKDIR [PHASE]

WORKDIR is the kept directory (run.sh prints "kept DIR"); PHASE is weightcast (default) or
weightcast_delta. Prints one row per second from the phase's start: the source's upload rate,
its uploads in progress and queued requests, the agents' mean and minimum download rate, and
how many agents still miss chunks; then each agent's completion line. Reads only the logs.
"""
import collections
import datetime
import json
import os
import re
import sys

TRACE = re.compile(
    r"^(\S+) .*trace v(\d+): rx ([\d.]+) Mbit/s tx ([\d.]+) Mbit/s missing (\d+) outstanding (\d+) "
    r"peers (\d+) uploading (\d+) queued (\d+) requests (\d+) rejected_by_us (\d+) refused (\d+)")
COMPLETE = re.compile(r"^(\S+) .* (v\d+ complete.*)$")


def when(stamp):
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    phase = sys.argv[2] if len(sys.argv) > 2 else "weightcast"
    ph = os.path.join(sys.argv[1], "ph", phase)
    with open(os.path.join(ph, "go")) as f:
        t0 = json.load(f)["t0"]
    rows = collections.defaultdict(dict)  # second -> host -> sample
    done = {}
    for name in sorted(os.listdir(ph)):
        if not name.startswith("log."):
            continue
        host = int(name.split(".")[1])
        with open(os.path.join(ph, name), errors="replace") as f:
            for line in f:
                m = TRACE.match(line)
                if m:
                    t = when(m.group(1)) - t0
                    if t >= 0:
                        rows[int(t)][host] = [float(m.group(3)), float(m.group(4)), int(m.group(5)),
                                              int(m.group(8)), int(m.group(9)), int(m.group(6)),
                                              int(m.group(12))]
                    continue
                m = COMPLETE.match(line)
                if m and host != 0:
                    done[host] = (when(m.group(1)) - t0, m.group(2))
    print("  s  src_tx  src_up/q  agents_rx mean/min  missing>0  outstanding mean  refused")
    for sec in sorted(rows):
        r = rows[sec]
        src = r.get(0)
        agents = [v for h, v in r.items() if h != 0]
        if not agents:
            continue
        rx = [a[0] for a in agents]
        print("%3d  %6.1f  %4s/%-4s  %6.1f / %-6.1f  %9d  %16.1f  %7d" % (
            sec, src[1] if src else 0, src[3] if src else "-", src[4] if src else "-",
            sum(rx) / len(rx), min(rx), sum(1 for a in agents if a[2] > 0),
            sum(a[5] for a in agents) / len(agents), sum(a[6] for a in agents)))
    for host in sorted(done):
        print("host %2d %7.3f s  %s" % (host, done[host][0], done[host][1]))


if __name__ == "__main__":
    main()
