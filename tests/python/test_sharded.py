"""Sharded publish (docs/sharded_publish.md): 4 ranks each publish the rows of every
matrix they hold (rows split 4 ways) for the same step; 2 samplers (Subscriber with an agent
each) receive one version per step whose whole tensors are bit-identical to the unsharded
state dict."""

import threading

import numpy as np
import pytest
import torch

import weightcast
from conftest import SMALL_CHUNK
from test_remote import cluster  # noqa: F401 - the fixture

WORLD = 4


def full_state(step):
    torch.manual_seed(1)
    state = {"embed.weight": torch.randn(512, 64).to(torch.bfloat16),
             "mlp.weight": torch.randn(256, 128),
             "mlp.bias": torch.randn(128)}
    # An RL-like step: a few rows change.
    for s in range(2, step + 1):
        state["embed.weight"][(s * 37) % 512, :] += 1.0
        state["mlp.weight"][(s * 11) % 256, :] *= 1.5
    return state


def rank_part(state, rank):
    """This rank's rows of every matrix, as (tensors, slices); rank 0 also holds the vector."""
    tensors, slices = {}, {}
    for name, t in state.items():
        if t.dim() == 2:
            rows = t.shape[0] // WORLD
            tensors[name] = t[rank * rows:(rank + 1) * rows].contiguous()
            slices[name] = (0, rank * rows, t.shape[0])
        elif rank == 0:
            tensors[name] = t
    return tensors, slices


def bits(t):
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def ranks(tmp_path, address, secret_file):
    return [weightcast.Publisher(tmp_path / f"rank{r}", "policy", coordinator=address,
                                 secret_file=secret_file, chunk_size=SMALL_CHUNK, rank=r,
                                 world=WORLD, writer_id="trainer") for r in range(WORLD)]


def publish_step(publishers, step, state_of=full_state):
    """Every rank publishes its part of `step`; publish() returns once all parts are in, so each
    rank runs on a thread of its own, as it would in its own process."""
    state = state_of(step)
    results, errors = [None] * WORLD, []

    def run(r):
        try:
            tensors, slices = rank_part(state, r)
            results[r] = publishers[r].publish(tensors, step=step, slices=slices)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(WORLD)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    versions = {r.version for r in results}
    assert len(versions) == 1, versions
    return state, versions.pop()


def test_four_ranks_to_two_samplers_bit_identical(cluster, tmp_path):  # noqa: F811
    address, secret_file = cluster
    publishers = ranks(tmp_path, address, secret_file)
    samplers = [weightcast.Subscriber(tmp_path / f"sampler{i}", "policy", coordinator=address,
                                      secret_file=secret_file) for i in range(2)]
    try:
        for step in (1, 2, 3):
            state, version = publish_step(publishers, step)
            for sampler in samplers:
                v = sampler.wait(min_version=version, timeout=60)
                assert v.version == version and v.step == step
                assert sorted(v) == sorted(state)
                for name, want in state.items():
                    got = v.torch(name)
                    assert got.shape == want.shape and got.dtype == want.dtype, name
                    assert torch.equal(bits(got), bits(want)), f"step {step}: {name} differs"
                assert len(v.slices("embed.weight")) == WORLD
                assert v.info("mlp.weight").shape == (256, 128)
                np.testing.assert_array_equal(v["mlp.bias"], state["mlp.bias"].numpy())
            if step > 1:
                assert version == step  # one version per step, numbered alike
    finally:
        for s in samplers:
            s.close()
        for p in publishers:
            p.close()


def test_sharded_options_are_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIGHTCAST_SECRET", "s" * 64)
    with pytest.raises(weightcast.InvalidArgumentError, match="need a coordinator"):
        weightcast.Publisher(tmp_path / "a", "policy", rank=0, world=2, writer_id="t",
                             coordinator=None)
    with pytest.raises(weightcast.InvalidArgumentError, match="writer id"):
        weightcast.Publisher(tmp_path / "b", "policy", coordinator="127.0.0.1:1", rank=0,
                             world=2, connect_timeout=1)
    with pytest.raises(weightcast.InvalidArgumentError, match="rank 2 of world 2"):
        weightcast.Publisher(tmp_path / "c", "policy", coordinator="127.0.0.1:1", rank=2,
                             world=2, writer_id="t", connect_timeout=1)


def test_a_subset_sampler_receives_only_its_slices(cluster, tmp_path):  # noqa: F811
    """Subscriber(..., tensors=[...]): the agent fetches rank 0's slices only and commits each
    version partial; its Version offers only those, and reading another is a clear error."""
    address, secret_file = cluster

    def state_of(step):  # a matrix big enough that a rank's rows span several chunks
        state = full_state(step)
        torch.manual_seed(2)
        state["big.weight"] = torch.randn(2048, 128)
        state["big.weight"][(step * 13) % 2048, :] += 1.0
        return state

    publishers = ranks(tmp_path, address, secret_file)
    whole = weightcast.Subscriber(tmp_path / "whole", "policy", coordinator=address,
                                  secret_file=secret_file)
    subset = weightcast.Subscriber(tmp_path / "subset", "policy", coordinator=address,
                                   secret_file=secret_file, tensors=["*#0"])
    try:
        for step in (1, 2):
            state, version = publish_step(publishers, step, state_of)
            assert whole.wait(min_version=version, timeout=60).version == version
            v = subset.wait(min_version=version, timeout=60)
            assert v.version == version and v.partial and v.tensor_patterns == ["*#0"]
            assert sorted(v) == ["big.weight#0", "embed.weight#0", "mlp.weight#0"]
            mine, _ = rank_part(state, 0)
            for name in ("big.weight", "embed.weight", "mlp.weight"):
                assert torch.equal(bits(v.torch(name + "#0")), bits(mine[name])), (step, name)
                with pytest.raises(weightcast.FailedPreconditionError, match="was not received"):
                    v[name]  # the whole tensor: rank 1..3's slices are not here
            with pytest.raises(weightcast.FailedPreconditionError, match="was not received"):
                v.torch("mlp.bias")
            assert "mlp.bias" not in v
            if step == 1:  # the full version (bytes_received counts the current version's)
                got, total = subset.status()["bytes_received"], whole.status()["bytes_received"]
                assert 0 < got < total, (got, total)
    finally:
        for s in (whole, subset):
            s.close()
        for p in publishers:
            p.close()

    with pytest.raises(TypeError, match="tensors must be a list"):
        weightcast.Subscriber(tmp_path / "x", "policy", coordinator=address,
                              secret_file=secret_file, tensors="*#0")
