"""Versions as zero-copy views: values, dtypes, lifetime (local publisher + store subscriber)."""

import mmap
import os
import threading
import time

import numpy as np
import pytest
import torch

import weightcast
from conftest import SMALL_CHUNK


def base_of(array):
    """The object at the bottom of a numpy view chain (through memoryviews)."""
    while True:
        if isinstance(array, np.ndarray) and array.base is not None:
            array = array.base
        elif isinstance(array, memoryview):
            array = array.obj
        else:
            return array


def test_bf16_values_are_exact_and_torch_typed(local_publisher, store):
    torch.manual_seed(0)
    w = torch.randn(257, 129).to(torch.bfloat16)
    local_publisher.publish({"w": w}, step=7)
    v = weightcast.Subscriber(store, "policy").wait(timeout=5)
    got = v.torch("w")
    assert got.dtype == torch.bfloat16
    assert tuple(got.shape) == (257, 129)
    assert torch.equal(got.view(torch.int16), w.view(torch.int16))  # bit for bit
    # numpy has no bfloat16: numpy() gives the raw bits.
    raw = v.numpy("w")
    assert raw.dtype == np.uint16
    assert np.array_equal(raw, w.view(torch.int16).numpy().view(np.uint16))
    assert v.step == 7 and v.version == 1 and v.info("w").dtype == "BF16"


def test_indexing_is_numpy_for_every_dtype_and_refuses_raw_bits(local_publisher, store):
    # One rule, whatever the dtype and whether torch is importable: v[name] is a numpy array of
    # the values; where numpy has no type for them (bf16) it says what to call instead.
    local_publisher.publish({"f32": np.arange(4, dtype=np.float32),
                             "bf16": torch.ones(4, dtype=torch.bfloat16)})
    v = weightcast.Subscriber(store, "policy").wait(timeout=5)
    assert isinstance(v["f32"], np.ndarray)
    with pytest.raises(TypeError, match=r"'bf16' is BF16.*v\.torch\('bf16'\).*v\.numpy"):
        v["bf16"]
    assert v.torch("bf16").dtype == torch.bfloat16
    assert v.numpy("bf16").dtype == np.uint16
    assert set(v.state_dict()) == {"f32", "bf16"}


def test_views_are_zero_copy_maps_of_the_committed_file(local_publisher, store):
    a = np.arange(50_000, dtype=np.float32)
    local_publisher.publish({"a": a}, step=1)
    v = weightcast.Subscriber(store, "policy").wait(timeout=5)
    view = v.numpy("a")
    assert isinstance(base_of(view), mmap.mmap)
    assert not view.flags.writeable
    assert np.array_equal(view, a)
    # The torch view and the numpy view are the same memory.
    t = v.torch("a")
    assert t.data_ptr() == view.ctypes.data
    # Reading the file at the tensor's place gives the same bytes.
    info = v.info("a")
    with open(os.path.join(v.path, info.file), "rb") as f:
        f.seek(info.offset)
        assert f.read(info.size) == view.tobytes()


def test_torch_writes_are_private_copy_on_write(local_publisher, store):
    local_publisher.publish({"a": np.ones(1000, dtype=np.float32)}, step=1)
    sub = weightcast.Subscriber(store, "policy")
    v = sub.wait(timeout=5)
    t = v.torch("a")
    t.mul_(3)  # writes into this process's private pages only
    assert float(t[0]) == 3.0
    again = sub.wait(timeout=5)
    assert np.array_equal(again.numpy("a"), np.ones(1000, dtype=np.float32))
    with open(os.path.join(v.path, v.info("a").file), "rb") as f:
        f.seek(v.info("a").offset)
        assert np.frombuffer(f.read(4000), dtype=np.float32).tolist() == [1.0] * 1000


