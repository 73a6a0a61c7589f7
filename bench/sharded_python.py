"""Sharded publish from Python (docs/sharded_publish.md): W ranks (threads of this
process, each its own Publisher and store) publish the rows of every matrix of a state dict
(rows split W ways, marked as slices) for each step; S samplers (Subscriber, each with its own
in-process agent) receive every step; each sampler's whole tensors are compared bit for bit with
the unsharded state dict. Loopback only.

  PYTHONPATH=build/release/python WEIGHTCAST_BIN=build/release/src/cli/weightcast \\
      python3 bench/sharded_python.py [--size-mib 64] [--steps 5] [--world 4] [--samplers 2]

The last line of stdout is one JSON object with the figures."""

import argparse
import json
import pathlib
import secrets
import subprocess
import tempfile
import threading
import time

import torch

import weightcast


def state_dict(size_mib, step):
    """bf16 matrices totalling about size_mib MiB; each step changes ~1% of the rows."""
    g = torch.Generator().manual_seed(7)
    rows = 1024
    cols = size_mib * (1 << 20) // 2 // 4 // rows  # 4 matrices of bf16
    state = {f"layers.{i}.weight": torch.randn(rows, cols, generator=g).to(torch.bfloat16)
             for i in range(4)}
    state["norm.weight"] = torch.ones(cols, dtype=torch.bfloat16)
    for s in range(2, step + 1):
        g2 = torch.Generator().manual_seed(s)
        for t in state.values():
            if t.dim() == 2:
                picked = torch.randint(0, t.shape[0], (t.shape[0] // 100,), generator=g2)
                t[picked] += 0.01
    return state


def part(state, rank, world):
    tensors, slices = {}, {}
    for name, t in state.items():
        if t.dim() == 2:
            n = t.shape[0] // world
            tensors[name] = t[rank * n:(rank + 1) * n].contiguous()
            slices[name] = (0, rank * n, t.shape[0])
        elif rank == 0:
            tensors[name] = t
    return tensors, slices


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--samplers", type=int, default=2)
    args = ap.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="wc-sharded-py-"))
    secret = work / "secret"
    secret.write_text(secrets.token_hex(32))
    secret.chmod(0o600)
    addr_file = work / "coord.addr"
    coord = subprocess.Popen([weightcast.weightcast_binary(), "coordinator", "--listen",
                              "127.0.0.1:0", "--state-dir", str(work / "coord"),
                              "--address-file", str(addr_file), "--secret-file", str(secret)],
                             stdout=subprocess.DEVNULL, stderr=open(work / "coord.log", "wb"))
    publishers, samplers = [], []
    try:
        deadline = time.monotonic() + 30
        while not addr_file.exists():
            assert time.monotonic() < deadline and coord.poll() is None
            time.sleep(0.02)
        address = addr_file.read_text().strip()
        publishers = [weightcast.Publisher(work / f"rank{r}", "policy", coordinator=address,
                                           secret_file=str(secret), rank=r, world=args.world,
                                           writer_id="bench-trainer")
                      for r in range(args.world)]
        samplers = [weightcast.Subscriber(work / f"sampler{i}", "policy", coordinator=address,
                                          secret_file=str(secret))
                    for i in range(args.samplers)]
        steps = []
        for step in range(1, args.steps + 1):
            state = state_dict(args.size_mib, step)
            results, errors = [None] * args.world, []

            def run(r):
                try:
                    tensors, slices = part(state, r, args.world)
                    results[r] = publishers[r].publish(tensors, step=step, slices=slices)
                except Exception as e:  # noqa: BLE001 - reported
                    errors.append(repr(e))

            start = time.perf_counter()
            threads = [threading.Thread(target=run, args=(r,)) for r in range(args.world)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            published = time.perf_counter() - start
            if errors:
                raise RuntimeError(errors)
            version = results[0].version
            identical = True
            for s in samplers:
                v = s.wait(min_version=version, timeout=120)
                for name, want in state.items():
                    got = v.torch(name)
                    if got.shape != want.shape or not torch.equal(got.view(torch.int16),
                                                                  want.view(torch.int16)):
                        identical = False
            received = time.perf_counter() - start
            steps.append({"step": step, "version": version, "bit_identical": identical,
                          "publish_s": round(published, 3), "all_samplers_s": round(received, 3),
                          "total_bytes": sum(r.total_bytes for r in results),
                          "wire_bytes_per_rank": [r.wire_bytes for r in results]})
            print(f"step {step}: v{version} bit-identical on {args.samplers} samplers: "
                  f"{identical}; published in {published:.2f} s, on every sampler "
                  f"{received:.2f} s; wire bytes per rank {steps[-1]['wire_bytes_per_rank']}")
        state_bytes = sum(t.numel() * t.element_size() for t in state_dict(args.size_mib, 1).values())
        print(json.dumps({"bench": "sharded_python", "world": args.world,
                          "samplers": args.samplers, "state_bytes": state_bytes,
                          "steps": len(steps),
                          "bit_identical_steps": sum(s["bit_identical"] for s in steps),
                          "per_step": steps}))
    finally:
        for s in samplers:
            s.close()
        for p in publishers:
            p.close()
        coord.terminate()
        coord.wait(timeout=10)
        subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    main()
