"""A sampler killed in the middle of an RL step: the others commit the version without it, and
the killed one, started again on its store, catches up at the next step, bit-identical."""

import hashlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import time

import torch

import weightcast
from test_remote import cluster  # noqa: F401 (the coordinator fixture)

SAMPLERS = 3


def weights(step):
    torch.manual_seed(100 + step)
    return {"layer.weight": torch.randn(2048, 512).to(torch.bfloat16),
            "layer.bias": torch.randn(512).to(torch.bfloat16)}


def _sampler(index, store, address, secret_file, download_limit, conn):
    """Follows the channel with live tensors; reports (version, bytes) after each update."""
    options = {"download_limit": download_limit} if download_limit else {}
    options.update(log_level="info", log_file=str(store) + f".{os.getpid()}.log")
    with weightcast.Subscriber(store, "policy", coordinator=address, secret_file=secret_file,
                               **options) as sub:
        live = weightcast.LiveTensors({n: torch.zeros_like(t) for n, t in weights(0).items()})
        version = 1
        while True:
            got = sub.wait(version, timeout=60)
            sub.update(live, got.version)
            conn.send((index, got.version, digest(live.tensors)))
            version = got.version + 1


def digest(tensors):
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def expected(step):
    return digest(weights(step))


def collect(conns, want, count, deadline_s=60):
    """{sampler: digest} of version `want`, once `count` samplers reported it (or the deadline)."""
    seen = {}
    deadline = time.monotonic() + deadline_s
    while len(seen) < count and time.monotonic() < deadline:
        for conn in multiprocessing.connection.wait(conns, timeout=0.1):
            try:
                index, version, data = conn.recv()
            except EOFError:  # the killed sampler's end
                conns.remove(conn)
                continue
            if version == want:
                seen[index] = data
    return seen


def test_a_killed_sampler_does_not_hold_the_step_and_recovers(cluster, tmp_path):  # noqa: F811
    address, secret_file = cluster
    # spawn, not fork: the publisher's threads run in this process, and a forked child could
    # inherit a lock one of them held.
    ctx = multiprocessing.get_context("spawn")
    conns = []
    stores = [tmp_path / f"sampler{i}" for i in range(SAMPLERS)]
    slow = 256 << 10  # the victim fetches at 256 KiB/s: v2 takes it seconds, so it dies mid-fetch

    def start(i, limit=None):
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_sampler, args=(i, stores[i], address, secret_file, limit, child))
        p.start()
        child.close()
        conns.append(parent)
        return p

    with weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=address,
                              secret_file=secret_file) as pub:
        procs = [start(i, slow if i == SAMPLERS - 1 else None) for i in range(SAMPLERS)]
        try:
            pub.publish(weights(1), step=1)
            seen = collect(conns, 1, SAMPLERS, deadline_s=120)
            assert len(seen) == SAMPLERS, f"v1 reached samplers {sorted(seen)} only"

            # Step 2: the victim is killed while it fetches; the other two commit v2 without it
            # once the coordinator counts it dead (--heartbeat-timeout, 3 s).
            pub.publish(weights(2), step=2)
            time.sleep(0.3)
            victim = procs[-1]
            os.kill(victim.pid, signal.SIGKILL)
            victim.join(10)
            seen = collect(conns, 2, SAMPLERS - 1)
            assert sorted(seen) == list(range(SAMPLERS - 1)), f"v2 reached {sorted(seen)}"
            for data in seen.values():
                assert data == expected(2)

            # Started again on its store, it catches up at the next step with the others.
            procs[-1] = start(SAMPLERS - 1)
            pub.publish(weights(3), step=3)
            seen = collect(conns, 3, SAMPLERS, deadline_s=120)
            assert len(seen) == SAMPLERS, f"v3 reached samplers {sorted(seen)} only"
            for data in seen.values():
                assert data == expected(3)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                p.join(10)
