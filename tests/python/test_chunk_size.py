"""One chunk-size rule for every door: a Publisher (local or memory channel) with no chunk_size
cuts a version as `weightcast publish --chunk-size auto` does, so a small model is not one or two
chunks and changed() stays precise."""

import os
import subprocess

import numpy as np
import pytest

import weightcast

MiB = 1 << 20


def small_model(rng):
    # ~8.4 MB in 12 tensors, as a new user's first model might be.
    return {f"layer{i}.weight": rng.standard_normal((512, 342)).astype(np.float32)
            for i in range(12)}


def test_the_rule_is_the_cli_rule():
    auto = weightcast._weightcast.auto_chunk_size
    assert weightcast._weightcast.AUTO_CHUNK_SIZE == 0
    assert auto(8_400_000) == 128 << 10
    assert auto(1 << 30) == 128 << 10
    assert auto(8 << 30) == 1 << 20
    assert auto(500_000_000_000) == 64 << 20


def chunks(total, chunk_size):
    return (total + chunk_size - 1) // chunk_size


@pytest.mark.parametrize("memory", [False, True])
def test_a_publisher_with_no_chunk_size_uses_the_rule(tmp_path, memory):
    rng = np.random.default_rng(3)
    model = small_model(rng)
    directory = tmp_path / ("shm" if memory else "store")
    pub = weightcast.Publisher(directory, "policy", memory=memory)
    try:
        first = pub.publish(model, step=1)
        auto = weightcast._weightcast.auto_chunk_size(first.total_bytes)
        assert auto == 128 << 10
        assert first.chunk_count == chunks(first.total_bytes, auto)  # 65, not 2 of 8 MiB
        # 100 changed elements inside one tensor: changed() names that tensor alone, and the
        # channel keeps its chunk size.
        changed = {k: t.copy() for k, t in model.items()}
        changed["layer5.weight"].reshape(-1)[80_000:80_100] += 1.0
        second = pub.publish(changed, step=2)
        assert second.chunk_count == first.chunk_count
        if not memory:
            sub = weightcast.Subscriber(directory, "policy")
            assert sub.wait(2, timeout=10).chunk_size == auto
            assert [name for name, _ in sub.changed(1, version=2)] == ["layer5.weight"]
            sub.close()
    finally:
        pub.close()


def test_a_chunk_size_can_still_be_given(tmp_path):
    pub = weightcast.Publisher(tmp_path / "store", "policy", chunk_size="256KiB")
    try:
        pub.publish({"w": np.zeros(1 << 20, dtype=np.float32)}, step=1)
        v = weightcast.Subscriber(tmp_path / "store", "policy").wait(timeout=10)
        assert v.chunk_size == 256 << 10
    finally:
        pub.close()
    with pytest.raises(weightcast.InvalidArgumentError, match="chunk_size"):
        weightcast.Publisher(tmp_path / "other", "policy", chunk_size=1000)


def test_the_cli_doors_cut_alike(tmp_path):
    """`weightcast manifest`, `store import` and `diff` with no --chunk-size: the same rule."""
    rng = np.random.default_rng(4)
    pub = weightcast.Publisher(tmp_path / "store", "policy")
    try:
        pub.publish(small_model(rng), step=1)
        v = weightcast.Subscriber(tmp_path / "store", "policy").wait(timeout=10)
        ckpt = str(v.path)
        expected = v.chunk_size
        assert expected == 128 << 10
    finally:
        pub.close()
    binary = weightcast.weightcast_binary()
    total = os.path.getsize(os.path.join(ckpt, "model.safetensors"))
    count = chunks(total, expected)
    shown = subprocess.run([binary, "manifest", ckpt], capture_output=True, text=True, check=True)
    assert "chunk size   128.00 KiB" in shown.stdout, shown.stdout
    assert f"chunks       {count}\n" in shown.stdout, shown.stdout
    imported = subprocess.run([binary, "store", "import", "--root", str(tmp_path / "other"),
                               "--channel", "policy", ckpt], capture_output=True, text=True,
                              check=True)
    assert f"  {count} chunks  root" in imported.stdout, imported.stdout
