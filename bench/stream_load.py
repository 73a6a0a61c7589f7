"""One host of bench/stream_load.sh: a sampler that joins the coordinator and loads version 1 of
its channel, either streaming (`sub.stream(1)`: each tensor loaded as soon as it is verified)
or the way it is done without streaming (`sub.wait(1)`, then every tensor). Loading a tensor is
a copy into the engine's buffer (allocated at start-up) plus one pass of per-tensor work, which here is a wait of
bytes / --load-rate: the device link or format conversion an engine spends on each tensor,
modelled without CPU because the hosts of the emulated cluster share this machine's cores.
Writes one JSON object to --out: when the first and the last tensor were loaded and when the
version was committed (wall clock), and the bytes loaded."""

import argparse
import datetime
import json
import os
import sys
import time

import torch

import weightcast


DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "U8": torch.uint8}


def file_tensors(model_dir):
    """(name, dtype, shape) of a safetensors checkpoint directory's tensors, file by file, in
    offset order."""
    out = []
    for file in sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors")):
        with open(os.path.join(model_dir, file), "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        header.pop("__metadata__", None)
        for name in sorted(header, key=lambda n: header[n]["data_offsets"][0]):
            out.append((name, header[name]["dtype"], header[name]["shape"]))
    return out



def commit_time(log_path):
    """Wall time of the in-process agent's "committed v1" log line, or None."""
    try:
        with open(log_path) as f:
            for line in f:
                if line.rstrip().endswith("agent: committed v1"):
                    stamp = line.split(" ", 1)[0].rstrip("Z")
                    return datetime.datetime.fromisoformat(stamp).replace(
                        tzinfo=datetime.timezone.utc).timestamp()
    except OSError:
        pass
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", required=True)
    p.add_argument("--channel", required=True)
    p.add_argument("--coordinator", required=True)
    p.add_argument("--secret-file", required=True)
    p.add_argument("--listen", required=True, help="ip:0 on this host")
    p.add_argument("--mode", choices=("stream", "stream-ordered", "wait"), required=True)
    p.add_argument("--load-rate", type=float, required=True, help="bytes/s of per-tensor work")
    p.add_argument("--ready", required=True, help="file written once the agent is registered")
    p.add_argument("--out", required=True)
    p.add_argument("--model", required=True,
                   help="the checkpoint directory: the tensors to allocate, and their order")
    p.add_argument("--timeout", type=float, default=300)
    a = p.parse_args()
    torch.set_num_threads(1)
    first = last = None
    nbytes = tensors = 0

    # The engine's own buffers, allocated (and touched) at start-up as an engine allocates its
    # weights before it loads them.
    buffers = {name: torch.zeros(shape, dtype=DTYPES[dtype]) for name, dtype, shape in
               file_tensors(a.model)}

    def load(name, tensor):
        nonlocal first, last, nbytes, tensors
        buffers[name].copy_(tensor)
        tensors += 1
        size = tensor.numel() * tensor.element_size()
        time.sleep(size / a.load_rate)  # the per-tensor work
        nbytes += size
        last = time.time()
        first = first or last

    with weightcast.Subscriber(a.store, a.channel, coordinator=a.coordinator,
                               secret_file=a.secret_file, listen=a.listen,
                               log_file=a.store + ".log", log_level="info") as sub:
        deadline = time.monotonic() + 60
        while not (sub.status() or {}).get("node_id") or not (sub.status() or {}).get("address"):
            if time.monotonic() > deadline:
                sys.exit("the agent did not start")
            time.sleep(0.05)
        time.sleep(1.0)  # registered and heartbeating: the coordinator lists it
        open(a.ready, "w").close()
        if a.mode == "wait":
            version = sub.wait(1, timeout=a.timeout)
            committed = time.time()
            for name, tensor in version.state_dict().items():
                load(name, tensor)
        else:
            # stream-ordered: an engine building layer by layer asks for the tensors in the order
            # of the checkpoint's files, and its agent fetches their chunks first.
            order = ([name for name, _, _ in file_tensors(a.model)]
                     if a.mode == "stream-ordered" else None)
            stream = sub.stream(1, timeout=a.timeout, order=order)
            for name, tensor in stream:
                load(name, tensor)
            stream.wait_committed()
            committed = time.time()
    # The fleet's view of the commit is the agent's own log line, not when this loop saw it.
    committed = commit_time(a.store + ".log") or committed
    with open(a.out + ".tmp", "w") as f:
        json.dump({"mode": a.mode, "first_loaded": first, "last_loaded": last,
                   "committed": committed, "bytes": nbytes, "tensors": tensors}, f)
    os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
