#!/usr/bin/env python3
"""RL weight sync on loopback, side by side: weightcast against torch.distributed
(gloo) broadcasting the same Llama-shaped bf16 state dict to the same N sampler processes.

One trainer (this process) and N sampler processes, started once per method. Every method
first sends a full version, then K RL-like delta steps (each changes ~1% of the elements by
+-1..2 bf16 ulps at random positions, the same step sequence for every method). Each sampler
holds its own live copy of the state dict (torch bf16 tensors, views into one flat buffer, as
an engine's weights are); after every step it hashes its live bytes and the trainer checks the
hash against its own: a mismatch fails the run (exit 1).

Methods (--methods, comma-separated):
  memcpy         reference: one copy of the model's bytes in one process (numpy, one thread),
                 and one XXH3-128 pass (python3-xxhash; SHA-256 when it is missing).
  gloo           reference: rank 0 (the trainer) broadcasts tensor by tensor into the samplers'
                 live tensors (torch.distributed, gloo, 127.0.0.1). Step time: broadcast start
                 -> the last sampler's acknowledgement timestamp (each sampler takes
                 time.monotonic() after its last broadcast returned and sends it over a pipe).
  wc-local       weightcast.Publisher(DIR, channel) commits into a local store (/dev/shm);
                 samplers Subscriber(DIR, channel), wait(), copy the ranges changed() reports
                 into their live tensors (in place).
  wc-local-flip  the same, into a standby copy (two live copies per sampler), then a flip of
                 the live reference: the sampler is blocked only for the flip.
  wc-coord       a coordinator started here; Publisher(DIR, channel, coordinator=...), each
                 sampler a Subscriber with its own store and in-process agent; in-place copy.
  wc-coord-flip  the same with the flip (two live copies per sampler: memory!).
  live           hook for the memory-to-memory path (sub.update(live)); not implemented here:
                 see LiveSampler.

Figures per method: step time (publish start -> every sampler's live tensors updated; the
sampler's timestamp is taken before it hashes), the full version's time, trainer blocked
(the publish()/broadcast call), sampler blocked (time its live tensors are being written, or
the flip), sampler CPU per step (getrusage(RUSAGE_SELF) of the sampler, all threads, the
in-process agent's included, minus the thread time of the correctness hash), bytes each
sampler received (sub.status(), coordinator modes) against the version's payload
(PublishResult.wire_bytes). The last line of output is one JSON object.

    bash bench/rl_sync.sh --params 20M --steps 2 --samplers 2      # quick (< 60 s)
    bash bench/rl_sync.sh --params 100M --samplers 4
    bash bench/rl_sync.sh --params 500M --samplers 4               # 1 GiB model
    (at 500M with 4 samplers the coordinated methods' five stores do not fit --mem-budget and go
    to /tmp; see docs/bench/rl_sync.md)

With --netns RATE (root) the trainer and each sampler are hosts of their own: network namespaces
of bench/cluster/netns.sh whose links are shaped to RATE ("1gbit"), the trainer (with the
coordinator and the publisher) on 198.18.0.1, sampler i on 198.18.0.(i+2). Only the methods that
cross machines run there: gloo and the coordinated ones.

    bash bench/rl_sync.sh --netns 1gbit --params 500M --samplers 4 --changed 0.03 \
        --methods gloo,coord-live-flip
"""

import argparse
import datetime
import glob
import hashlib
import json
import math
import multiprocessing as mp
import os
import re
import resource
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import numpy as np
import torch


# Where the trainer and the samplers are reached: loopback, or with --netns the hosts of an
# emulated cluster (set up by main()).
NET = {"trainer": "127.0.0.1", "ifname": "lo", "namespaces": None}
CLONE_NEWNET = 0x40000000


def sampler_address(index):
    return "127.0.0.1" if NET["namespaces"] is None else f"198.18.0.{index + 2}"


