"""Subscriber.changed(): exact byte ranges from the manifests' chunk hashes."""

import numpy as np
import pytest

import weightcast
from conftest import SMALL_CHUNK


def expected_range(v, name, element_index, itemsize):
    """The changed range of `name` when one element changes: the part of the tensor inside the
    chunk that holds that element (one file, so file offsets are flat offsets)."""
    info = v.info(name)
    flat = info.offset + element_index * itemsize
    chunk = flat // SMALL_CHUNK
    begin = max(chunk * SMALL_CHUNK, info.offset)
    end = min((chunk + 1) * SMALL_CHUNK, info.offset + info.size)
    return (begin - info.offset, end - info.offset)


def test_one_changed_element_gives_its_chunk_only(local_publisher, store):
    rng = np.random.default_rng(1)
    big = rng.standard_normal(200_000).astype(np.float32)  # 800 KB: 13 chunks of 64 KiB
    small = rng.standard_normal(100).astype(np.float32)
    local_publisher.publish({"big": big, "small": small}, step=1)
    sub = weightcast.Subscriber(store, "policy")
    v1 = sub.wait(timeout=5)

    big2 = big.copy()
    big2[123_456] += 1.0
    local_publisher.publish({"big": big2, "small": small}, step=2)
    v2 = sub.wait(2, timeout=5)

    changes = sub.changed(v1)
    assert changes == [("big", [expected_range(v2, "big", 123_456, 4)])]
    (begin, end), = changes[0][1]
    assert end - begin <= SMALL_CHUNK
    # Applying only the changed ranges to the old bytes gives the new bytes.
    patched = bytearray(v1.bytes_of("big"))
    patched[begin:end] = v2.bytes_of("big")[begin:end]
    assert bytes(patched) == bytes(v2.bytes_of("big"))
    # Nothing changed between a version and itself; explicit version= works as well.
    assert sub.changed(2, version=2) == []
    # Back from 2 to 1 the same chunk differs.
    assert sub.changed(2, version=v1) == [("big", [expected_range(v1, "big", 123_456, 4)])]


def test_changes_in_two_places_are_two_ranges(local_publisher, store):
    big = np.zeros(300_000, dtype=np.float32)  # 1.2 MB
    local_publisher.publish({"big": big})
    sub = weightcast.Subscriber(store, "policy")
    v1 = sub.wait(timeout=5)
    big2 = big.copy()
    big2[10] = 1
    big2[250_000] = 1
    local_publisher.publish({"big": big2})
    v2 = sub.wait(2, timeout=5)
    assert sub.changed(v1) == [("big", [expected_range(v2, "big", 10, 4),
                                        expected_range(v2, "big", 250_000, 4)])]


def test_new_and_reshaped_tensors_are_changed_whole(local_publisher, store):
    a = np.arange(1000, dtype=np.float32)
    local_publisher.publish({"a": a, "b": np.zeros(10, dtype=np.float32)})
    sub = weightcast.Subscriber(store, "policy")
    v1 = sub.wait(timeout=5)
    # "b" disappears, "c" is new, "a" keeps its bytes but changes shape.
    local_publisher.publish({"a": a.reshape(10, 100), "c": np.ones(5, dtype=np.int64)})
    sub.wait(2, timeout=5)
    changes = dict(sub.changed(v1))
    assert changes == {"a": [(0, 4000)], "c": [(0, 40)]}


def test_changed_needs_known_versions(local_publisher, store):
    sub = weightcast.Subscriber(store, "policy")
    with pytest.raises(weightcast.FailedPreconditionError, match="wait"):
        sub.changed(1)
    local_publisher.publish({"a": np.zeros(4, dtype=np.float32)})
    sub.wait(timeout=5)
    with pytest.raises(weightcast.NotFoundError, match="version 9 of channel policy"):
        sub.changed(9)
    with pytest.raises(weightcast.InvalidArgumentError):
        sub.changed(-1)
