"""LiveTensors: samplers' live tensors brought to each version in place or by a flip, touching only
the changed elements, checked against the manifest (docs/live.md)."""

import multiprocessing
import os

import numpy as np
import pytest
import torch

import weightcast
from conftest import SMALL_CHUNK


def model(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "embed": torch.randn(512, 256, generator=g).to(torch.bfloat16),
        "norm": torch.randn(256, generator=g),
        "proj": torch.randn(300, 333, generator=g).to(torch.bfloat16),
        "step": torch.tensor([0], dtype=torch.int64),
    }


def rl_step(state, seed):
    """~1% of the bf16 elements move by one ulp; the int64 counter moves too."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in state.items():
        if t.dtype == torch.bfloat16:
            bits = t.view(torch.int16).clone()
            mask = torch.rand(bits.shape, generator=g) < 0.01
            bits[mask] += 1
            out[name] = bits.view(torch.bfloat16)
        else:
            out[name] = t.clone()
    out["step"] = state["step"] + 1
    return out


def same(a, b):
    return all(torch.equal(a[n].view(torch.uint8) if a[n].dtype == torch.bfloat16 else a[n],
                           b[n].view(torch.uint8) if b[n].dtype == torch.bfloat16 else b[n])
               for n in a)


@pytest.mark.parametrize("flip", [False, True])
def test_each_step_is_patched_from_the_delta_bit_identical(store, local_publisher, flip):
    state = model()
    local_publisher.publish(state)
    sub = weightcast.Subscriber(store, "policy")
    mine = {n: torch.zeros_like(t) for n, t in state.items()}
    live = weightcast.LiveTensors(mine, flip=flip)
    sub.wait()
    first = sub.update(live)
    assert not first["delta"] and first["chunks_copied"] > 0
    assert same(live.tensors, state)
    for step in range(1, 5):
        state = rl_step(state, step)
        r = local_publisher.publish(state)
        sub.wait(r.version)
        report = sub.update(live)
        assert same(live.tensors, state), step
        assert report["version"] == r.version
        if not flip or step >= 2:  # the second copy holds nothing until its first update
            assert report["delta"], report["note"]
            assert report["copied_bytes"] == 0
            assert report["chunks_repaired"] == 0
        # With a flip the idle copy catches up with the one in use as it is patched (one
        # pass), instead of a memcpy first.
        assert report["caught_up"] == flip, step
        assert live.version == r.version
    sub.close()


def test_flip_repoints_a_modules_parameters(store, local_publisher):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 8)).to(torch.bfloat16)
    state = {n: t.detach().clone() for n, t in net.state_dict().items()}
    local_publisher.publish(state)
    sampler = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 8)).to(torch.bfloat16)
    live = weightcast.LiveTensors(sampler, flip=True)
    sub = weightcast.Subscriber(store, "policy")
    for step in range(3):
        if step:
            state = {n: t.clone() for n, t in rl_step(dict(state, step=torch.tensor([0])), step).items()
                     if n != "step"}
            local_publisher.publish(state)
        v = sub.wait(step + 1)
        report = sub.update(live)
        assert report["blocked_seconds"] < 0.5
        for n, t in sampler.state_dict().items():
            assert torch.equal(t.view(torch.int16), state[n].view(torch.int16)), (step, n)
        assert v.version == step + 1
    sub.close()


def test_a_damaged_live_tensor_is_repaired_not_kept(store, local_publisher):
    state = model()
    local_publisher.publish(state)
    sub = weightcast.Subscriber(store, "policy")
    live = weightcast.LiveTensors({n: torch.zeros_like(t) for n, t in state.items()})
    sub.wait()
    sub.update(live)
    state = rl_step(state, 1)
    local_publisher.publish(state)
    live.tensors["embed"].view(torch.int16)[7, 7] ^= 0x100  # e.g. the caller wrote into the weights
    sub.wait(2)
    report = sub.update(live)
    assert report["chunks_repaired"] == 1, report
    assert "does not match" in report["note"]
    assert same(live.tensors, state)
    sub.close()


def test_a_shape_mismatch_is_an_error_and_touches_nothing(store, local_publisher):
    state = model()
    local_publisher.publish(state)
    sub = weightcast.Subscriber(store, "policy")
    wrong = {"embed": torch.zeros(256, 512, dtype=torch.bfloat16)}
    live = weightcast.LiveTensors(wrong)
    sub.wait()
    with pytest.raises(weightcast.FailedPreconditionError, match=r"embed.*\[256, 512\].*\[512, 256\]"):
        sub.update(live)
    assert torch.count_nonzero(wrong["embed"].view(torch.int16)) == 0
    assert live.version == 0
    sub.close()


def test_numpy_arrays_and_bad_registrations(store, local_publisher):
    arrays = {"a": np.arange(20000, dtype=np.float32), "b": np.arange(7, dtype=np.int16)}
    local_publisher.publish(arrays)
    mine = {n: np.zeros_like(a) for n, a in arrays.items()}
    live = weightcast.LiveTensors(mine)
    sub = weightcast.Subscriber(store, "policy")
    sub.wait()
    sub.update(live)
    assert all(np.array_equal(mine[n], arrays[n]) for n in arrays)
    with pytest.raises(weightcast.InvalidArgumentError, match="writable"):
        ro = np.zeros(4, dtype=np.float32)
        ro.flags.writeable = False
        weightcast.LiveTensors({"x": ro})
    with pytest.raises(weightcast.InvalidArgumentError, match="contiguous"):
        weightcast.LiveTensors({"x": torch.zeros(4, 4).t()})
    with pytest.raises(weightcast.FailedPreconditionError, match="update\\(\\) needs a version"):
        weightcast.Subscriber(store, "policy").update(live)
    sub.close()


def _sampler(store, steps, conn):
    sub = weightcast.Subscriber(store, "policy")
    live = None
    for version in range(1, steps + 1):
        sub.wait(version, timeout=60)
        if live is None:
            v = sub.wait(version)
            live = weightcast.LiveTensors({n: torch.zeros_like(t) for n, t in v.state_dict().items()})
        report = sub.update(live, version)
        digest = {n: t.view(torch.uint8).clone().numpy().tobytes() if t.dtype == torch.bfloat16
                  else t.numpy().tobytes() for n, t in live.tensors.items()}
        conn.send((version, report["delta"], digest))
    sub.close()
    conn.close()


def test_two_sampler_processes_over_a_memory_store(tmp_path):
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else str(tmp_path)
    store = os.path.join(shm, f"wc-test-live-{os.getpid()}")
    pub = weightcast.Publisher(store, "policy", chunk_size=SMALL_CHUNK)
    ctx = multiprocessing.get_context("fork")
    pipes, procs = [], []
    steps = 4
    try:
        for _ in range(2):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_sampler, args=(store, steps, child))
            p.start()
            pipes.append(parent)
            procs.append(p)
        state = model()
        for version in range(1, steps + 1):
            if version > 1:
                state = rl_step(state, version)
            pub.publish(state)
            want = {n: t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16
                    else t.numpy().tobytes() for n, t in state.items()}
            for conn in pipes:
                assert conn.poll(60), "a sampler did not answer"
                got_version, delta, digest = conn.recv()
                assert got_version == version
                assert delta == (version > 1)
                assert digest == want
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        pub.close()
        import shutil
        shutil.rmtree(store, ignore_errors=True)


def _memory_sampler(directory, steps, flip, conn):
    sub = weightcast.Subscriber(directory, "policy", memory=True)
    live = None
    for version in range(1, steps + 1):
        got = sub.wait(version, timeout=60)
        assert got.version == version
        if live is None:
            live = weightcast.LiveTensors({n: torch.zeros_like(t) for n, t in model().items()},
                                          flip=flip)
        report = sub.update(live, version)
        digest = {n: t.view(torch.uint8).clone().numpy().tobytes() if t.dtype == torch.bfloat16
                  else t.numpy().tobytes() for n, t in live.tensors.items()}
        conn.send((version, report["delta"], report["chunks_repaired"], digest))
    sub.close()
    conn.close()


@pytest.mark.parametrize("flip", [False, True])
def test_two_sampler_processes_over_a_memory_channel(flip):
    """The memory channel (Publisher(memory=True)): publish_async snapshots into shared memory,
    two sampler processes patch their live tensors from it, bit-identical at every step."""
    directory = f"/dev/shm/wc-test-memory-{os.getpid()}-{int(flip)}"
    pub = weightcast.Publisher(directory, "policy", memory=True, chunk_size=SMALL_CHUNK)
    ctx = multiprocessing.get_context("fork")
    pipes, procs = [], []
    steps = 5
    try:
        for _ in range(2):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_memory_sampler, args=(directory, steps, flip, child))
            p.start()
            pipes.append(parent)
            procs.append(p)
        state = model()
        for version in range(1, steps + 1):
            if version > 1:
                state = rl_step(state, version)
            want = {n: t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16
                    else t.numpy().tobytes() for n, t in state.items()}
            handle = pub.publish_async(state, step=version)
            # The snapshot is taken: changing the tensors now must not reach the samplers.
            state["embed"].view(torch.int16)[0, 0] += 7
            state["embed"].view(torch.int16)[0, 0] -= 7
            scratch = {n: t.clone() for n, t in state.items()}
            state["norm"].zero_()
            state = scratch
            result = handle.wait(60)
            assert result.version == version
            for conn in pipes:
                assert conn.poll(60), "a sampler did not answer"
                got_version, delta, repaired, digest = conn.recv()
                assert got_version == version
                assert repaired == 0
                # One host: the chunks that changed are copied from the slot, never encoded.
                assert not delta
                assert digest == want
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        pub.close()
        import shutil
        shutil.rmtree(directory, ignore_errors=True)


def test_memory_channel_errors(tmp_path):
    sub = weightcast.Subscriber(tmp_path, "policy", memory=True)
    with pytest.raises(weightcast.DeadlineExceededError):
        sub.wait(timeout=0.2)
    with pytest.raises(weightcast.FailedPreconditionError, match="update"):
        sub.changed(1)
    with pytest.raises(weightcast.InvalidArgumentError, match="memory=True"):
        weightcast.Publisher(tmp_path, "policy", coordinator="127.0.0.1:1", memory=True)
    with pytest.raises(TypeError, match="memory"):
        weightcast.Subscriber(tmp_path, "policy", memory="yes")
    pub = weightcast.Publisher(tmp_path, "policy", memory=True, chunk_size=SMALL_CHUNK)
    pub.publish({"w": torch.zeros(1000, dtype=torch.bfloat16)})
    live = weightcast.LiveTensors({"w": torch.zeros(999, dtype=torch.bfloat16)})
    assert sub.wait(timeout=5).version == 1
    with pytest.raises(weightcast.FailedPreconditionError, match=r"\[999\].*\[1000\]"):
        sub.update(live)
    pub.close()


def _slot_files(directory):
    return [directory / "policy.memory" / f"slot-{i}" / "model.safetensors" for i in (0, 1)]


def test_reserve_makes_a_memory_channels_slots_before_the_first_publish(tmp_path):
    """reserve() makes both slots of a fresh channel ahead of the first snapshot, which then
    copies into them (the same files); a restarted publisher's reserve leaves the slot of the
    current version alone; bad tensors are refused and make nothing."""
    pub = weightcast.Publisher(tmp_path, "policy", memory=True, chunk_size=SMALL_CHUNK)
    slots = _slot_files(tmp_path)
    with pytest.raises(weightcast.InvalidArgumentError, match="non-empty dict"):
        pub.reserve({})
    with pytest.raises(weightcast.InvalidArgumentError):
        pub.reserve({"w": np.zeros(4, dtype=np.complex64)})
    assert not any(p.exists() for p in slots)
    state = model()
    pub.reserve(state)
    assert all(p.exists() and p.stat().st_size > 0 for p in slots)
    made = [(p.stat().st_ino, p.stat().st_size) for p in slots]
    assert made[0][1] == made[1][1]
    sub = weightcast.Subscriber(tmp_path, "policy", memory=True)
    live = weightcast.LiveTensors({n: torch.zeros_like(t) for n, t in state.items()})
    for step in range(2):
        r = pub.publish_async(state).wait()
        assert r.total_bytes == made[0][1]
        sub.wait(r.version, timeout=10)
        sub.update(live)
        assert same(live.tensors, state)
        state = rl_step(state, step)
    assert [(p.stat().st_ino, p.stat().st_size) for p in slots] == made
    pub.close()
    again = weightcast.Publisher(tmp_path, "policy", memory=True, chunk_size=SMALL_CHUNK)
    again.reserve(state)
    assert again.publish(state).version == 3
    assert slots[1].stat().st_ino == made[1][0]  # v2's slot, which readers may hold, untouched
    sub.wait(3, timeout=10)
    sub.update(live)
    assert same(live.tensors, state)
    sub.close()
    again.close()


def test_reserve_on_a_local_publisher_makes_its_snapshot_buffer(store, local_publisher):
    """A store's publisher reserves its snapshot buffer; publishes after it are unchanged."""
    state = model()
    with pytest.raises(weightcast.InvalidArgumentError, match="non-empty dict"):
        local_publisher.reserve({})
    local_publisher.reserve(state)
    sub = weightcast.Subscriber(store, "policy")
    live = weightcast.LiveTensors({n: torch.zeros_like(t) for n, t in state.items()})
    for step in range(2):
        r = local_publisher.publish_async(state, step=step).wait()
        sub.wait(r.version, timeout=10)
        sub.update(live)
        assert same(live.tensors, state)
        state = rl_step(state, step)
    sub.close()


