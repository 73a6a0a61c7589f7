"""LiveTensors applied with torch operations (docs/gpu.md): the path tensors on a GPU take, run
on CPU tensors with ``torch_ops=True``, and on a GPU with WEIGHTCAST_TEST_DEVICE=cuda
(scripts/device-check.sh). Payloads arrive as changes scattered by torch ops,
every chunk written is checked where it lies against the version's device checks, and every step
is bit-identical to the trainer's tensors."""

import os

import numpy as np
import pytest
import torch

import weightcast
from conftest import SMALL_CHUNK
from weightcast import _device


DEVICE = torch.device(os.environ.get("WEIGHTCAST_TEST_DEVICE", "cpu"))


def on_device(tensors):
    """The sampler's own tensors, zeros, where the test's device is."""
    return {n: torch.zeros_like(t, device=DEVICE) for n, t in tensors.items()}


def model(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "embed": torch.randn(512, 256, generator=g).to(torch.bfloat16),
        "norm": torch.randn(3001, generator=g),
        "proj": torch.randn(300, 333, generator=g).to(torch.bfloat16),
        "step": torch.tensor([0], dtype=torch.int64),
    }


def rl_step(state, seed, changed=0.01):
    """A fraction of the bf16 elements move by one ulp, a few f32 ones by noise, the counter by
    one (element changes of widths 2, 4 and 8, added with carries)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in state.items():
        if t.dtype == torch.bfloat16:
            bits = t.view(torch.int16).clone()
            bits[torch.rand(bits.shape, generator=g) < changed] += 1
            out[name] = bits.view(torch.bfloat16)
        elif t.dtype == torch.float32:
            out[name] = t + (torch.rand(t.shape, generator=g) < 0.02) * 1e-3
        else:
            out[name] = t + 1
    return out


def same(a, b):
    return all(torch.equal(a[n].cpu().reshape(-1).view(torch.uint8),
                           b[n].cpu().reshape(-1).view(torch.uint8)) for n in a)


@pytest.fixture
def checked_publisher(store):
    publisher = weightcast.Publisher(store, "policy", chunk_size=SMALL_CHUNK, device_checks=True)
    yield publisher
    publisher.close()


def counting(monkeypatch):
    """Counts TorchDevice's calls, by name and (for change) by width and operation."""
    calls = {}
    for name in ("write", "read", "copy", "change", "xor_bytes", "weighted_sums"):
        method = getattr(_device.TorchDevice, name)

        def counted(self, *args, _method=method, _name=name):
            key = (_name, args[1], args[2]) if _name == "change" else _name
            calls[key] = calls.get(key, 0) + 1
            return _method(self, *args)
        monkeypatch.setattr(_device.TorchDevice, name, counted)
    return calls


@pytest.mark.parametrize("flip", [False, True])
def test_steps_are_scattered_by_torch_ops_and_checked_on_the_device(store, checked_publisher,
                                                                    flip, monkeypatch):
    calls = counting(monkeypatch)
    state = model()
    checked_publisher.publish(state)
    sub = weightcast.Subscriber(store, "policy")
    live = weightcast.LiveTensors(on_device(state), flip=flip, torch_ops=True)
    sub.wait()
    first = sub.update(live)
    assert first["check"] == "wsum-128"
    assert same(live.tensors, state)
    # Sparse steps, a dense one (byte XORs), then a new model (chunks whole).
    for step, changed in [(1, 0.01), (2, 0.05), (3, 0.9), (4, 0.01)]:
        state = rl_step(state, step, changed)
        r = checked_publisher.publish(state)
        sub.wait(r.version)
        report = sub.update(live)
        assert same(live.tensors, state), step
        assert report["check"] == "wsum-128"
        assert report["chunks_repaired"] == 0, report["note"]
        assert report["attested"]["matches"]  # summed on the device too
        if not flip or step >= 2:
            assert report["delta"], report["note"]
            assert report["copied_bytes"] == 0
    # Added elements of 2 (bf16), 4 (f32) and 8 bytes (the counter), XORed bytes (the dense
    # step); checked on the device, never read back.
    assert {("change", 2, True), ("change", 4, True), ("change", 8, True)} <= set(calls), calls
    assert calls.get("xor_bytes", 0) > 0 and calls.get("read", 0) == 0, calls
    state = model(seed=9)
    r = checked_publisher.publish(state)
    sub.wait(r.version)
    sub.update(live)
    assert same(live.tensors, state)
    sub.close()


def test_a_version_without_device_checks_is_read_back_and_hashed(store, local_publisher):
    state = model()
    local_publisher.publish(state)
    sub = weightcast.Subscriber(store, "policy")
    live = weightcast.LiveTensors(on_device(state), torch_ops=True)
    sub.wait()
    assert sub.update(live)["check"] == "xxh3-128"
    state = rl_step(state, 1)
    sub.wait(local_publisher.publish(state).version)
    report = sub.update(live)
    assert report["delta"] and report["check"] == "xxh3-128"
    assert same(live.tensors, state)
    sub.close()