def join_netns(path):
    """Moves the calling thread (and what it starts from then on) into the network namespace at
    `path` (/var/run/netns/NAME or /proc/self/ns/net)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)

try:
    import xxhash
except ImportError:  # Debian: apt-get install python3-xxhash
    xxhash = None

CHANNEL = "policy"
HASH_NAME = "xxh3_128" if xxhash is not None else "sha256"


def _import_weightcast():
    try:
        import weightcast
        return weightcast
    except ImportError:
        pass
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for path in sorted(glob.glob(os.path.join(root, "build", "*", "python")),
                       key=lambda p: (os.path.basename(os.path.dirname(p)) != "release", p)):
        if glob.glob(os.path.join(path, "weightcast", "_weightcast*.so")):
            sys.path.insert(0, path)
            import weightcast
            return weightcast
    raise ImportError("no weightcast module: set PYTHONPATH=build/release/python")


weightcast = None  # imported in main() (and inherited by forked samplers)


# ---------------------------------------------------------------------------------------------
# The model: a Llama-shaped bf16 state dict as views into one flat buffer.

def parse_count(text):
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kKmMbBgG]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a parameter count: {text!r} (e.g. 100M, 0.5B)")
    scale = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def llama_shape(target):
    """Hidden size, intermediate (~8/3 hidden, a multiple of 64), vocab 32000, untied lm_head,
    multi-head attention (q/k/v/o all hidden x hidden); the layer count brings the total
    closest to `target`."""
    vocab = 32000
    hidden = 256 if target <= 50e6 else 768 if target <= 200e6 else 1280 if target <= 1.5e9 else 2048
    intermediate = int(round(hidden * 8 / 3 / 64)) * 64
    per_layer = 4 * hidden * hidden + 3 * hidden * intermediate + 2 * hidden
    fixed = 2 * vocab * hidden + hidden
    layers = max(1, int(round((target - fixed) / per_layer)))
    return {"hidden": hidden, "intermediate": intermediate, "vocab": vocab, "layers": layers,
            "heads": max(1, hidden // 64), "kv_heads": max(1, hidden // 64), "tied": False}


def tensor_spec(shape):
    """[(name, shape)] in the order of a Llama state dict."""
    h, i, v = shape["hidden"], shape["intermediate"], shape["vocab"]
    spec = [("model.embed_tokens.weight", (v, h))]
    for layer in range(shape["layers"]):
        p = f"model.layers.{layer}."
        spec += [(p + "self_attn.q_proj.weight", (h, h)), (p + "self_attn.k_proj.weight", (h, h)),
                 (p + "self_attn.v_proj.weight", (h, h)), (p + "self_attn.o_proj.weight", (h, h)),
                 (p + "mlp.gate_proj.weight", (i, h)), (p + "mlp.up_proj.weight", (i, h)),
                 (p + "mlp.down_proj.weight", (h, i)),
                 (p + "input_layernorm.weight", (h,)),
                 (p + "post_attention_layernorm.weight", (h,))]
    spec.append(("model.norm.weight", (h,)))
    if not shape["tied"]:
        spec.append(("lm_head.weight", (v, h)))
    return spec


class Live:
    """One copy of the state dict: `tensors` (name -> torch bf16 view) and `raw` (name -> numpy
    uint8 view of the same bytes), all views into `flat`."""

    def __init__(self, spec):
        total = sum(math.prod(s) for _, s in spec)
        self.flat = torch.zeros(total, dtype=torch.bfloat16)  # zeros: resident, like an engine's
        self.bits = self.flat.view(torch.int16)
        self.all_bytes = self.bits.numpy().view(np.uint8)
        self.tensors, self.raw = {}, {}
        offset = 0
        for name, s in spec:
            n = math.prod(s)
            self.tensors[name] = self.flat[offset:offset + n].view(s)
            self.raw[name] = self.all_bytes[2 * offset:2 * (offset + n)]
            offset += n
        self.version = None  # the weightcast version these bytes hold (None: none yet)

    def digest(self):
        if xxhash is not None:
            return xxhash.xxh3_128(self.all_bytes).hexdigest()
        return hashlib.sha256(self.all_bytes).hexdigest()


def init_model(spec, seed):
    """Random init with a fixed seed, straight as bf16 bit patterns (fast): random sign and
    mantissa, exponent 2^-7..2^-4 (|w| in [0.0078, 0.125), like a trained Llama's weights);
    norms 1.0."""
    live = Live(spec)
    rng = np.random.default_rng(seed)
    piece = 1 << 24
    for name, t in live.tensors.items():
        if name.endswith("norm.weight"):
            t.fill_(1.0)
            continue
        bits = t.view(-1).view(torch.int16).numpy().view(np.uint16)
        for b in range(0, bits.size, piece):
            r = rng.integers(0, 1 << 16, size=min(piece, bits.size - b), dtype=np.uint16)
            e = (r >> 7) & np.uint16(3)
            e += np.uint16(120)  # biased exponent 120..123
            e <<= np.uint16(7)
            r &= np.uint16(0x807F)
            r |= e
            bits[b:b + r.size] = r
    return live


def rl_step(live, step, changed, seed):
    """Each element changes with probability `changed` (positions from geometric gaps: sorted,
    distinct), by +-1..2 ulps: an integer add on the magnitude of the bf16 bit pattern, clamped
    to the largest finite value (never NaN/inf; a zero moved down stays zero). Deterministic in
    (seed, step). Returns the number of positions touched."""
    rng = np.random.default_rng([seed, step])
    n = live.bits.numel()
    gaps = rng.geometric(changed, size=int(changed * n * 1.1) + 64)
    idx = np.cumsum(gaps) - 1
    while idx[-1] < n:  # (vanishingly rare) too few gaps drawn
        idx = np.concatenate([idx, idx[-1] + np.cumsum(rng.geometric(changed, size=1024))])
    idx = idx[:np.searchsorted(idx, n)]
    delta = np.array([-2, -1, 1, 2], dtype=np.int32)[rng.integers(0, 4, size=idx.size)]
    bits = live.bits.numpy().view(np.uint16)
    v = bits[idx].astype(np.int32)
    sign, mag = v & 0x8000, v & 0x7FFF
    mag += delta
    np.clip(mag, 0, 0x7F7F, out=mag)
    bits[idx] = (sign | mag).astype(np.uint16)
    return int(idx.size)


class AdamWSteps:
    """Steps of torch.optim.AdamW (betas 0.9/0.999, no weight decay) on an fp32 master copy of
    the weights; the bf16 weights published are the master rounded, so an element changes when
    its accumulated update crosses a bf16 rounding boundary, as in mixed-precision training. Each
    element's gradient is a fixed direction plus as much fresh noise (both Gaussian, seeded), so
    updates drift steadily as in training rather than cancel as pure noise would. The learning
    rate sets the fraction that changes per step (see --lr). Holds 4 fp32 copies (16 bytes a
    parameter)."""

    def __init__(self, live, lr, seed):
        self.master = live.flat.float()
        self.master.grad = torch.empty_like(self.master)
        self.opt = torch.optim.AdamW([self.master], lr=lr, weight_decay=0.0)
        self.generator = torch.Generator().manual_seed(seed)
        self.direction = torch.empty_like(self.master).normal_(generator=self.generator)
        # Off the bf16 grid first: a master that starts on it needs half an ulp of drift before
        # anything changes, which the first steps of a real run are long past.
        for _ in range(self.WARMUP):
            self.step(live)

    WARMUP = 32

    def step(self, live):
        """One optimizer step, then the live bf16 weights become the rounded master. Returns the
        number of elements that changed."""
        self.master.grad.normal_(generator=self.generator).add_(self.direction)
        self.opt.step()
        before = live.bits.clone()
        live.flat.copy_(self.master)
        return int((live.bits != before).sum())


# ---------------------------------------------------------------------------------------------
# Sampler strategies: one instance in each sampler process. A method is a trainer side and a
# sampler strategy; to add one, write both (or reuse a trainer side) and add it to METHODS.

class Holder:
    """What the sampler's engine reads: `current` (a Live). A flip strategy keeps a `standby`."""

    def __init__(self, spec, copies=1):
        self.spec = spec
        self.current = Live(spec)
        # Allocated (and made resident) before the first version, like an engine's second copy.
        self.standby = Live(spec) if copies > 1 else None


class SamplerStrategy:
    """Runs inside a sampler process.

    open():             join (called before the sampler reports ready; may block until the
                        trainer side has opened too, as gloo's rendezvous does).
    receive(v, holder): block until version number v (1, 2, ...) is available, then make
                        holder.current hold exactly its bytes. Returns a dict with at least
                        `blocked_s` (time the live tensors the engine reads were being written,
                        or the flip) and optionally `write_s`, `written_bytes`,
                        `bytes_received` (wire bytes this sampler received for v), `extra`.
    close():            leave.
    """

    def __init__(self, index, config):
        self.index, self.config = index, config

    def open(self):
        pass

    def receive(self, version, holder):
        raise NotImplementedError

    def close(self):
        pass


class GlooSampler(SamplerStrategy):
    def open(self):
        torch.distributed.init_process_group(
            "gloo", init_method=self.config["init_method"], rank=self.index + 1,
            world_size=self.config["world_size"],
            timeout=datetime.timedelta(seconds=self.config["timeout"]))

    def receive(self, version, holder):
        first = None
        for t in holder.current.tensors.values():  # same order as the trainer's
            torch.distributed.broadcast(t.view(-1).view(torch.uint8), src=0)
            if first is None:
                first = time.monotonic()  # the first tensor arrived: writing has started
        return {"blocked_s": time.monotonic() - first}

    def close(self):
        torch.distributed.destroy_process_group()


class WeightcastSampler(SamplerStrategy):
    """Today's API: Subscriber.wait(), then copy the byte ranges changed() reports into the
    live tensors (in place), or into a standby copy and flip (config["flip"])."""

    def open(self):
        c = self.config
        if c.get("coordinator"):
            self.sub = weightcast.Subscriber(
                os.path.join(c["workdir"], f"sampler{self.index}"), CHANNEL,
                coordinator=c["coordinator"], secret_file=c["secret_file"],
                log_level=c["log_level"],
                log_file=os.path.join(c["workdir"], f"sampler{self.index}.log"),
                listen=f"{sampler_address(self.index)}:0")
        else:
            self.sub = weightcast.Subscriber(c["store"], CHANNEL)
        self.versions = {}  # number -> Version, for the ones a live copy holds

    def receive(self, version, holder):
        c = self.config
        v = self.sub.wait(version, timeout=c["timeout"])
        woke = time.time()
        if v.version != version:
            raise RuntimeError(f"wait({version}) returned version {v.version}")
        self.versions[v.version] = v
        target = holder.standby if c["flip"] else holder.current
        since = target.version
        if since is None:
            ranges = [(name, [(0, target.raw[name].nbytes)]) for name in target.raw]
        else:
            ranges = self.sub.changed(since, v.version)
        start = time.monotonic()
        written = 0
        for name, spans in ranges:
            dst = target.raw[name]
            src = np.frombuffer(v.bytes_of(name), dtype=np.uint8)
            for b, e in spans:
                dst[b:e] = src[b:e]
                written += e - b
        write_s = time.monotonic() - start
        target.version = v.version
        if c["flip"]:
            start = time.monotonic()
            holder.current, holder.standby = holder.standby, holder.current
            blocked = time.monotonic() - start
        else:
            blocked = write_s
        # Keep only the versions some live copy still holds (their manifests answer changed()).
        keep = {holder.current.version} | ({holder.standby.version} if holder.standby else set())
        for n in [n for n in self.versions if n not in keep]:
            del self.versions[n]
        out = {"blocked_s": blocked, "write_s": write_s, "written_bytes": written, "woke": woke}
        status = self.sub.status()
        if status is not None:
            if status.get("version") == version:
                out["bytes_received"] = status["bytes_received"]
            out["extra"] = {"delta": status.get("delta"), "peers": status.get("peers"),
                            "bytes_sent": status.get("bytes_sent")}
        return out

    def close(self):
        self.versions.clear()
        self.sub.close()


class LiveSampler(SamplerStrategy):
    """The memory-to-memory path (docs/live.md): Subscriber(memory=True) follows the
    trainer's memory channel and update() patches only the changed elements into the live
    tensors, every written chunk checked against the manifest. In place, or with a flip into the
    standby copy (config["flip"])."""

    @staticmethod
    def available():
        if not hasattr(weightcast, "LiveTensors"):
            return "weightcast has no LiveTensors in this build"
        return None

    def open(self):
        c = self.config
        self.sub = weightcast.Subscriber(c["memory_dir"], CHANNEL, memory=True)
        self.live = None

    def receive(self, version, holder):
        c = self.config
        if self.live is None:
            second = holder.standby.tensors if c["flip"] else None
            self.live = weightcast.LiveTensors(holder.current.tensors, flip=c["flip"], second=second)
            # Which Live the front copy is, by the address of its memory.
            self.lives = {holder.current.flat.data_ptr(): holder.current}
            if c["flip"]:
                self.lives[holder.standby.flat.data_ptr()] = holder.standby
        got = self.sub.wait(version, timeout=c["timeout"])
        woke = time.time()
        if got.version != version:
            raise RuntimeError(f"wait({version}) returned version {got.version}")
        report = self.sub.update(self.live, version)
        front = self.lives[next(iter(self.live.tensors.values())).data_ptr()]
        if c["flip"] and front is not holder.current:
            holder.current, holder.standby = holder.standby, holder.current
        holder.current.version = version
        write = report["apply_seconds"]
        return {"blocked_s": report["blocked_seconds"], "write_s": write,
                "written_bytes": report["copied_bytes"], "woke": woke,
                "bytes_received": report["payload_bytes"] if report["delta"] else None,
                "extra": {"delta": report["delta"], "patched": report["chunks_patched"],
                          "copied": report["chunks_copied"], "repaired": report["chunks_repaired"],
                          "note": report["note"],
                          "caught_up": report.get("caught_up", False),
                          "attest_s": report.get("attested", {}).get("seconds", 0.0)}}

    def close(self):
        self.sub.close()


class CoordLiveSampler(LiveSampler):
    """What a user's sampler does across machines: a Subscriber with an in-process agent that
    joins the coordinator, and update(LiveTensors) after every wait(): the version's payloads
    (kept beside the agent's store) are patched into the live tensors, every chunk checked."""

    def open(self):
        c = self.config
        self.sub = weightcast.Subscriber(
            os.path.join(c["workdir"], f"sampler{self.index}"), CHANNEL,
            coordinator=c["coordinator"], secret_file=c["secret_file"],
            log_level=c["log_level"],
            log_file=os.path.join(c["workdir"], f"sampler{self.index}.log"),
            listen=f"{sampler_address(self.index)}:0")
        self.live = None

    def receive(self, version, holder):
        out = super().receive(version, holder)
        out["bytes_received"] = None  # the agent's, below: update() reads the kept payloads
        status = self.sub.status() or {}
        out["extra"]["agent_bytes_received"] = status.get("bytes_received")
        return out


class ShmCopySampler(SamplerStrategy):
    """Reference: the plainest sync on one host. Waits for the trainer's note on its pipe, then
    copies the shared-memory buffer into its live tensors (one memcpy, in place)."""

    def receive(self, version, holder):
        r, _ = self.config["pipes"][self.index]
        if os.read(r, 1) != b"v":
            raise RuntimeError("the trainer's pipe closed")
        start = time.monotonic()
        np.copyto(holder.current.all_bytes, self.config["shared"].numpy())
        return {"blocked_s": time.monotonic() - start,
                "written_bytes": holder.current.all_bytes.nbytes}


def die_with_parent():
    """SIGKILL this process when the trainer dies (a watchdog exit, a kill): no orphans."""
    try:
        import ctypes
        import signal
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def sampler_main(index, strategy_cls, config, spec, conn):
    """One sampler process: open, then for every version receive, hash, acknowledge."""
    global weightcast
    die_with_parent()
    torch.set_num_threads(1)
    strategy = None
    try:
        if config.get("namespaces"):  # --netns: this sampler's own host
            join_netns(f"/var/run/netns/{config['namespaces'][index + 1]}")
            NET.update(namespaces=config["namespaces"], trainer=config["trainer_address"])
        if weightcast is None:  # spawned rather than forked
            weightcast = _import_weightcast()
        holder = Holder(spec, config.get("live_copies", 1))
        strategy = strategy_cls(index, config)
        strategy.open()
        conn.send(("ready", index))
        marks, hashes = [], []  # rusage at each receive() start; hash thread time per step
        for version in range(1, config["versions"] + 1):
            marks.append(cpu_self())
            r = strategy.receive(version, holder)
            done = time.monotonic()
            r["done_wall"] = time.time()
            h0 = time.thread_time()
            if config.get("corrupt") and index == 0 and version == config["versions"]:
                holder.current.all_bytes[7] ^= 1  # --check-the-check: must fail the run
            digest = holder.current.digest()
            hashes.append(time.thread_time() - h0)
            conn.send(("ok", index, version, done, digest, r))
        if not conn.poll(config["timeout"]):
            raise RuntimeError("no stop from the trainer")
        conn.recv()
        marks.append(cpu_self())
        cpu = [marks[i + 1] - marks[i] - hashes[i] for i in range(len(hashes))]
        conn.send(("cpu", index, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
    except Exception as e:  # reported to the trainer, which fails the run with it
        conn.send(("error", index, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        if strategy is not None:
            try:
                strategy.close()
            except Exception:
                pass
        conn.close()


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_self():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ---------------------------------------------------------------------------------------------
# Trainer sides.

class TrainerSide:
    """In the trainer. start(workdir) -> config for the samplers (before they are forked; start
    no threads here). open(): after the fork (threads allowed). prepare(live): once the model
    exists, before the first step (what a trainer sets up at start-up, untimed, as the
    shared-memory copy's buffer is made in start()). publish(live, step) -> dict with
    `blocked_s` and optionally `wire_bytes`, `delta`, `extra`. close()."""

    def __init__(self, args):
        self.args = args

    def start(self, workdir):
        return {}

    def open(self):
        pass

    def prepare(self, live):
        pass

    def publish(self, live, step):
        raise NotImplementedError

    def close(self):
        pass


class GlooTrainer(TrainerSide):
    def start(self, workdir):
        with socket.socket() as s:
            s.bind((NET["trainer"], 0))
            port = s.getsockname()[1]
        os.environ["GLOO_SOCKET_IFNAME"] = NET["ifname"]
        self.config = {"init_method": f"tcp://{NET['trainer']}:{port}",
                       "world_size": self.args.samplers + 1, "timeout": self.args.timeout}
        return self.config

    def open(self):
        torch.distributed.init_process_group(
            "gloo", init_method=self.config["init_method"], rank=0,
            world_size=self.config["world_size"],
            timeout=datetime.timedelta(seconds=self.args.timeout))

    def publish(self, live, step):
        start = time.monotonic()
        for t in live.tensors.values():
            torch.distributed.broadcast(t.view(-1).view(torch.uint8), src=0)
        return {"blocked_s": time.monotonic() - start, "wire_bytes": live.all_bytes.nbytes}

    def close(self):
        torch.distributed.destroy_process_group()


class ShmCopyTrainer(TrainerSide):
    """Reference: the trainer copies its state dict into one shared-memory buffer (what it is
    blocked for) and tells each sampler over a pipe; each sampler copies the buffer into its
    model. The next step's copy waits for every sampler's acknowledgement (the run's loop)."""

    def start(self, workdir):
        total = sum(math.prod(s) for _, s in self.spec) * 2
        self.shared = torch.zeros(total, dtype=torch.uint8).share_memory_()
        self.pipes = [os.pipe() for _ in range(self.args.samplers)]
        return {"shared": self.shared, "pipes": self.pipes}

    def publish(self, live, step):
        start = time.monotonic()
        np.copyto(self.shared.numpy(), live.all_bytes)
        blocked = time.monotonic() - start
        for _, w in self.pipes:
            os.write(w, b"v")
        return {"blocked_s": blocked, "wire_bytes": live.all_bytes.nbytes}

    def close(self):
        for r, w in self.pipes:
            os.close(w)
            os.close(r)


class WeightcastTrainer(TrainerSide):
    def __init__(self, args, coordinator, flip=False, asynchronous=False):
        super().__init__(args)
        self.coordinated, self.flip = coordinator, flip
        # publish_async(): the trainer is blocked for the snapshot only (what an RL loop uses).
        self.asynchronous = asynchronous
        self.pending = None
        self.coordinator_process = None
        self.raw_results = []

    def start(self, workdir):
        self.workdir = workdir
        config = {"workdir": workdir, "timeout": self.args.timeout, "flip": self.flip,
                  "log_level": self.args.log_level, "coordinator": None}
        if self.coordinated:
            self.secret_file = os.path.join(workdir, "secret")
            with open(os.open(self.secret_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(secrets.token_hex(32))
            self.coordinator_process, self.address = start_coordinator(
                workdir, self.secret_file, self.args.heartbeat_timeout)
            config.update(coordinator=self.address, secret_file=self.secret_file)
        else:
            config["store"] = os.path.join(workdir, "store")
        return config

    def open(self):
        a = self.args
        if self.coordinated:
            self.publisher = weightcast.Publisher(
                os.path.join(self.workdir, "publisher"), CHANNEL, coordinator=self.address,
                secret_file=self.secret_file, chunk_size=a.chunk_size, log_level="info",
                log_file=os.path.join(self.workdir, "publisher.log"),
                listen=f"{NET['trainer']}:0")
        else:
            self.publisher = weightcast.Publisher(os.path.join(self.workdir, "store"), CHANNEL,
                                                  chunk_size=a.chunk_size)
        # The core's reply has fields PublishResult drops (delta, prepare_seconds): keep them.
        core = getattr(self.publisher, "_core", None)
        if core is not None and hasattr(core, "publish"):
            inner = core.publish

            class Recording:
                def __getattr__(_, name):
                    return getattr(core, name)

                def publish(_, *a, **k):
                    out = inner(*a, **k)
                    self.raw_results.append(dict(out))
                    return out

            self.publisher._core = Recording()

    def prepare(self, live):
        if self.asynchronous:  # publish_async snapshots into buffers reserve() makes ahead
            self.publisher.reserve(live.tensors)

    def publish(self, live, step):
        if self.asynchronous:
            if self.pending is not None:
                self.pending.wait(self.args.timeout)
            start = time.monotonic()
            self.pending = self.publisher.publish_async(live.tensors, step=step)
            return {"blocked_s": time.monotonic() - start, "wire_bytes": None}
        n = len(self.raw_results)
        r = self.publisher.publish(live.tensors, step=step)
        out = {"blocked_s": r.seconds, "wire_bytes": r.wire_bytes, "version": r.version,
               "total_bytes": r.total_bytes}
        if len(self.raw_results) > n:
            raw = self.raw_results[-1]
            out["delta"] = raw.get("delta")
            if "prepare_seconds" in raw:
                out["extra"] = {"prepare_s": raw["prepare_seconds"]}
        return out

    def close(self):
        try:
            if self.pending is not None:
                self.pending.wait(self.args.timeout)
            self.publisher.close()
        finally:
            if self.coordinator_process is not None:
                self.coordinator_process.terminate()
                try:
                    self.coordinator_process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.coordinator_process.kill()

    def publish_log(self):
        """The publisher's 'published' log lines (import_s, build_s, encode_s, ...)."""
        path = os.path.join(self.workdir, "publisher.log")
        out = []
        if not os.path.exists(path):
            return out
        with open(path, errors="replace") as f:
            for line in f:
                if "published" not in line:
                    continue
                fields = dict(re.findall(r'"?(\w+)"?[=:]\s*"?([0-9.eE+-]+|true|false)"?', line))
                out.append({k: fields[k] for k in ("version", "delta", "payload_bytes",
                                                   "prepare_s", "import_s", "build_s",
                                                   "encode_s") if k in fields})
        return out


def start_coordinator(workdir, secret_file, heartbeat_timeout):
    binary = weightcast.weightcast_binary()
    address_file = os.path.join(workdir, "coordinator.addr")
    log = open(os.path.join(workdir, "coordinator.log"), "wb")
    process = subprocess.Popen(
        [binary, "coordinator", "--listen", f"{NET['trainer']}:0", "--state-dir",
         os.path.join(workdir, "coordinator"), "--address-file", address_file,
         "--secret-file", secret_file, "--heartbeat-timeout", heartbeat_timeout],
        stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    deadline = time.monotonic() + 30
    while not os.path.exists(address_file) or not open(address_file).read().strip():
        if process.poll() is not None:
            raise RuntimeError(f"coordinator exited with {process.returncode}; see "
                               f"{os.path.join(workdir, 'coordinator.log')}")
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("coordinator did not write its address within 30 s")
        time.sleep(0.02)
    with open(address_file) as f:
        return process, f.read().strip()


# The methods that only work with every process on one host (shared memory).
ONE_HOST_METHODS = ("shm-copy", "wc-local", "wc-local-flip", "live", "live-flip",
                    "live-delta", "live-delta-flip")

# name -> (trainer side factory, sampler strategy, live copies per sampler)
class LiveTrainer(TrainerSide):
    """Publisher(memory=True): publish_async() copies the tensors into the free shared-memory
    slot and returns (what the trainer waits for); hashing, delta encoding and the switch of the
    current version run behind it."""

    def __init__(self, args, flip=False, deltas=False):
        super().__init__(args)
        self.flip = flip
        # MemoryPublisherOptions::deltas: the publisher encodes each version against the one
        # before and samplers patch the payloads (the comparison behind the copy default).
        self.deltas = deltas
        self.handle = None

    def start(self, workdir):
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else workdir
        self.memory_dir = os.path.join(shm, f"wc-rl-sync-{os.getpid()}")
        return {"memory_dir": self.memory_dir, "timeout": self.args.timeout, "flip": self.flip}

    def open(self):
        self.publisher = weightcast.Publisher(self.memory_dir, CHANNEL, memory=True,
                                              chunk_size=self.args.chunk_size)
        if self.deltas:  # the Python API has no switch for it: the binding's own
            chunk = (int(weightcast._weightcast._parse_size(self.args.chunk_size))
                     if self.args.chunk_size else weightcast._weightcast.AUTO_CHUNK_SIZE)
            core = self.publisher._core
            core._p.close()  # lets the channel's one-writer lock go
            core._p = weightcast._weightcast._MemoryPublisher(self.memory_dir, CHANNEL, chunk,
                                                              deltas=True)

    def prepare(self, live):
        self.publisher.reserve(live.tensors)  # the two slots, made before the first snapshot

    def publish(self, live, step):
        if self.handle is not None:
            prev = self.handle.wait()  # the previous publish's finish (normally long done)
            self.last = prev
        start = time.monotonic()
        self.handle = self.publisher.publish_async(live.tensors, step=step)
        blocked = time.monotonic() - start
        out = {"blocked_s": blocked}
        r = self.handle.wait()  # for its figures only; the samplers did not wait for this
        out.update(wire_bytes=r.wire_bytes, version=r.version, total_bytes=r.total_bytes)
        return out

    def close(self):
        try:
            self.publisher.close()
        finally:
            shutil.rmtree(self.memory_dir, ignore_errors=True)


METHODS = {
    "gloo": (lambda a: GlooTrainer(a), GlooSampler, 1),
    "shm-copy": (lambda a: ShmCopyTrainer(a), ShmCopySampler, 1),
    "wc-local": (lambda a: WeightcastTrainer(a, False), WeightcastSampler, 1),
    "wc-local-flip": (lambda a: WeightcastTrainer(a, False, flip=True), WeightcastSampler, 2),
    "wc-coord": (lambda a: WeightcastTrainer(a, True), WeightcastSampler, 1),
    "wc-coord-flip": (lambda a: WeightcastTrainer(a, True, flip=True), WeightcastSampler, 2),
    # The RL loop a user writes: publish_async() on a coordinated Publisher, samplers keep
    # LiveTensors current with Subscriber.update (flipped, or in place).
    "coord-live-flip": (lambda a: WeightcastTrainer(a, True, flip=True, asynchronous=True),
                        CoordLiveSampler, 2),
    "coord-live": (lambda a: WeightcastTrainer(a, True, asynchronous=True), CoordLiveSampler, 1),
    "live": (lambda a: LiveTrainer(a), LiveSampler, 1),
    "live-flip": (lambda a: LiveTrainer(a, flip=True), LiveSampler, 2),
    "live-delta": (lambda a: LiveTrainer(a, deltas=True), LiveSampler, 1),
}


# ---------------------------------------------------------------------------------------------
# Running.

def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run_memcpy(spec, args):
    """One copy of the model's bytes (numpy, one thread) and one hash pass; medians of 3."""
    live = init_model(spec, args.seed)
    src = live.all_bytes
    dst = np.empty_like(src)
    dst[:] = 0  # resident
    copies, hashes = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        copies.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        live.digest()
        hashes.append(time.perf_counter() - t0)
    del dst, live
    return {"memcpy_s": statistics.median(copies), "hash_s": statistics.median(hashes),
            "hash": HASH_NAME, "memcpy_runs": copies, "hash_runs": hashes}


def memory_estimate(name, model_bytes, samplers):
    """(bytes of process memory, bytes of store files) a method holds at its peak: the trainer's
    model, each sampler's live copies, and a store's current + previous + incoming version (the
    publisher's, and each in-process agent's)."""
    _, _, copies = METHODS[name]
    anon = model_bytes * (1 + samplers * copies)
    if name == "gloo":
        return anon, 0
    if name == "coord-live-flip":
        # Its samplers stage the first version whole, later ones as payloads only.
        return anon, 3 * model_bytes + samplers * model_bytes
    stores = 1 + (samplers if name.startswith(("wc-coord", "coord-")) else 0)
    return anon, 3 * model_bytes * stores


def run_method(name, spec, args, workroot):
    make_trainer, strategy_cls, copies = METHODS[name]
    if strategy_cls is LiveSampler and LiveSampler.available() is not None:
        return {"skipped": LiveSampler.available()}
    workdir = tempfile.mkdtemp(prefix=f"{name}-", dir=workroot)
    trainer = make_trainer(args)
    trainer.spec = spec
    config = trainer.start(workdir)
    config.update(versions=args.steps + 1, timeout=args.timeout, live_copies=copies,
                  corrupt=args.check_the_check, namespaces=NET["namespaces"],
                  trainer_address=NET["trainer"])
    methods = mp.get_all_start_methods()
    ctx = mp.get_context(args.start_method or ("fork" if "fork" in methods else "spawn"))
    procs, pipes = [], []
    opened = False
    try:
        for i in range(args.samplers):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=sampler_main, args=(i, strategy_cls, config, spec, child),
                            daemon=True)
            p.start()
            child.close()
            procs.append(p)
            pipes.append(parent)
        trainer.open()
        opened = True
        for conn in pipes:
            receive(conn, args.timeout, "ready", procs[pipes.index(conn)])
        live = init_model(spec, args.seed)  # after the fork: the samplers share none of it
        adamw = AdamWSteps(live, args.lr, args.seed) if args.lr else None
        trainer.prepare(live)
        steps = []
        for step in range(args.steps + 1):
            if step == 0:
                changed = 0
            elif adamw is not None:
                changed = adamw.step(live)
            else:
                changed = rl_step(live, step, args.changed, args.seed)
            expected = live.digest()
            cpu0, sys0 = cpu_self(), resource.getrusage(resource.RUSAGE_SELF).ru_stime
            t0, t0_wall = time.monotonic(), time.time()
            pub = trainer.publish(live, step)
            pub["returned_wall"] = time.time()
            acks = [receive(conn, args.timeout, "ok", p) for conn, p in zip(pipes, procs)]
            trainer_cpu = cpu_self() - cpu0
            trainer_sys = resource.getrusage(resource.RUSAGE_SELF).ru_stime - sys0
            for _, index, version, done, digest, r in acks:
                if version != step + 1:
                    raise RuntimeError(f"sampler {index} acknowledged v{version}, expected "
                                       f"v{step + 1}")
                if digest != expected:
                    raise Mismatch(f"{name}: sampler {index}'s live tensors differ from the "
                                   f"trainer's after step {step} (v{version})")
            rs = [a[5] for a in acks]
            received = [r.get("bytes_received") for r in rs]
            row = {"step": step, "kind": "full" if step == 0 else "delta",
                   "changed_elements": changed,
                   "changed_fraction": changed / live.bits.numel(),
                   "step_s": max(a[3] for a in acks) - t0,
                   "trainer_blocked_s": pub["blocked_s"], "trainer_cpu_s": trainer_cpu,
                   "trainer_sys_s": trainer_sys,
                   "sampler_blocked_s": max(r["blocked_s"] for r in rs),
                   "sampler_write_s": max(r.get("write_s", r["blocked_s"]) for r in rs),
                   "written_bytes": max(r.get("written_bytes", 0) for r in rs),
                   "wire_bytes": pub.get("wire_bytes"),
                   "bytes_received": received if any(x is not None for x in received) else None,
                   "delta": pub.get("delta"), "publish": pub.get("extra"),
                   "sampler_extra": [r.get("extra") for r in rs if r.get("extra")] or None,
                   "times": {"start": t0_wall, "published": pub["returned_wall"],
                             "woke": [r.get("woke") for r in rs],
                             "done": [r["done_wall"] for r in rs]}}
            steps.append(row)
            print_step(name, row)
        for conn in pipes:
            conn.send("stop")
        cpus, maxrss = [], []
        for conn in pipes:
            _, index, cpu, rss = receive(conn, args.timeout, "cpu")
            cpus.append(cpu)
            maxrss.append(rss)
        for row in steps:
            row["sampler_cpu_s"] = [c[row["step"]] for c in cpus]
        result = {"steps": steps, "sampler_maxrss_kib": maxrss, "work_dir": workroot}
        if isinstance(trainer, WeightcastTrainer):
            if trainer.coordinated:
                result["publish_log"] = trainer.publish_log()
                timelines = [agent_timeline(os.path.join(workdir, f"sampler{i}.log"))
                             for i in range(args.samplers)]
                coordinator = coordinator_timeline(os.path.join(workdir, "coordinator.log"))
                traces = [step_trace(row, timelines, coordinator) for row in steps[1:]]
                result["trace"] = [tr for tr in traces if tr is not None]
            else:
                timelines = None
            result["breakdown"] = breakdown(steps, timelines)
        if args.keep:
            result["workdir"] = workdir
        return result
    finally:
        for p in procs:
            p.join(timeout=20)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        try:
            trainer.close()
        except Exception as e:
            if opened:
                print(f"{name}: close: {e}", file=sys.stderr)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


AGENT_EVENT = re.compile(r"^(\S+Z) \w+ agent (?:swarm policy: |agent: )"
                         r"(?:(target) v(\d+)|v(\d+) (complete) in|(committed) v(\d+)|"
                         r"(prepared) v(\d+))")
COORDINATOR_EVENT = re.compile(r"^(\S+Z) \w+ coordinator (?:(published) \S+ v(\d+)|"
                               r"\S+ v(\d+): (DECISION)_)")


def log_timeline(path, pattern, classify):
    """{version: {event: wall time of its first line}} from a node's log: `pattern` matches the
    lines of interest (a timestamp first), `classify(match)` gives (event, version)."""
    out = {}
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return out
    for line in lines:
        m = pattern.match(line)
        if not m:
            continue
        ts = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
        event, version = classify(m)
        out.setdefault(version, {}).setdefault(event, ts)
    return out


def agent_timeline(path):
    """{version: {"target"|"complete"|"prepared"|"committed": wall time}} from an agent's log."""
    return log_timeline(path, AGENT_EVENT, lambda m: (
        m.group(2) or m.group(5) or m.group(6) or m.group(8),
        int(m.group(3) or m.group(4) or m.group(7) or m.group(9))))


def coordinator_timeline(path):
    """{version: {"published"|"decision": wall time}} from the coordinator's log."""
    return log_timeline(path, COORDINATOR_EVENT, lambda m: (
        "published" if m.group(2) else "decision", int(m.group(3) or m.group(4))))


# The phases of one coordinated step, in order (docs/rl_step.md gives each one's floor).
TRACE_PHASES = ("snapshot", "publish", "announce", "fetch", "vote", "decision", "commit", "wake",
                "apply", "attest")


def step_trace(row, agents, coordinator):
    """One coordinated step as consecutive phases of the slowest sampler, in seconds (wall
    clock; the logs have millisecond stamps): snapshot (publish_async() blocked), publish (the
    publisher writes the tensors, hashes and encodes them, signs, and the coordinator logs the
    version), announce (logged -> the agent has its target), fetch (first request -> every
    payload verified, decoded onto the base and staged), vote (-> the agent's prepare vote),
    decision (-> the coordinator's decision, which waits for the slowest vote), commit (-> the
    agent committed), wake (-> the sampler's wait() returned), apply (-> its live tensors hold
    the version), attest (-> update() hashed them and handed the digest to its agent). None
    when a mark is missing."""
    version = row["step"] + 1
    t = row["times"]
    last = max(range(len(t["done"])), key=lambda i: t["done"][i])
    ev, co = agents[last].get(version, {}), coordinator.get(version, {})
    marks = [t["start"], t["start"] + row["trainer_blocked_s"], co.get("published"),
             ev.get("target"), ev.get("complete"), ev.get("prepared"), co.get("decision"),
             ev.get("committed"), t["woke"][last], None, t["done"][last]]
    extra = (row.get("sampler_extra") or [{}] * len(t["done"]))[last] or {}
    marks[-2] = t["done"][last] - extra.get("attest_s", 0.0)
    if any(m is None for m in marks):
        return None
    trace = {name: b - a for name, a, b in zip(TRACE_PHASES, marks, marks[1:])}
    trace["sum"] = marks[-1] - marks[0]
    trace["step"] = row["step_s"]
    return trace


def breakdown(steps, timelines):
    """Where a delta step's time goes, median over delta steps of the slowest sampler's phases
    (wall clock; the agent's log has millisecond stamps, and logs "committed" just after the
    commit a wait() wakes on, so `wake` can be slightly negative): publish() (trainer), publish
    returned -> agent has the target (notify), -> every chunk verified (fetch: transfer, decode,
    check), -> committed (the commit decision), -> wait() returned (wake), -> live tensors
    written (copy). A local store: publish start -> wait() returned, then copy."""
    phases = {}
    for row in steps[1:]:
        t = row["times"]
        version = row["step"] + 1
        last = max(range(len(t["done"])), key=lambda i: t["done"][i])
        marks = [("publish", t["start"]), ("notify", t["published"])]
        if timelines is not None:
            ev = timelines[last].get(version, {})
            if not all(k in ev for k in ("target", "complete", "committed")):
                continue
            marks += [("fetch", ev["target"]), ("commit", ev["complete"]),
                      ("wake", ev["committed"])]
        else:  # a local store: the commit is inside publish(); the samplers wake on it
            marks = [("publish_to_wake", t["start"])]
        marks += [("copy", t["woke"][last]), ("end", t["done"][last])]
        for (name, at), (_, until) in zip(marks, marks[1:]):
            phases.setdefault(name, []).append(until - at)
    return {name: statistics.median(v) for name, v in phases.items()}


class Mismatch(RuntimeError):
    pass


def receive(conn, timeout, kind, proc=None):
    if not conn.poll(timeout):
        raise RuntimeError(f"a sampler sent nothing within {timeout} s (waiting for {kind})")
    try:
        message = conn.recv()
    except EOFError:
        # The sampler process is gone: say how it ended (SIGKILL is most often the OOM killer).
        how = "its process ended"
        if proc is not None:
            proc.join(5)
            code = proc.exitcode
            how = (f"its process was killed by signal {-code}"
                   + (" (SIGKILL: out of memory? see dmesg; try a smaller --params or fewer "
                      "--samplers)" if code == -9 else "") if code is not None and code < 0
                   else f"its process exited with status {code}")
        raise RuntimeError(f"a sampler sent no {kind!r}: {how}") from None
    if message[0] == "error":
        raise RuntimeError(f"sampler {message[1]}: {message[2]}")
    if message[0] != kind:
        raise RuntimeError(f"expected {kind!r} from a sampler, got {message[0]!r}")
    return message


def fmt_bytes(n):
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def print_step(name, row):
    rec = row["bytes_received"]
    rec_text = "-" if rec is None else fmt_bytes(max(x or 0 for x in rec))
    print(f"  {name:<14} step {row['step']:>2} {row['kind']:<5} sync {row['step_s']:7.3f} s  "
          f"trainer blocked {row['trainer_blocked_s']:7.3f} s  sampler blocked "
          f"{row['sampler_blocked_s'] * 1e3:8.2f} ms (write {row['sampler_write_s'] * 1e3:7.1f} "
          f"ms, {fmt_bytes(row['written_bytes'])})  payload {fmt_bytes(row['wire_bytes'])}  "
          f"received {rec_text}  changed {row['changed_fraction']:.2%}", flush=True)


def method_figures(result, ref):
    steps = result["steps"]
    full = steps[0]
    deltas = steps[1:]
    med = lambda key: summary([r[key] for r in deltas])
    cpu = summary([c for r in deltas for c in r["sampler_cpu_s"]])
    out = {"full_s": full["step_s"], "step_s": med("step_s"),
           "trainer_blocked_s": med("trainer_blocked_s"),
           "trainer_blocked_full_s": full["trainer_blocked_s"],
           "trainer_cpu_s": med("trainer_cpu_s"), "trainer_sys_s": med("trainer_sys_s"),
           "sampler_blocked_s": med("sampler_blocked_s"),
           "sampler_write_s": med("sampler_write_s"),
           "sampler_blocked_full_s": full["sampler_blocked_s"],
           "written_bytes": med("written_bytes"),
           "sampler_cpu_s": cpu, "sampler_cpu_full_s": summary(full["sampler_cpu_s"]),
           "wire_bytes": med("wire_bytes") if deltas and deltas[0]["wire_bytes"] else None,
           "maxrss_kib": max(result["sampler_maxrss_kib"])}
    recv = [x for r in deltas if r["bytes_received"] for x in r["bytes_received"]]
    if recv:
        out["bytes_received"] = summary(recv)
        dup = [x / r["wire_bytes"] for r in deltas if r["bytes_received"] and r["wire_bytes"]
               for x in r["bytes_received"] if x is not None]
        out["received_over_payload"] = summary(dup)
    pubs = [r["publish"] for r in deltas if r.get("publish")]
    if pubs:
        out["prepare_s"] = summary([p.get("prepare_s") for p in pubs])
    if result.get("breakdown"):
        out["breakdown_s"] = result["breakdown"]
    if result.get("trace"):
        out["trace_s"] = {name: statistics.median(tr[name] for tr in result["trace"])
                          for name in TRACE_PHASES + ("sum",)}
        # The phases are consecutive marks of one step: they sum to the step it measured.
        out["trace_over_step"] = statistics.median(tr["sum"] / tr["step"]
                                                   for tr in result["trace"])
    if result.get("publish_log"):
        logs = [l for l in result["publish_log"] if l.get("delta") == "true"]
        for k in ("prepare_s", "import_s", "build_s", "encode_s"):
            vals = [float(l[k]) for l in logs if k in l]
            if vals:
                out[f"log_{k}"] = summary(vals)
    ratios = {}
    gloo = ref.get("gloo_full_s")
    if gloo and out["step_s"]:
        ratios["delta_step_over_gloo_full"] = out["step_s"]["median"] / gloo
        ratios["full_over_gloo_full"] = out["full_s"] / gloo
    shm = ref.get("shm_copy_s")
    if shm and out["step_s"]:
        ratios["delta_step_over_shm_copy"] = out["step_s"]["median"] / shm
        ratios["full_over_shm_copy"] = out["full_s"] / shm
        # The first version against the reference's first copy: both pay for fresh pages.
        ratios["first_over_shm_copy_first"] = out["full_s"] / ref["shm_copy_first_s"]
    if ref.get("memcpy_s") and out["trainer_blocked_s"]:
        ratios["trainer_blocked_over_memcpy"] = out["trainer_blocked_s"]["median"] / ref[
            "memcpy_s"]
    if ref.get("memcpy_s") and cpu:
        ratios["sampler_cpu_over_memcpy_hash"] = cpu["median"] / (ref["memcpy_s"] +
                                                                   ref["hash_s"])
    if "received_over_payload" in out:
        ratios["received_over_payload"] = out["received_over_payload"]["median"]
    out["ratios"] = ratios
    return out


class NetnsCluster:
    """Hosts 0..n-1 of bench/cluster/netns.sh, each link shaped to `rate`, taken down by down()."""

    SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster", "netns.sh")

    def __init__(self, n, rate):
        if os.geteuid() != 0:
            raise SystemExit("rl_sync: --netns needs root (network namespaces and tc)")
        self.id = f"rl{os.getpid() % 100000}"
        self.home = os.open("/proc/self/ns/net", os.O_RDONLY)
        up = subprocess.run(["bash", self.SCRIPT, "up", self.id, str(n), rate],
                            capture_output=True, text=True)
        if up.returncode != 0:
            self.down()
            raise SystemExit(f"rl_sync: netns.sh up failed: {up.stderr.strip()}")
        self.namespaces = [f"wcc{self.id}h{i}" for i in range(n)]  # netns.sh's names

    def enter(self, host):
        join_netns(f"/var/run/netns/{self.namespaces[host]}")

    def down(self):
        # Back home first: netns.sh kills what still runs inside the hosts, this process too.
        join_netns(f"/proc/self/fd/{self.home}")
        subprocess.run(["bash", self.SCRIPT, "down", self.id], capture_output=True)


def main():
    global weightcast
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--params", type=parse_count, default=parse_count("500M"),
                        help="parameter count: 100M, 500M, 20M, 1.5B (default 500M)")
    parser.add_argument("--samplers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5, help="delta steps after the full version")
    parser.add_argument("--changed", type=float, default=0.01,
                        help="fraction of elements each step changes (+-1..2 ulps at random "
                             "positions)")
    parser.add_argument("--lr", type=float, default=None,
                        help="instead of --changed: torch.optim.AdamW steps at this learning "
                             "rate on an fp32 master copy (gradients: a fixed Gaussian direction "
                             "plus as much noise; 32 warm-up steps first). Measured here: 1e-6, "
                             "1e-5, 1e-4 change about 1%%, 5%%, 40%% of the elements per step")
    parser.add_argument("--methods", default="memcpy,gloo,wc-local,wc-local-flip,wc-coord",
                        help=f"comma-separated, from memcpy,{','.join(METHODS)}")
    parser.add_argument("--chunk-size", default=None,
                        help="weightcast chunk size (default: auto, the publishers' own rule)")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds any one wait may take before the run fails")
    parser.add_argument("--heartbeat-timeout", default="900ms",
                        help="the coordinator's --heartbeat-timeout")
    parser.add_argument("--work-dir", default=None,
                        help="where stores go (default: /dev/shm when the method's estimated "
                        "memory with its stores fits --mem-budget, else /tmp); removed after")
    parser.add_argument("--mem-budget", default="14GiB",
                        help="memory the run may take (process memory + stores in /dev/shm)")
    parser.add_argument("--log-level", default="info", help="the samplers' agents' log level")
    parser.add_argument("--start-method", choices=["fork", "spawn", "forkserver"])
    parser.add_argument("--deadline", type=float, default=1800.0,
                        help="seconds the whole run may take: then it cleans up and exits 124")
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    parser.add_argument("--netns", metavar="RATE", default=None,
                        help="the trainer and every sampler on hosts of their own: network "
                        "namespaces whose links are shaped to RATE, e.g. 1gbit (root; "
                        "bench/cluster/netns.sh)")
    parser.add_argument("--check-the-check", action="store_true",
                        help="flip one bit in sampler 0's live copy at the last step: the run "
                        "must report the mismatch and exit 1")
    args = parser.parse_args()
    if args.samplers < 1 or args.steps < 1 or not 0 < args.changed < 1:
        parser.error("--samplers and --steps must be >= 1 and --changed in (0, 1)")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m != "memcpy" and m not in METHODS:
            parser.error(f"unknown method {m!r}")
    if args.netns:
        one_host = [m for m in methods if m in ONE_HOST_METHODS]
        if one_host:
            parser.error(f"--netns: {', '.join(one_host)} share one host's memory; "
                         "run them without --netns")
    weightcast = _import_weightcast()
    torch.set_num_threads(1)

    shape = llama_shape(args.params)
    spec = tensor_spec(shape)
    n_params = sum(math.prod(s) for _, s in spec)
    model_bytes = 2 * n_params
    print(f"rl_sync: Llama-shaped bf16, {n_params:,} params ({fmt_bytes(model_bytes)}): hidden "
          f"{shape['hidden']}, {shape['layers']} layers, intermediate {shape['intermediate']}, "
          f"vocab {shape['vocab']}, {shape['heads']} heads (MHA: q/k/v/o hidden x hidden), "
          f"lm_head untied, {len(spec)} tensors")
    steps_text = (f"AdamW steps at lr {args.lr:g}" if args.lr else
                  f"{args.changed:.2%} changed (+-1..2 ulps)")
    chunk_size = (int(weightcast._weightcast._parse_size(args.chunk_size)) if args.chunk_size
                  else weightcast._weightcast.auto_chunk_size(model_bytes))
    print(f"  {args.samplers} samplers, {args.steps} delta steps: {steps_text}, chunk size "
          f"{fmt_bytes(chunk_size)}{'' if args.chunk_size else ' (auto)'}, "
          f"hash {HASH_NAME}, load {os.getloadavg()[0]:.1f}, {mem_available() / 2**30:.1f} GiB "
          f"available")
    if xxhash is None:
        print("  python3-xxhash missing: hashing with SHA-256 (apt-get install python3-xxhash)")
    budget = weightcast._weightcast._parse_size(args.mem_budget)
    roots = {}

    def workroot_for(m):
        anon, stores = memory_estimate(m, model_bytes, args.samplers)
        where = args.work_dir or ("/dev/shm" if os.path.isdir("/dev/shm") and
                                  anon + stores <= budget else tempfile.gettempdir())
        in_ram = anon + (stores if where.startswith("/dev/shm") else 0)
        print(f"  {m:<14} estimated peak: {fmt_bytes(anon)} process memory + {fmt_bytes(stores)}"
              f" of stores in {where}" + (f" (over --mem-budget {args.mem_budget})"
                                          if in_ram > budget else ""), flush=True)
        if where not in roots:
            os.makedirs(where, exist_ok=True)  # --work-dir may name one not made yet
            roots[where] = tempfile.mkdtemp(prefix="wc-rl-sync-", dir=where)
        return roots[where]

    def watchdog():
        print(f"rl_sync: over --deadline {args.deadline:.0f} s; cleaning up", file=sys.stderr,
              flush=True)
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)
        if cluster is not None:
            cluster.down()
        os._exit(124)  # the samplers and the coordinator die with this process

    cluster = None
    if args.netns:
        cluster = NetnsCluster(args.samplers + 1, args.netns)
        cluster.enter(0)
        NET.update(trainer="198.18.0.1", ifname="eth0", namespaces=cluster.namespaces)
        print(f"  hosts: network namespaces {', '.join(cluster.namespaces)}, links {args.netns}",
              flush=True)

    timer = threading.Timer(args.deadline, watchdog)
    timer.daemon = True
    timer.start()
    ref, results, failed = {}, {}, None
    wall0 = time.monotonic()
    try:
        if "memcpy" in methods:
            ref.update(run_memcpy(spec, args))
            print(f"  memcpy         {ref['memcpy_s']:.3f} s ({model_bytes / ref['memcpy_s'] / 1e9:.2f}"
                  f" GB/s), {HASH_NAME} {ref['hash_s']:.3f} s "
                  f"({model_bytes / ref['hash_s'] / 1e9:.2f} GB/s)", flush=True)
        refs = ("gloo", "shm-copy")  # run first: every other method's ratios use them
        order = [m for m in refs if m in methods] + [m for m in methods
                                                      if m not in ("memcpy",) + refs]
        for m in order:
            t0 = time.monotonic()
            try:
                results[m] = run_method(m, spec, args, workroot_for(m))
            except Mismatch as e:
                failed = str(e)
                print(f"  FAIL {e}", flush=True)
                results[m] = {"error": str(e)}
                continue
            except Exception as e:
                failed = failed or f"{m}: {e}"
                print(f"  {m}: ERROR {e}", flush=True)
                results[m] = {"error": str(e)}
                continue
            if m == "gloo" and "steps" in results[m]:
                ref["gloo_full_s"] = statistics.median(r["step_s"] for r in results[m]["steps"])
            if m == "shm-copy" and "steps" in results[m]:
                ref["shm_copy_s"] = statistics.median(r["step_s"] for r in results[m]["steps"])
                ref["shm_copy_first_s"] = results[m]["steps"][0]["step_s"]
            if "skipped" in results[m]:
                print(f"  {m:<14} skipped: {results[m]['skipped']}")
            else:
                print(f"  {m:<14} done in {time.monotonic() - t0:.1f} s, every sampler "
                      f"bit-identical at every step", flush=True)
    finally:
        timer.cancel()
        if cluster is not None:
            cluster.down()
        for root in roots.values():
            if args.keep:
                print(f"  kept {root}")
            else:
                shutil.rmtree(root, ignore_errors=True)

    figures = {}
    print("summary (delta steps: median [min-max]; ratios against gloo's full broadcast, one "
          "memcpy, memcpy + hash):")
    for m, r in results.items():
        if "steps" not in r:
            figures[m] = r
            continue
        f = method_figures(r, ref)
        f["per_step"] = r["steps"]
        if r.get("publish_log"):
            f["publish_log"] = r["publish_log"]
        figures[m] = f
        rt = f["ratios"]
        s = f["step_s"]
        line = (f"  {m:<14} delta {s['median']:.3f} s [{s['min']:.3f}-{s['max']:.3f}]  full "
                f"{f['full_s']:.3f} s  trainer blocked {f['trainer_blocked_s']['median']:.3f} s"
                f"  sampler blocked {f['sampler_blocked_s']['median'] * 1e3:.2f} ms  sampler "
                f"CPU {f['sampler_cpu_s']['median']:.3f} s")
        if rt:
            line += "  | " + " ".join(f"{k}={v:.3f}" for k, v in rt.items())
        print(line)
        if f.get("trace_s"):
            print(f"  {'':<14} trace of a delta step, slowest sampler (median): " + ", ".join(
                f"{k} {v * 1e3:.0f} ms" for k, v in f["trace_s"].items()) +
                f" ({f['trace_over_step']:.2f} of the step)")
        elif f.get("breakdown_s"):
            print(f"  {'':<14} delta step, slowest sampler (median): " + ", ".join(
                f"{k} {v * 1e3:.0f} ms" for k, v in f["breakdown_s"].items()) +
                (f"; publish(): encode {f['log_encode_s']['median'] * 1e3:.0f} ms, import "
                 f"{f['log_import_s']['median'] * 1e3:.0f} ms of prepare "
                 f"{f['log_prepare_s']['median'] * 1e3:.0f} ms" if "log_encode_s" in f else ""))
    out = {"bench": "rl_sync", "netns": args.netns, "params": n_params, "bytes": model_bytes, "shape": shape,
           "tensors": len(spec), "samplers": args.samplers, "steps": args.steps,
           "changed": None if args.lr else args.changed, "lr": args.lr,
           "chunk_size": chunk_size, "chunk_size_auto": not args.chunk_size,
           "hash": HASH_NAME, "reference": {k: v for k, v in ref.items()
                                             if not k.endswith("_runs")},
           "methods": figures, "wall_s": time.monotonic() - wall0,
           "load_avg": os.getloadavg()[0], "ok": failed is None}
    if failed:
        out["error"] = failed
    print(json.dumps(out, separators=(",", ":")))
    return 0 if failed is None else 1


if __name__ == "__main__":
    sys.exit(main())
