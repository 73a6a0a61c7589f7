"""Small helpers shared by the cluster benchmark's per-host programs (torrent.py, http_bench.py).

Every host program runs in its own network namespace and meets the orchestrator (run.sh) through
files in a shared work directory:
  ready file   written by the host once it is set up (listening, torrent added, ...)
  go file      written by the orchestrator once every host is ready; holds the start time T0
  result file  written by the host: when it finished, bytes moved (JSON)
All hosts share one clock (namespaces of one machine), so times are comparable across hosts.
"""

import json
import os
import time


def write_json_atomic(path, obj):
    """Writes obj as JSON to path so that a reader never sees a partial file."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.write("\n")
    os.replace(tmp, path)


def wait_for_go(go_file, deadline):
    """Blocks until the orchestrator's go file exists; returns T0 from it (epoch seconds).

    Raises TimeoutError at the epoch time `deadline` so that a host never waits forever for an
    orchestrator that died.
    """
    while True:
        try:
            with open(go_file) as f:
                return float(json.load(f)["t0"])
        except (FileNotFoundError, ValueError, KeyError):
            pass
        if time.time() > deadline:
            raise TimeoutError(f"no go file {go_file}")
        time.sleep(0.01)


def parse_addr(text):
    """'198.18.0.2:6881' -> ('198.18.0.2', 6881); refuses anything outside 198.18.0.0/15."""
    host, _, port = text.rpartition(":")
    parts = [int(p) for p in host.split(".")]
    if len(parts) != 4 or parts[0] != 198 or parts[1] not in (18, 19):
        raise ValueError(f"address {text} is outside 198.18.0.0/15")
    return host, int(port)