def test_a_byte_damaged_on_the_device_is_caught_and_its_chunk_copied_whole(store,
                                                                          checked_publisher):
    state = model()
    checked_publisher.publish(state)
    sub = weightcast.Subscriber(store, "policy")
    mine = on_device(state)
    live = weightcast.LiveTensors(mine, torch_ops=True)
    sub.wait()
    sub.update(live)
    mine["proj"].view(torch.int16)[7, 7] ^= 0x10  # a memory error in device memory
    state = rl_step(state, 1)
    sub.wait(checked_publisher.publish(state).version)
    report = sub.update(live)
    assert report["chunks_repaired"] == 1, report
    assert same(live.tensors, state)
    sub.close()


def test_a_modules_parameters_are_repointed_by_the_flip(store, checked_publisher):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)).to(torch.bfloat16)
    state = {n: t.detach().clone() for n, t in net.state_dict().items()}
    checked_publisher.publish(state)
    sampler = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)).to(
        torch.bfloat16).to(DEVICE)
    live = weightcast.LiveTensors(sampler, flip=True, torch_ops=True)
    sub = weightcast.Subscriber(store, "policy")
    sub.wait()
    for step in range(1, 4):
        sub.update(live)
        assert same(dict(sampler.state_dict()), state)
        state = rl_step(state, step, 0.05)
        sub.wait(checked_publisher.publish(state).version)
    sub.close()


def test_torch_ops_refuses_what_it_cannot_reach():
    with pytest.raises(weightcast.InvalidArgumentError, match="torch tensors on one device"):
        weightcast.LiveTensors({"x": np.zeros(4, np.float32)}, torch_ops=True)
    with pytest.raises(TypeError, match="torch_ops"):
        weightcast.LiveTensors({"x": torch.zeros(4)}, torch_ops="yes")


def test_weighted_sums_on_the_device_are_the_manifests_definition(monkeypatch):
    monkeypatch.setattr(_device, "_SUM_SLICE", 1 << 20)  # several slices, rows and a tail
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, size=_device._SUM_SLICE + 12345, dtype=np.uint8)
    t = torch.from_numpy(data.copy()).to(DEVICE)
    dev = _device.TorchDevice(DEVICE)
    dev.register([t])
    x = data.astype(np.int64)
    want_a = int(x.sum())
    want_b = int((x * np.arange(1, len(x) + 1, dtype=np.int64)).sum())
    assert dev.weighted_sums(t.data_ptr(), len(data)) == (want_a, want_b)
    # A piece of the range: its own weights start at 1.
    for start, n in [(100, 50), (4095, 4097 * 3), (1, (1 << 20) + 4096)]:
        piece = x[start:start + n]
        assert dev.weighted_sums(t.data_ptr() + start, n) == (
            int(piece.sum()), int((piece * np.arange(1, n + 1)).sum())), (start, n)
    with pytest.raises(weightcast.InternalError, match="no registered live tensor"):
        dev.weighted_sums(t.data_ptr() + len(data) - 1, 2)


def test_device_snapshots_publish_in_order_what_the_tensors_held_at_submission(store):
    # The thread publish_async() of GPU tensors hands snapshots through, driven here with CPU
    # tensors: the trainer changes its tensors as soon as submit() returns.
    from weightcast._device_publish import DeviceSnapshots
    from weightcast._publisher import _publishable
    publisher = weightcast.Publisher(store, "policy", chunk_size=SMALL_CHUNK, keep_versions=3)
    snapshots = DeviceSnapshots(publisher._core, _publishable)
    state = model()
    expected, handles = [], []
    for step in range(3):
        handles.append(snapshots.submit(state, step, True))
        expected.append({n: t.clone() for n, t in state.items()})
        state["embed"].view(torch.int16).add_(1)
        state["step"] += 1
    snapshots.drain()
    versions = [h.wait(30)["version"] for h in handles]
    assert versions == sorted(versions) and len(set(versions)) == 3
    snapshots.close()
    sub = weightcast.Subscriber(store, "policy")
    live = weightcast.LiveTensors({n: torch.zeros_like(t) for n, t in state.items()})
    for version, want in zip(versions, expected):
        sub.update(live, version=version)
        assert same(live.tensors, want), version
    sub.close()
    publisher.close()


def test_publish_async_of_device_tensors_snapshots_them_at_the_call(store, local_publisher):
    original = {n: t.to(DEVICE) for n, t in model().items()}
    state = {n: t.clone() for n, t in original.items()}
    handle = local_publisher.publish_async(state)
    state["embed"].view(torch.int16).add_(1)  # the trainer goes on at once
    result = handle.wait(60)
    sub = weightcast.Subscriber(store, "policy")
    live = weightcast.LiveTensors(on_device(original), torch_ops=True)
    sub.update(live, version=result.version)
    assert same(live.tensors, original)
    sub.close()
