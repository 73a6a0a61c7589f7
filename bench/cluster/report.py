#!/usr/bin/python3
"""Turns one cluster run's work directory (bench/cluster/run.sh) into a table and one JSON line.

  report.py WORK_DIR [PLOT_DIR]

Reads WORK_DIR/params.json, WORK_DIR/vmstat.log (vmstat -n -t 1, UTC), WORK_DIR/diff.json and
per phase WORK_DIR/ph/<phase>/: system, go ({"t0"}), res.<host>.json ({"done"[, "rc"]}),
tx_before / tx_after (bytes each host's link sent, one line per host), t_end, timed_out,
mismatched, fault_time. Every figure printed is computed here from those measurements.
Exit 1 when a phase has hosts that did not finish or hold wrong files (faulted host excepted).
Also writes, per phase, PLOT_DIR/<phase>/completion.csv and progress.csv (default PLOT_DIR:
WORK_DIR/plots) in the format of `weightcast sim --out`, and progress.png from them when gnuplot
is installed, with the script the simulator uses (src/sim/progress_plot.gnuplot). The benchmark
measures when each host finished, not its bytes over time: progress.csv's fraction is the
fraction of hosts done, and bytes_in is left empty.
"""

import calendar
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PLOT_SCRIPT = os.path.join(ROOT, "src", "sim", "progress_plot.gnuplot")
FAULT_ROLES = {"kill": "dies", "slow": "straggler", "linkdown": "linkdown"}


def read(path, default=None):
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        return default


def read_json(path, default=None):
    text = read(path)
    return default if text is None else json.loads(text)


def vmstat_samples(path):
    """[(epoch, idle%)] from `vmstat -n -t 1` run with TZ=UTC; the first sample (since boot) is
    dropped. Each sample covers the second before its timestamp."""
    samples, idle_col, first = [], None, True
    for line in (read(path, "") or "").splitlines():
        parts = line.split()
        if "id" in parts and "us" in parts:
            idle_col = parts.index("id")
            continue
        if idle_col is None or len(parts) < idle_col + 3 or not parts[0].isdigit():
            continue
        if first:
            first = False
            continue
        stamp = time.strptime(parts[-2] + " " + parts[-1], "%Y-%m-%d %H:%M:%S")
        samples.append((calendar.timegm(stamp), float(parts[idle_col])))
    return samples


def idle_between(samples, t0, t1):
    # A sample stamped t covers (t-1, t]: take those whose second overlaps the phase.
    vals = [idle for (t, idle) in samples if t > t0 and t - 1 < t1]
    if not vals:
        return None
    return {"mean": round(statistics.mean(vals), 1), "min": round(min(vals), 1), "samples": len(vals)}


def published_version(path, version):
    """Version VERSION's entry in the coordinator's log (status --json --once at the end of the
    step): total and payload bytes, when it was published."""
    text = read(path)
    if not text:
        return None
    try:
        status = json.loads(text.splitlines()[-1])
    except ValueError:
        return None
    def field(d, snake):
        camel = snake.split("_")[0] + "".join(w.title() for w in snake.split("_")[1:])
        return int(d.get(snake, d.get(camel, 0)) or 0)
    for ch in status.get("channels", []):
        for v in ch.get("versions", []):
            if field(v, "version") == version:
                return {"total_bytes": field(v, "total_bytes"),
                        "payload_bytes": field(v, "payload_bytes"),
                        "published_unix_s": field(v, "published_unix_ms") / 1000.0}
    return None


def unlisted_peers(ph_dir, n, t_done, fault_time):
    """Connections agents closed because the coordinator's peer lists stopped listing the peer
    ("no longer listed"), until the slowest host was done: every one is a membership change's
    cost to nodes that stayed. Those after the fault are counted apart."""
    during, after_fault = 0, 0
    for host in range(1, n):
        for line in (read(os.path.join(ph_dir, f"log.{host}"), "") or "").splitlines():
            if "no longer listed" not in line:
                continue
            try:
                stamp = datetime.datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ")
            except (ValueError, IndexError):
                continue
            t = stamp.replace(tzinfo=datetime.timezone.utc).timestamp()
            if t > t_done:
                continue
            during += 1
            if fault_time is not None and t >= float(fault_time):
                after_fault += 1
    out = {"unlisted_during_transfer": during}
    if fault_time is not None:
        out["unlisted_after_fault"] = after_fault
    return out


