#!/usr/bin/env python3
"""Live tensors on a torch device: a delta applied and verified where the weights live, against a
device-to-device copy of the same bytes, and publish_async of the device tensors against that
copy (docs/gpu.md). Runs on any torch device: ``--device cuda`` on a GPU machine
(scripts/device-check.sh), ``--device cpu`` here (the torch-ops path on host memory, where the
reference copy is a memcpy).

Public API and defaults: Publisher(store, channel, device_checks=True), Subscriber(store,
channel), LiveTensors(tensors on the device, flip=True), update(). Each step changes
``--changed`` of the bf16 elements by one ulp on the device (the sparse changes an optimizer step
makes at a small learning rate). The last line of output is one JSON object.

  python3 bench/live_device.py --device cuda --gib 16
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

import weightcast


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def model(device, total_bytes, tensors):
    """`tensors` bf16 matrices of about `total_bytes` together, random, on `device`."""
    per = total_bytes // 2 // tensors
    cols = 4096
    rows = max(1, per // cols)
    torch.manual_seed(0)
    out = {}
    for i in range(tensors):
        out[f"layers.{i}.weight"] = torch.randn(rows, cols, device=device, dtype=torch.bfloat16)
    return out


def step(state, changed, seed):
    """`changed` of each tensor's elements move by one ulp, where the tensors are."""
    torch.manual_seed(seed)
    for t in state.values():
        bits = t.view(torch.int16).reshape(-1)
        count = max(1, int(bits.numel() * changed))
        bits[torch.randint(0, bits.numel(), (count,), device=t.device)] += 1


def copy_seconds(state, device, rounds=3):
    """A device-to-device copy of every tensor: the reference."""
    dst = {n: torch.empty_like(t) for n, t in state.items()}
    times = []
    for _ in range(rounds):
        sync(device)
        start = time.perf_counter()
        for n, t in state.items():
            dst[n].copy_(t)
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def identical(a, b):
    return all(torch.equal(a[n].view(torch.int16), b[n].view(torch.int16)) for n in a)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--gib", type=float, default=16.0 if torch.cuda.is_available() else 0.25,
                   help="model size in GiB of bf16 weights (default: 16 on a GPU, 0.25 on CPU)")
    p.add_argument("--tensors", type=int, default=16)
    p.add_argument("--changed", type=float, default=0.01, help="fraction of elements a step moves")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--store", default=None, help="store directory (default: a temporary one "
                   "under /dev/shm when it exists)")
    args = p.parse_args()
    device = torch.device(args.device)

    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=base, prefix="wc-live-device-") as tmp:
        store = args.store or os.path.join(tmp, "store")
        trainer = model(device, int(args.gib * (1 << 30)), args.tensors)
        total = sum(t.numel() * t.element_size() for t in trainer.values())
        d2d = copy_seconds(trainer, device)
        publisher = weightcast.Publisher(store, "policy", device_checks=True)
        sampler = {n: torch.zeros_like(t) for n, t in trainer.items()}
        # torch_ops=True: on a GPU what the default does; on CPU tensors the same torch-ops path
        # (the default there would apply in host memory with the C++ loops).
        live = weightcast.LiveTensors(sampler, flip=True, torch_ops=True)
        sub = weightcast.Subscriber(store, "policy")
        publisher.publish(trainer)
        sub.wait()
        first = sub.update(live, attest=False)
        rows = []
        for s in range(1, args.steps + 1):
            step(trainer, args.changed, s)
            sync(device)
            start = time.perf_counter()
            handle = publisher.publish_async(trainer)
            blocked = time.perf_counter() - start
            result = handle.wait()
            sub.wait(result.version)
            report = sub.update(live)
            sync(device)
            rows.append({
                "publish_blocked_s": blocked,
                "apply_s": report["apply_seconds"],
                "caught_up": report["caught_up"],
                "flip_blocked_s": report["blocked_seconds"],
                "delta": report["delta"],
                "check": report["check"],
                "attested": report["attested"]["matches"],
                "identical": identical(live.tensors, trainer),
                "payload_bytes": report["payload_bytes"],
            })
            print(json.dumps({"step": s, **rows[-1]}), file=sys.stderr)
        sub.close()
        publisher.close()

    apply_s = statistics.median(r["apply_s"] for r in rows)
    blocked = statistics.median(r["publish_blocked_s"] for r in rows)
    out = {
        "bench": "live_device",
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "model_bytes": total,
        "changed": args.changed,
        "steps": args.steps,
        "first_apply_s": first["apply_seconds"],
        "apply_verify_s": apply_s,
        "d2d_copy_s": d2d,
        # The goal's figure: the apply's speed as a fraction of a device-to-device copy's.
        "apply_speed_vs_copy": d2d / apply_s if apply_s > 0 else None,
        "flip_blocked_ms": 1000 * max(r["flip_blocked_s"] for r in rows),
        "publish_blocked_s": blocked,
        "publish_blocked_vs_copy": blocked / d2d if d2d > 0 else None,
        "every_step_delta": all(r["delta"] for r in rows),
        "checked_on_device": all(r["check"] == "wsum-128" for r in rows),
        "attested": all(r["attested"] for r in rows),
        "bit_identical": all(r["identical"] for r in rows),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
