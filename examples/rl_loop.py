#!/usr/bin/env python3
"""An RL loop on weightcast: a trainer publishes its policy every step, 4 samplers receive it.

The trainer trains a policy of 100M parameters by default (torch, CPU) with REINFORCE on
CartPole (written inline below). Like an LLM's, most of its weights (a table over the
discretized observation) are untouched by a step, so between versions most bf16 values are
bit-identical. Every step it publishes the weights as bf16 through weightcast.Publisher, straight
from memory. Four sampler processes each serve from their own bf16 copy of the policy
(weightcast.LiveTensors): every version is brought into it in place, writing only what changed
and checking each written chunk against the version's manifest; the sampler sends a SHA-256 of
its live weights back over a pipe (the trainer checks it equals its own), runs episodes with it
and sends them back for the next update.

By default it starts its own coordinator (the `weightcast` binary: $WEIGHTCAST_BIN or the one the
module was built with) on loopback and each sampler runs an in-process agent with its own store;
with --local the trainer publishes into a memory channel in shared memory and the samplers copy
the chunks that changed into their live weights. It cleans everything up on exit.

Columns: return (mean episode return of the samplers with that version), publish (time of
publish()), sync (publish start until the last sampler's live weights hold the version), size
(model bytes), received (bytes a node holding the previous version receives), ratio (size /
received), sent (bytes the trainer's node uploaded of that version; samplers also forward to each
other).

    python3 examples/rl_loop.py                  # 5 steps, 100M parameters
    python3 examples/rl_loop.py --steps 50       # watch the return climb
    python3 examples/rl_loop.py --local          # one machine: a memory channel, no coordinator
    python3 examples/rl_loop.py --params 4000000 # a small policy
"""

import argparse
import glob
import hashlib
import math
import multiprocessing as mp
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time


