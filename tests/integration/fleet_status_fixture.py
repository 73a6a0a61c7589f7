"""A coordinator status (FleetStatus as `weightcast status --once --json --all` prints it) of a
large fleet, for testing the fleet page and `weightcast status` at scale without running one.

    python3 fleet_status_fixture.py [--agents 1000] [--racks 25] > status.json

Deterministic: agent i (node id 1000 + i, rack i % racks) is failed, dead, idle, prepared or
fetching by a fixed rule of i, with a fixed amount of v2. `expected(status)` derives from the
states this module assigned what the summary must say (counts by state, histogram, least
advanced, per rack, totals), independently of the code under test."""

import argparse
import json

MIB = 1 << 20
CHUNKS = 1024                 # v2: 1 GiB in 1 MiB chunks
TOTAL = CHUNKS * MIB
CHANNEL = "policy"
NOW_MS = 1_790_000_000_000
MISMATCHED = 5  # the agent whose attestation mismatches


def kind_of(i):
    if i % 100 == 13:
        return "failed"
    if i % 50 == 7:
        return "dead"
    if i % 200 == 21:
        return "idle"
    if i % 3 == 0:
        return "prepared"
    return "fetching"


def chunks_of(i, kind):
    if kind == "prepared":
        return CHUNKS
    if kind == "idle":
        return 0
    return i * 2654435761 % 1000003 % CHUNKS  # spread over [0, CHUNKS), unrelated to the rack


def progress(version, phase, current, chunks, sent=0, error=""):
    # Every field, as FleetStatusJson prints them (64-bit integers as strings).
    return {"channel": CHANNEL, "version": str(version), "phase": phase,
            "current_version": str(current), "chunks_done": chunks, "chunks_total": CHUNKS,
            "bytes_done": str(chunks * MIB), "bytes_total": str(TOTAL),
            "bytes_received": str(chunks * MIB if phase != "PHASE_SEEDING" else 0),
            "bytes_sent": str(sent), "error": error, "delta": False, "kept_versions": [],
            "peers": 8, "peers_ucx": 0, "waiting": ""}