def phase_figures(ph_dir, params):
    n = params["hosts"]
    bound = params["bound_s"]
    size = params["bytes"]
    fault = params["fault"]
    fh = params["fault_host"]
    system = read(os.path.join(ph_dir, "system"))
    go = read_json(os.path.join(ph_dir, "go"))
    if go is None:
        return {"system": system, "error": "never started"}
    t0 = float(go["t0"])
    times, failed = {}, []
    for host in range(1, n):
        res = read_json(os.path.join(ph_dir, f"res.{host}.json"))
        if res is None or res.get("done") is None or res.get("rc", 0) != 0:
            failed.append(host)
            continue
        times[host] = float(res["done"]) - t0
    others = {h: t for h, t in times.items() if fault == "none" or h != fh}
    expected = [h for h in range(1, n) if fault == "none" or h != fh]
    missing = [h for h in expected if h not in others]
    tx_before = [int(x) for x in (read(os.path.join(ph_dir, "tx_before"), "") or "").split()]
    tx_after = [int(x) for x in (read(os.path.join(ph_dir, "tx_after"), "") or "").split()]
    up = [a - b for a, b in zip(tx_after, tx_before)]
    t_end = float(read(os.path.join(ph_dir, "t_end"), str(time.time())))
    fig = {
        "system": system,
        "hosts_done": len(others),
        "hosts_expected": len(expected),
        "missing_hosts": missing,
        "slowest_s": round(max(others.values()), 3) if others else None,
        "median_s": round(statistics.median(others.values()), 3) if others else None,
        "fastest_s": round(min(others.values()), 3) if others else None,
        "source_wire_bytes": up[0] if up else None,
        "source_upload_vs_size": round(up[0] / size, 3) if up else None,
        "total_wire_bytes": sum(up) if up else None,
        "mismatched_hosts": int(read(os.path.join(ph_dir, "mismatched"), "0")),
    }
    if fig["slowest_s"] is not None:
        fig["slowest_vs_bound"] = round(fig["slowest_s"] / bound, 3)
    if len(up) > 2:
        peers = up[1:]
        fig["peer_upload_max_vs_mean"] = round(max(peers) / max(1, statistics.mean(peers)), 2)
    if fault != "none":
        ft = read(os.path.join(ph_dir, "fault_time"))
        fig["fault_host_s"] = round(times[fh], 3) if fh in times else None
        if ft is not None:
            fig["fault_at_s"] = round(float(ft) - t0, 2)
    if system == "weightcast":
        entry = published_version(os.path.join(ph_dir, "status.json"),
                                  2 if ph_dir.rstrip("/").endswith("_delta") else 1)
        if entry and others:
            # From the moment the coordinator logged the version (publisher's preparation done)
            # to the slowest host's commit: what the fleet itself took.
            last = max(others.values()) + t0
            fig["slowest_after_publish_s"] = round(last - entry["published_unix_s"], 3)
        if entry and entry["payload_bytes"] > 0:
            fig["published_total_bytes"] = entry["total_bytes"]
            fig["published_payload_bytes"] = entry["payload_bytes"]
            fig["published_ratio"] = round(entry["total_bytes"] / entry["payload_bytes"], 2)
        # The publisher logs how long preparing the version took (manifest, hashing, delta
        # encoding): part of the measured time, shown apart.
        for line in (read(os.path.join(ph_dir, "log.0"), "") or "").splitlines():
            if " published " in line and "prepare_s=" in line:
                fig["publish_prepare_s"] = round(float(line.split("prepare_s=")[1].split()[0]), 3)
    if system == "weightcast" and others:
        fig.update(unlisted_peers(ph_dir, n, t0 + max(others.values()),
                                  read(os.path.join(ph_dir, "fault_time"))))
    fig["_t0"], fig["_t_end"] = t0, t_end
    fig["_times"], fig["_up"] = times, up
    return fig


