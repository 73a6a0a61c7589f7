#!/usr/bin/env python3
"""Load a model while it downloads: each tensor goes into a torch module as soon as it is
verified, instead of after the whole version has arrived (docs/streaming.md).

It starts its own coordinator on loopback (the `weightcast` binary: $WEIGHTCAST_BIN or the one the
module was built with), publishes a small transformer-shaped model from one process, and in a
second process a sampler with an in-process agent, its download limited to --rate so that the
overlap shows, builds the same module and loads it layer by layer with

    stream = sub.stream(1, order=list(module.state_dict()))
    for name, tensor in stream:
        state[name].copy_(tensor)           # into the module's own parameters
    stream.wait_committed()                 # the version is committed: serve from it

It prints when each tensor was loaded and checks the loaded module against the published one.

    python3 examples/stream_load.py                 # 64 MiB at 16 MiB/s
    python3 examples/stream_load.py --rate 4MiB     # a slower link
"""

import argparse
import multiprocessing as mp
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

import torch

import weightcast


def make_model(layers, width):
    """A stack of bf16 linear layers: what the sampler builds and the trainer publishes."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    return model.to(torch.bfloat16)


def sampler(work, address, secret_file, rate, layers, width, conn):
    model = make_model(layers, width)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()  # nothing loaded yet
    state = model.state_dict()
    with weightcast.Subscriber(os.path.join(work, "sampler"), "policy", coordinator=address,
                               secret_file=secret_file, download_limit=rate) as sub:
        conn.send("ready")
        start = None
        stream = sub.stream(1, order=list(state), timeout=120)
        with torch.no_grad():
            for name, tensor in stream:
                start = start or time.monotonic()
                state[name].copy_(tensor)
                print(f"  {time.monotonic() - start:6.2f} s  loaded {name:<12} "
                      f"({stream.handed_over}/{len(stream)}, committed: {stream.committed})")
        stream.wait_committed()
        print(f"  {time.monotonic() - start:6.2f} s  v1 committed: the module serves it")
        # make_model is deterministic: the trainer published these very weights.
        expected = make_model(layers, width).state_dict()
        conn.send(all(torch.equal(state[name], t) for name, t in expected.items()))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--width", type=int, default=1448, help="64 MiB at 16 layers")
    p.add_argument("--rate", default="16MiB", help="the sampler's download limit per second")
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="wc-stream-")
    secret_file = os.path.join(work, "secret")
    with open(secret_file, "w") as f:
        f.write(secrets.token_hex(32))
    os.chmod(secret_file, 0o600)
    address_file = os.path.join(work, "coordinator.addr")
    coordinator = subprocess.Popen(
        [weightcast.weightcast_binary(), "coordinator", "--listen", "127.0.0.1:0",
         "--state-dir", os.path.join(work, "coordinator"), "--address-file", address_file,
         "--secret-file", secret_file], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = None
    try:
        while not os.path.exists(address_file):
            if coordinator.poll() is not None:
                sys.exit("the coordinator did not start")
            time.sleep(0.02)
        address = open(address_file).read().strip()
        ctx = mp.get_context("spawn")
        parent, conn = ctx.Pipe()
        child = ctx.Process(target=sampler, args=(work, address, secret_file, a.rate, a.layers,
                                                  a.width, conn))
        child.start()
        if not parent.poll(60) or parent.recv() != "ready":
            sys.exit("the sampler did not start")
        published = make_model(a.layers, a.width).state_dict()
        size = sum(t.numel() * t.element_size() for t in published.values())
        print(f"publishing {len(published)} tensors, {size / 2**20:.0f} MiB; the sampler "
              f"downloads at {a.rate}/s and loads each tensor as it is verified:")
        with weightcast.Publisher(os.path.join(work, "publisher"), "policy", coordinator=address,
                                  secret_file=secret_file) as pub:
            pub.publish_async(published, step=1)
            if not parent.poll(300):
                sys.exit("the sampler did not finish")
            same = parent.recv()
        print("the loaded module equals the published one" if same else "MISMATCH")
        sys.exit(0 if same else 1)
    finally:
        if child is not None:
            child.join(timeout=30)
        coordinator.terminate()
        coordinator.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