def node(node_id, host, rack, alive, channel, source=False, left=False):
    return {"node_id": str(node_id), "address": "10.%d.%d.%d:7100" % (
                node_id // 65536 % 256, node_id // 256 % 256, node_id % 256),
            "rack": rack, "source": source, "alive": alive,
            "last_heartbeat_ms_ago": str(300 if alive else 15_000), "channels": [channel],
            "hostname": host, "tensor_patterns": [], "left": left}


def agent(i, racks):
    kind = kind_of(i)
    chunks = chunks_of(i, kind)
    phase = {"failed": "PHASE_FAILED", "dead": "PHASE_FETCHING", "idle": "PHASE_IDLE",
             "prepared": "PHASE_PREPARED", "fetching": "PHASE_FETCHING"}[kind]
    error = "chunk %d: SHA-256 mismatch" % chunks if kind == "failed" else ""
    version = 0 if kind == "idle" else 2
    sent = chunks * MIB // 2
    n = node(1000 + i, "gpu-%04d" % i, "rack-%02d" % (i % racks), kind != "dead",
             progress(version, phase, 1, chunks, sent, error))
    if i == MISMATCHED:  # its sampler serves live tensors that differ from the committed v1
        n["channels"][0]["attestation"] = {"version": "1", "digest": "",
                                           "verdict": "ATTESTATION_MISMATCH",
                                           "unix_ms": str(NOW_MS - 2000)}
    n["kind"] = kind  # removed before serving; what expected() works from
    return n


def fleet_status(agents=1000, racks=25):
    nodes = [agent(i, racks) for i in range(agents)]
    # The publisher seeding v2, and one that published it earlier and left: its upload counts.
    nodes.append(node(1, "trainer-0", "rack-00", True,
                      progress(2, "PHASE_SEEDING", 2, CHUNKS, sent=600 * MIB), source=True))
    nodes.append(node(2, "trainer-1", "rack-00", False,
                      progress(2, "PHASE_SEEDING", 2, CHUNKS, sent=424 * MIB), source=True,
                      left=True))
    # Two agents that left on purpose (on v1): neither listed nor counted.
    for node_id in (3, 4):
        nodes.append(node(node_id, "old-%d" % node_id, "rack-01", False,
                          progress(1, "PHASE_COMMITTED", 1, CHUNKS), left=True))
    versions = [{"version": str(v), "root": "", "total_bytes": str(TOTAL), "chunk_count": CHUNKS,
                 "published_unix_ms": str(NOW_MS - 60_000 * (3 - v)), "base_version": "0",
                 "payload_bytes": "0", "decision": "DECISION_COMMIT" if v == 1 else "DECISION_NONE",
                 "abort_reason": "", "decided_unix_ms": str(NOW_MS - 100_000) if v == 1 else "0",
                 "committed_once": v == 1, "publisher_node": "1", "attestation_digest": ""}
                for v in (1, 2)]
    return {"nodes": nodes,
            "channels": [{"channel": CHANNEL, "current_version": "1", "versions": versions,
                          "newest_aborted_assembly": "0"}],
            "now_unix_ms": str(NOW_MS), "store_problem": "", "store": "fixture"}


def served(status):
    """`status` without the fixture's own keys: what the coordinator would send."""
    out = json.loads(json.dumps(status))
    for n in out["nodes"]:
        n.pop("kind", None)
    return out


def expected(status):
    """What the summary must show for `status` (the rules of docs/fleet_page.md)."""
    agents = [n for n in status["nodes"] if "kind" in n]
    frac = {n["node_id"]: chunks_of(int(n["node_id"]) - 1000, n["kind"]) / CHUNKS for n in agents}
    states = {}

    def count(state):
        states[state] = states.get(state, 0) + 1

    for n in agents:
        kind = n["kind"]
        count({"failed": "FAILED", "dead": "dead", "idle": "IDLE", "prepared": "PREPARED",
               "fetching": "FETCHING"}[kind])
        # Below half the best live node's progress (the best has it all).
        if kind in ("idle", "fetching") and frac[n["node_id"]] < 0.5:
            count("lagging")
    states["SEEDING"] = 1
    states["left"] = 3
    live = [n for n in agents if n["kind"] != "dead"]
    histogram = [0] * 11
    for n in live:
        f = frac[n["node_id"]]
        histogram[10 if f >= 1 else int(f * 10)] += 1
    slow = sorted((n for n in live if n["kind"] in ("idle", "fetching")),
                  key=lambda n: (frac[n["node_id"]], int(n["node_id"])))
    racks = {}
    for n in agents:
        r = racks.setdefault(n["rack"], {"agents": 0, "done": 0, "failed": 0, "dead": 0})
        r["agents"] += 1
        r["done"] += n["kind"] == "prepared"
        r["failed"] += n["kind"] == "failed"
        r["dead"] += n["kind"] == "dead"
    received = sum(int(n["channels"][0]["bytes_received"]) for n in agents
                   if n["channels"][0]["version"] == "2")
    return {"rows": len(agents) + 1,  # the agents and the live publisher
            "states": states, "histogram": histogram,
            "slowest": [n["node_id"] for n in slow[:10]], "racks": racks,
            "source_upload": 1024 * MIB, "received": received,
            "mismatched": "node %d (gpu-%04d) v1" % (1000 + MISMATCHED, MISMATCHED),
            "ids": sorted([n["node_id"] for n in agents] + ["1"], key=int)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--racks", type=int, default=25)
    args = parser.parse_args()
    if args.agents < 1 or args.racks < 1:
        parser.error("--agents and --racks must be at least 1")
    print(json.dumps(served(fleet_status(args.agents, args.racks))))


if __name__ == "__main__":
    main()