def test_a_reshaped_tensor_between_steps_is_published_and_refused_only_by_a_stale_registration():
    """A tensor dict whose shapes change between steps still publishes (those tensors travel
    whole); live tensors registered with the old shape are refused, untouched; new ones work."""
    directory = f"/dev/shm/wc-test-reshape-{os.getpid()}"
    pub = weightcast.Publisher(directory, "policy", memory=True, chunk_size=SMALL_CHUNK)
    try:
        state = model()
        pub.publish(state)
        sub = weightcast.Subscriber(directory, "policy", memory=True)
        old = weightcast.LiveTensors({n: torch.zeros_like(t) for n, t in state.items()})
        sub.wait(1, timeout=10)
        sub.update(old)
        state["proj"] = torch.randn(333, 300).to(torch.bfloat16)  # reshaped
        r = pub.publish(state)
        sub.wait(r.version, timeout=10)
        before = old.tensors["embed"].clone()
        with pytest.raises(weightcast.FailedPreconditionError, match="proj"):
            sub.update(old)
        assert torch.equal(old.tensors["embed"].view(torch.int16), before.view(torch.int16))
        fresh = weightcast.LiveTensors({n: torch.zeros_like(t) for n, t in state.items()})
        sub.update(fresh)
        assert same(fresh.tensors, state)
        sub.close()
    finally:
        pub.close()
        import shutil
        shutil.rmtree(directory, ignore_errors=True)