def write_progress(out_dir, name, fig, params):
    """completion.csv and progress.csv of one phase (weightcast sim's columns), progress.png
    when gnuplot is there. Returns the PNG's path, or None when none was drawn."""
    n = params["hosts"]
    times, up = fig["_times"], fig["_up"]
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)

    def out_bytes(host):
        return str(up[host]) if host < len(up) else ""

    rows = ["node,role,completed_at_s,bytes_in,bytes_out", f"0,source,0.000,,{out_bytes(0)}"]
    for host in range(1, n):
        role = "healthy"
        if params["fault"] != "none" and host == params["fault_host"]:
            role = FAULT_ROLES.get(params["fault"], params["fault"])
        done = f"{times[host]:.3f}" if host in times else ""
        rows.append(f"{host},{role},{done},,{out_bytes(host)}")
    with open(os.path.join(d, "completion.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")
    receivers = max(1, n - 1)
    progress = ["t_s,fraction,complete", "0.000,0.00000,0"]
    for i, t in enumerate(sorted(times.values()), start=1):
        progress.append(f"{t:.3f},{i / receivers:.5f},{i}")
    with open(os.path.join(d, "progress.csv"), "w") as f:
        f.write("\n".join(progress) + "\n")
    if shutil.which("gnuplot") is None or not os.path.exists(PLOT_SCRIPT):
        return None

    def q(text):
        return "'" + str(text).replace("'", "''") + "'"

    png = os.path.join(d, "progress.png")
    title = f"{name}: {n} hosts at {params['rate']}"
    inputs = (f"completion={q(os.path.join(d, 'completion.csv'))}; "
              f"progress={q(os.path.join(d, 'progress.csv'))}; output={q(png)}; "
              f"receivers={receivers}; bound={float(params['bound_s'])}; "
              f"title={q(title)}; "
              f"progress_title='hosts done'; steps=1")
    r = subprocess.run(["gnuplot", "-e", inputs, PLOT_SCRIPT], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"report: gnuplot failed for {name}: {r.stderr.strip()}", file=sys.stderr)
        return None
    return png


def main():
    work = sys.argv[1]
    params = read_json(os.path.join(work, "params.json"))
    samples = vmstat_samples(os.path.join(work, "vmstat.log"))
    diff = read_json(os.path.join(work, "diff.json"), {}) or {}
    bound = params["bound_s"]
    plot_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(work, "plots")
    phases = {}
    pngs = []
    ph_root = os.path.join(work, "ph")
    order = ["http", "libtorrent", "weightcast", "weightcast_delta"]
    for name in order:
        d = os.path.join(ph_root, name)
        if os.path.isdir(d):
            fig = phase_figures(d, params)
            if "_t0" in fig:
                fig["idle_cpu"] = idle_between(samples, fig["_t0"], fig["_t_end"])
                png = write_progress(plot_dir, name, fig, params)
                if png:
                    pngs.append(png)
                del fig["_t0"], fig["_t_end"], fig["_times"], fig["_up"]
            phases[name] = fig

    ok = all(not f.get("missing_hosts") and not f.get("mismatched_hosts") and "error" not in f
             for f in phases.values())
    out = {"bench": "cluster", **params, "phases": phases}
    goals = {}
    wc = phases.get("weightcast", {})
    lt = phases.get("libtorrent", {})
    if wc.get("slowest_vs_bound") is not None:
        goals["weightcast_within_15pct_of_bound"] = wc["slowest_vs_bound"] <= 1.15
    if wc.get("slowest_s") and lt.get("slowest_s"):
        out["libtorrent_vs_weightcast"] = round(lt["slowest_s"] / wc["slowest_s"], 3)
    delta = phases.get("weightcast_delta", {})
    published = delta if delta.get("published_ratio") else None
    if diff.get("ratio"):
        delta["codec_ratio"] = round(float(diff["ratio"]), 2)  # `weightcast diff` of the same step
    if delta.get("slowest_s") and (published or diff.get("ratio")):
        ratio = published["published_ratio"] if published else float(diff["ratio"])
        speedup = bound / delta["slowest_s"]
        delta["compression_ratio"] = round(ratio, 2)
        delta["full_bound_s"] = bound
        delta["speedup_vs_full_bound"] = round(speedup, 2)
        delta["delta_bytes_bound_s"] = round(bound / ratio, 3)
        goals["delta_speedup_at_least_half_ratio"] = speedup >= ratio / 2
        if delta.get("slowest_after_publish_s"):
            delta["speedup_after_publish"] = round(bound / delta["slowest_after_publish_s"], 2)
    out["goals"] = goals

    print(f"cluster: {params['hosts']} hosts at {params['rate']}, version {params['bytes']} bytes "
          f"in {params['files']} files, S/B = {bound:.2f} s, fault {params['fault']}"
          + (f" (host {params['fault_host']})" if params["fault"] != "none" else ""))
    hdr = (f"{'system':<17}{'slowest s':>10}{'x S/B':>8}{'median s':>10}{'src upload':>12}"
           f"{'x S':>7}{'idle% mean/min':>16}  notes")
    print(hdr)
    print("-" * len(hdr))
    for name, f in phases.items():
        if "error" in f:
            print(f"{name:<17}  {f['error']}")
            continue
        idle = f.get("idle_cpu") or {}
        notes = []
        if f["missing_hosts"]:
            notes.append(f"unfinished hosts {f['missing_hosts']}")
        if f["mismatched_hosts"]:
            notes.append(f"{f['mismatched_hosts']} hosts with wrong files")
        if "fault_host_s" in f:
            notes.append(f"faulted host: {f['fault_host_s']} s")
        if "publish_prepare_s" in f:
            notes.append(f"publish prepare {f['publish_prepare_s']} s")
        if "slowest_after_publish_s" in f:
            notes.append(f"{f['slowest_after_publish_s']} s after published")
        if "compression_ratio" in f:
            notes.append(f"ratio {f['compression_ratio']}x, {f['speedup_vs_full_bound']}x under S/B")
        def num(v, fmt):
            return format(v, fmt) if v is not None else "-"
        print(f"{name:<17}{num(f['slowest_s'], '10.2f')}{num(f.get('slowest_vs_bound'), '8.2f')}"
              f"{num(f['median_s'], '10.2f')}{num(f['source_wire_bytes'], '12d')}"
              f"{num(f['source_upload_vs_size'], '7.2f')}"
              f"{(str(idle.get('mean', '-')) + '/' + str(idle.get('min', '-'))):>16}  "
              + "; ".join(notes))
    print(f"progress CSVs in {plot_dir}" + (f", plots: {', '.join(pngs)}" if pngs else
                                             " (no plots: gnuplot is not installed)"),
          file=sys.stderr)
    if goals:
        print("goals: " + ", ".join(f"{k}={'met' if v else 'NOT met'}" for k, v in goals.items()))
    print(json.dumps(out, separators=(",", ":")))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