def _module_builds():
    """[(build/<preset>/python, interpreter it was built for)] of this checkout's builds of the
    module: release first, then the most recently built."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = []
    for path in glob.glob(os.path.join(root, "build", "*", "python")):
        package = os.path.join(path, "weightcast")
        modules = glob.glob(os.path.join(package, "_weightcast*.so"))
        if not modules or not os.path.isfile(os.path.join(package, "__init__.py")):
            continue  # configured, not built
        try:
            with open(os.path.join(package, "_build_info.py")) as f:
                match = re.search(r'^PYTHON = "(.*)"$', f.read(), re.M)
        except OSError:
            continue
        is_release = os.path.basename(os.path.dirname(path)) == "release"
        found.append((not is_release, -os.path.getmtime(modules[0]), path,
                      match.group(1) if match else None))
    return [(path, python) for _, _, path, python in sorted(found)]


try:
    import numpy as np
    import torch
except ImportError:
    # Started by a python3 without numpy or torch (a pyenv build on PATH, say): run again with the
    # interpreter the module was built for, which has them.
    _pythons = [python for _, python in _module_builds()
                if python and os.path.realpath(python) != os.path.realpath(sys.executable)]
    if not _pythons:
        raise
    os.execv(_pythons[0], [_pythons[0]] + sys.argv)

try:
    import weightcast
except ImportError:  # run from a checkout: use the module of the release (or any) build
    if not _module_builds():
        raise
    sys.path.insert(0, _module_builds()[0][0])
    import weightcast

CHANNEL = "policy"
MAX_EPISODE_STEPS = 200


class CartPole:
    """The classic cart-pole balancing task (Barto, Sutton & Anderson 1983): push a cart left or
    right to keep a pole upright. Reward 1 per step; the episode ends when the pole falls past 12
    degrees, the cart leaves the track, or after MAX_EPISODE_STEPS."""

    gravity, cart_mass, pole_mass, half_pole, force, dt = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02

    def __init__(self, rng):
        self.rng = rng
        self.state = None

    def reset(self):
        self.state = self.rng.uniform(-0.05, 0.05, size=4)
        self.steps = 0
        return self.state.astype(np.float32)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = self.force if action == 1 else -self.force
        total_mass = self.cart_mass + self.pole_mass
        pole_moment = self.pole_mass * self.half_pole
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + pole_moment * theta_dot ** 2 * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.half_pole * (4.0 / 3.0 - self.pole_mass * cos ** 2 / total_mass))
        x_acc = temp - pole_moment * theta_acc * cos / total_mass
        x, x_dot = x + self.dt * x_dot, x_dot + self.dt * x_acc
        theta, theta_dot = theta + self.dt * theta_dot, theta_dot + self.dt * theta_acc
        self.state = np.array([x, x_dot, theta, theta_dot])
        self.steps += 1
        done = abs(x) > 2.4 or abs(theta) > 12 * math.pi / 180 or self.steps >= MAX_EPISODE_STEPS
        return self.state.astype(np.float32), 1.0, done


LEVELS = 18  # per observation dimension: the table has LEVELS**4 rows


class TablePolicy(torch.nn.Module):
    """A policy shaped like an LLM's weights where they matter here: most parameters sit in a
    table (an embedding of the discretized observation) of which a step touches a few rows, so
    between RL steps most weights are bit-identical, as in LLM post-training; a small MLP head
    over [row, observation] changes every step."""

    def __init__(self, params, hidden):
        super().__init__()
        rows = LEVELS ** 4
        dim = max(8, params // rows)
        self.table = torch.nn.Embedding(rows, dim)
        self.head = torch.nn.Sequential(torch.nn.Linear(dim + 4, hidden), torch.nn.Tanh(),
                                        torch.nn.Linear(hidden, 2))

    def forward(self, obs):
        obs = obs.reshape(-1, 4)
        # CartPole's observations, squashed to (0, 1) and cut into LEVELS buckets each.
        level = ((torch.tanh(obs.float() / 2) + 1) / 2 * LEVELS).long().clamp(0, LEVELS - 1)
        row = ((level[:, 0] * LEVELS + level[:, 1]) * LEVELS + level[:, 2]) * LEVELS + level[:, 3]
        x = torch.cat([self.table(row), obs.to(self.table.weight.dtype)], dim=1)
        return self.head(x).squeeze(0)


def make_policy(args):
    return TablePolicy(args.params, args.hidden)


def digest_of(named_bytes):
    """SHA-256 over (name, bytes) in name order: equal iff every tensor is bit-identical."""
    h = hashlib.sha256()
    for name in sorted(named_bytes):
        h.update(name.encode())
        h.update(named_bytes[name])
    return h.hexdigest()


def run_episodes(policy, episodes, rng):
    """Rollouts with a sampled policy; returns [(observations, actions, rewards)]."""
    env = CartPole(rng)
    out = []
    with torch.no_grad():
        for _ in range(episodes):
            obs, done = env.reset(), False
            observations, actions, rewards = [], [], []
            while not done:
                logits = policy(torch.from_numpy(obs)).float()
                action = int(rng.random() < torch.softmax(logits, -1)[1].item())
                observations.append(obs)
                actions.append(action)
                obs, reward, done = env.step(action)
                rewards.append(reward)
            out.append((np.stack(observations), np.array(actions), np.array(rewards)))
    return out


def sampler_main(index, args, coordinator, secret_file, store, conn):
    """One sampler process: receive each version into its live weights, check, roll out."""
    torch.set_num_threads(1)
    rng = np.random.default_rng(1000 + index)
    # The sampler serves from a bf16 copy of the policy; LiveTensors brings its parameters to
    # every version in place, writing only what changed (the changed elements from a delta's
    # payloads, or the changed chunks from a memory channel).
    policy = make_policy(args).to(torch.bfloat16)
    for p in policy.parameters():
        p.requires_grad_(False)
    patched_bytes = 0
    try:
        if coordinator is None:
            sub = weightcast.Subscriber(store, CHANNEL, memory=True)
        else:
            sub = weightcast.Subscriber(store, CHANNEL, coordinator=coordinator,
                                        secret_file=secret_file)
        live = weightcast.LiveTensors(policy)
        with sub:
            conn.send(("ready", index))
            for version_number in range(1, args.steps + 2):
                sub.wait(version_number, timeout=args.timeout)
                received = time.time()
                report = sub.update(live, version_number)
                patched_bytes += report["copied_bytes"] + report["payload_bytes"]
                digest = digest_of({n: t.view(torch.int16).numpy().tobytes()
                                    for n, t in live.tensors.items()})
                episodes = run_episodes(policy, args.episodes, rng)
                conn.send(("ok", index, report["version"], None, digest, received,
                           patched_bytes, episodes))
    except Exception as e:  # reported to the trainer, which fails the run with it
        conn.send(("error", index, f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def start_coordinator(workdir, secret_file, heartbeat_timeout):
    binary = weightcast.weightcast_binary()
    address_file = os.path.join(workdir, "coordinator.addr")
    log = open(os.path.join(workdir, "coordinator.log"), "wb")
    process = subprocess.Popen(
        [binary, "coordinator", "--listen", "127.0.0.1:0", "--state-dir",
         os.path.join(workdir, "coordinator"), "--address-file", address_file,
         "--secret-file", secret_file,
         # Agents learn of a new version at their next heartbeat, every third of this: an RL
         # loop wants that short (the default 3s means a heartbeat a second).
         "--heartbeat-timeout", heartbeat_timeout],
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not os.path.exists(address_file):
        if process.poll() is not None:
            raise RuntimeError(f"coordinator exited with {process.returncode}; see "
                               f"{os.path.join(workdir, 'coordinator.log')}")
        if time.monotonic() > deadline:
            raise RuntimeError("coordinator did not write its address within 30 s")
        time.sleep(0.02)
    with open(address_file) as f:
        return process, f.read().strip()


def reinforce_loss(policy, episodes, gamma=0.99):
    """REINFORCE with normalized discounted returns as the baseline-free advantage."""
    losses = []
    for observations, actions, rewards in episodes:
        returns = np.zeros(len(rewards), dtype=np.float32)
        running = 0.0
        for t in reversed(range(len(rewards))):
            running = rewards[t] + gamma * running
            returns[t] = running
        losses.append((torch.from_numpy(observations), torch.from_numpy(actions),
                       torch.from_numpy(returns)))
    all_returns = torch.cat([r for _, _, r in losses])
    mean, std = all_returns.mean(), all_returns.std() + 1e-8
    total = 0.0
    for observations, actions, returns in losses:
        log_probs = torch.log_softmax(policy(observations), -1)
        chosen = log_probs.gather(1, actions.long().unsqueeze(1)).squeeze(1)
        total = total - (chosen * (returns - mean) / std).sum()
    return total / len(losses)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="training steps (versions - 1)")
    parser.add_argument("--samplers", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=4, help="episodes per sampler per step")
    parser.add_argument("--params", type=int, default=100_000_000,
                        help="policy parameters (most in the observation table)")
    parser.add_argument("--hidden", type=int, default=256, help="hidden width of the head")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--chunk-size", type=int, default=1 << 20)
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds a sampler waits for a version before failing")
    parser.add_argument("--heartbeat-timeout", default="900ms",
                        help="the coordinator's --heartbeat-timeout (agents poll at a third)")
    parser.add_argument("--local", action="store_true",
                        help="no coordinator or agents: samplers follow the trainer's memory "
                             "channel (shared memory on this machine)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if args.steps < 1 or args.samplers < 1 or args.episodes < 1:
        parser.error("--steps, --samplers and --episodes must be at least 1")

    torch.manual_seed(0)
    torch.set_num_threads(1)
    workdir = tempfile.mkdtemp(prefix="weightcast-rl-")
    coordinator = None
    samplers = []
    local_store = None
    try:
        secret_file = os.path.join(workdir, "secret")
        with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(secrets.token_hex(32))
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else workdir
        local_store = tempfile.mkdtemp(prefix="weightcast-rl-", dir=shm)
        address = None
        if not args.local:
            coordinator, address = start_coordinator(workdir, secret_file,
                                                     args.heartbeat_timeout)
        # The samplers are forked before this process starts any thread of its own (the
        # publisher's come next), so they inherit the imported torch instead of importing it
        # again (seconds each on a small machine); spawn where fork is not available.
        methods = mp.get_all_start_methods()
        ctx = mp.get_context("fork" if "fork" in methods else "spawn")
        pipes = []
        for i in range(args.samplers):
            parent, child = ctx.Pipe()
            store = local_store if args.local else os.path.join(workdir, f"sampler{i}")
            p = ctx.Process(target=sampler_main,
                            args=(i, args, address, secret_file, store, child), daemon=True)
            p.start()
            child.close()
            samplers.append(p)
            pipes.append(parent)
        if args.local:
            publisher = weightcast.Publisher(local_store, CHANNEL, memory=True,
                                             chunk_size=args.chunk_size)
        else:
            publisher = weightcast.Publisher(os.path.join(workdir, "publisher"), CHANNEL,
                                             coordinator=address, secret_file=secret_file,
                                             chunk_size=args.chunk_size)

        for conn in pipes:  # start the clock only once every sampler is listening
            if not conn.poll(120):
                raise RuntimeError("a sampler did not start within 120 s")
            message = conn.recv()
            if message[0] == "error":
                raise RuntimeError(f"sampler {message[1]}: {message[2]}")

        policy = make_policy(args)
        optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
        n_params = sum(p.numel() for p in policy.parameters())
        print(f"policy: {n_params} parameters, {2 * n_params} bytes as bf16; "
              f"{args.samplers} samplers; {'memory channel ' + local_store if args.local else address}")
        print(f"{'step':>4} {'ver':>4} {'return':>7} {'publish':>8} {'sync':>8} "
              f"{'size':>9} {'received':>9} {'ratio':>6} {'sent':>9}  identical")
        totals = {"size": 0, "wire": 0}
        for step in range(args.steps + 1):
            weights = {name: t.detach().to(torch.bfloat16)
                       for name, t in policy.state_dict().items()}
            expected = digest_of({n: t.view(torch.int16).numpy().tobytes()
                                  for n, t in weights.items()})
            started = time.time()
            result = publisher.publish(weights, step=step)
            episodes, received_at = [], []
            for conn in pipes:
                if not conn.poll(args.timeout + 30):
                    raise RuntimeError(f"a sampler sent nothing for step {step}")
                message = conn.recv()
                if message[0] == "error":
                    raise RuntimeError(f"sampler {message[1]}: {message[2]}")
                _, index, version, got_step, digest, received, _, eps = message
                if version != result.version:
                    raise RuntimeError(f"sampler {index} got version {version}, expected "
                                       f"{result.version} (step {step})")
                if digest != expected:
                    raise RuntimeError(f"sampler {index}: weights of version {version} differ "
                                       "from the trainer's")
                received_at.append(received)
                episodes.extend(eps)
            sync = max(received_at) - started
            # What the trainer's node uploaded of this version so far (the samplers also
            # forward chunks to each other).
            seeded = publisher.status()
            sent_text = "-" if seeded is None else str(seeded["bytes_sent"])
            totals["size"] += result.total_bytes
            if result.wire_bytes is None:  # a local store: nothing travels
                wire_text, ratio_text = "-", "-"
            else:
                totals["wire"] += result.wire_bytes
                wire_text = str(result.wire_bytes)
                ratio_text = f"{result.compression_ratio:.2f}"
            mean_return = float(np.mean([r.sum() for _, _, r in episodes]))
            print(f"{step:>4} {result.version:>4} {mean_return:>7.1f} {result.seconds:>7.3f}s "
                  f"{sync:>7.3f}s {result.total_bytes:>9} {wire_text:>9} {ratio_text:>6} "
                  f"{sent_text:>9}  "
                  f"{len(received_at)}/{args.samplers} ok", flush=True)
            if step == args.steps:
                break
            optimizer.zero_grad()
            reinforce_loss(policy, episodes).backward()
            optimizer.step()
        summary = (f"all {args.samplers} samplers bit-identical to the trainer at every step; "
                   f"{totals['size']} bytes published")
        if totals["wire"]:
            summary += (f", {totals['wire']} received per node "
                        f"(x{totals['size'] / totals['wire']:.2f})")
        print(summary)
        publisher.close()
        for p in samplers:
            p.join(timeout=30)
        return 0
    finally:
        for p in samplers:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        if coordinator is not None:
            coordinator.terminate()
            try:
                coordinator.wait(timeout=10)
            except subprocess.TimeoutExpired:
                coordinator.kill()
        if args.keep:
            print(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
            if local_store is not None:
                shutil.rmtree(local_store, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