def test_memory_channel_has_one_writer_and_a_closed_publisher_publishes_nothing():
    directory = f"/dev/shm/wc-test-one-writer-{os.getpid()}"
    w = {"w": torch.zeros(1000, dtype=torch.bfloat16)}
    pub = weightcast.Publisher(directory, "policy", memory=True, chunk_size=SMALL_CHUNK)
    try:
        with pytest.raises(weightcast.UnavailableError, match="already has a publisher"):
            weightcast.Publisher(directory, "policy", memory=True, chunk_size=SMALL_CHUNK)
        assert pub.publish(w).version == 1
        pub.close()
        with pytest.raises(weightcast.FailedPreconditionError, match="closed"):
            pub.publish(w)
        with pytest.raises(weightcast.FailedPreconditionError, match="closed"):
            pub.publish_async(w)
        # Once closed, the channel takes a new writer, which numbers on.
        again = weightcast.Publisher(directory, "policy", memory=True, chunk_size=SMALL_CHUNK)
        assert again.publish(w).version == 2
        again.close()
    finally:
        import shutil
        shutil.rmtree(directory, ignore_errors=True)


def test_memory_wait_ends_on_close_from_another_thread(tmp_path):
    import threading
    import time
    pub = weightcast.Publisher(tmp_path, "policy", memory=True, chunk_size=SMALL_CHUNK)
    sub = weightcast.Subscriber(tmp_path, "policy", memory=True)
    closer = threading.Timer(0.3, sub.close)
    closer.start()
    start = time.monotonic()
    with pytest.raises(weightcast.AbortedError, match="closed"):
        sub.wait(5)  # never published
    assert time.monotonic() - start < 3
    closer.join()
    pub.close()