@pytest.mark.parametrize("value", [
    np.arange(12, dtype=np.int64).reshape(3, 4),
    np.linspace(-1, 1, 33, dtype=np.float64),
    np.linspace(-1, 1, 33).astype(np.float16),
    np.array([True, False, True]),
    np.arange(256, dtype=np.uint8),
    np.arange(-5, 5, dtype=np.int8),
    np.arange(7, dtype=np.uint32),
    np.array(3.5, dtype=np.float32),      # 0-d
    np.zeros((0, 4), dtype=np.float32),   # empty
    np.arange(6, dtype=">i4"),            # big-endian input is stored little-endian
])
def test_numpy_dtypes_round_trip(local_publisher, store, value):
    local_publisher.publish({"x": value, "pad": np.zeros(3, dtype=np.float32)})
    got = weightcast.Subscriber(store, "policy").wait(timeout=5)["x"]
    assert got.shape == value.shape
    assert np.array_equal(got, value)
    assert got.dtype == value.dtype.newbyteorder("=")


def test_torch_inputs_round_trip(local_publisher, store):
    tensors = {
        "f32": torch.randn(5, 5),
        "f16": torch.randn(9).half(),
        "i32": torch.arange(10, dtype=torch.int32),
        "bool": torch.tensor([True, False]),
        "noncontig": torch.randn(6, 8).t(),  # copied to contiguous
    }
    local_publisher.publish(tensors)
    v = weightcast.Subscriber(store, "policy").wait(timeout=5)
    state = v.state_dict()
    assert set(state) == set(tensors)
    for name, t in tensors.items():
        assert torch.equal(state[name], t.contiguous()), name


def test_views_outlive_collection_of_their_version(store):
    with weightcast.Publisher(store, "policy", keep_versions=1) as pub:
        sub = weightcast.Subscriber(store, "policy")
        pub.publish({"a": np.full(4096, 1.0, dtype=np.float32)})
        v1 = sub.wait(timeout=5)
        a1 = v1.numpy("a")
        pub.publish({"a": np.full(4096, 2.0, dtype=np.float32)})
        pub.publish({"a": np.full(4096, 3.0, dtype=np.float32)})
        assert not os.path.exists(v1.path)  # the store collected version 1
        assert float(a1.sum()) == 4096.0   # its mapping still reads version 1's bytes
        assert float(sub.wait(3, timeout=5).numpy("a")[0]) == 3.0


def test_wait_follows_new_versions_promptly(local_publisher, store):
    sub = weightcast.Subscriber(store, "policy")
    published = {}

    def publish_later():
        time.sleep(0.3)
        published["t"] = time.monotonic()
        local_publisher.publish({"a": np.arange(10, dtype=np.float32)}, step=1)
        published["done"] = time.monotonic()

    thread = threading.Thread(target=publish_later)
    thread.start()
    v = sub.wait(timeout=10)  # the store does not even exist yet
    returned = time.monotonic()
    thread.join()
    assert v.version == 1
    # Woken by the commit (inotify; a 100 ms poll at worst), not by the timeout. Generous for a
    # loaded CI machine.
    assert returned - published["done"] < 0.5


def test_wait_releases_the_gil(store):
    sub = weightcast.Subscriber(store, "policy")
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    thread = threading.Thread(target=tick)
    thread.start()
    with pytest.raises(weightcast.DeadlineExceededError):
        sub.wait(timeout=0.5)
    stop.set()
    thread.join()
    # The other thread ran while wait() blocked. Holding the GIL, wait() would let it in only
    # between its 200 ms slices: a handful of ticks.
    assert len(ticks) > 20


def test_close_wakes_a_blocked_wait(store):
    sub = weightcast.Subscriber(store, "policy")
    timer = threading.Timer(0.2, sub.close)
    timer.start()
    start = time.monotonic()
    with pytest.raises(weightcast.AbortedError):
        sub.wait(timeout=30)
    assert time.monotonic() - start < 5


def test_min_version_waits_for_that_version(local_publisher, store):
    sub = weightcast.Subscriber(store, "policy")
    local_publisher.publish({"a": np.zeros(8, dtype=np.float32)}, step=1)
    assert sub.wait(timeout=5).version == 1
    with pytest.raises(weightcast.DeadlineExceededError):
        sub.wait(2, timeout=0.2)
    local_publisher.publish({"a": np.ones(8, dtype=np.float32)}, step=2)
    v2 = sub.wait(2, timeout=5)
    assert v2.version == 2 and v2.step == 2
    assert SMALL_CHUNK == v2.chunk_size