def test_memory_wait_ends_on_ctrl_c(tmp_path):
    import signal
    import subprocess
    import sys
    import time
    code = ("import weightcast; "
            f"s = weightcast.Subscriber({str(tmp_path)!r}, 'policy', memory=True); "
            f"p = weightcast.Publisher({str(tmp_path)!r}, 'policy', memory=True); "
            "print('waiting', flush=True); s.wait(7)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "waiting"
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=5)
    finally:
        proc.kill()
    assert "KeyboardInterrupt" in err, err


def test_memory_wait_names_a_mistyped_directory_and_a_store(tmp_path, monkeypatch):
    monkeypatch.setattr(weightcast.Subscriber, "_MEMORY_APPEAR", 0.3)
    sub = weightcast.Subscriber(tmp_path / "mistyped", "policy", memory=True)
    with pytest.raises(weightcast.NotFoundError, match="no memory channel 'policy'"):
        sub.wait(timeout=30)
    store = tmp_path / "store"
    local = weightcast.Publisher(store, "policy", chunk_size=SMALL_CHUNK)
    local.publish({"w": torch.zeros(10, dtype=torch.bfloat16)})
    local.close()
    with pytest.raises(weightcast.FailedPreconditionError, match="is a weightcast store"):
        weightcast.Subscriber(store, "policy", memory=True).wait(timeout=30)
