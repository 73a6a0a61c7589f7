"""One writer per channel: a second Publisher on a channel is refused at once naming
the holder; take_over=True fences the old one; a Publisher made again on the same store is the
same writer and continues the delta chain."""

import time

import pytest
import torch

import weightcast
from conftest import SMALL_CHUNK
from test_remote import cluster, policy_weights  # noqa: F401 - the fixture


def remote(store, address, secret_file, **options):
    return weightcast.Publisher(store, "policy", coordinator=address, secret_file=secret_file,
                                chunk_size=SMALL_CHUNK, **options)


def step(weights, seed):
    out = {k: (v.clone() if isinstance(v, torch.Tensor) else v.copy()) for k, v in weights.items()}
    out["layer.weight"][seed % 1000, :] += 1.0
    return out


def test_second_writer_is_refused_naming_the_holder(cluster, tmp_path):  # noqa: F811
    address, secret_file = cluster
    with remote(tmp_path / "a", address, secret_file) as a:
        a.publish(policy_weights(1), step=1)
        writer_a = (tmp_path / "a" / ".writer-id").read_text().strip()
        start = time.monotonic()
        with pytest.raises(weightcast.FailedPreconditionError) as refused:
            remote(tmp_path / "b", address, secret_file)
        assert time.monotonic() - start < 5
        message = str(refused.value)
        assert "channel policy already has a writer: writer " + writer_a in message, message
        assert "take_over=True" in message
        # The holder is unaffected.
        assert a.publish(step(policy_weights(1), 2), step=2).version == 2


def test_take_over_fences_the_old_writer(cluster, tmp_path):  # noqa: F811
    address, secret_file = cluster
    a = remote(tmp_path / "a", address, secret_file)
    try:
        weights = policy_weights(1)
        a.publish(weights, step=1)
        with remote(tmp_path / "b", address, secret_file, take_over=True) as b:
            r = b.publish(step(weights, 2), step=2)
            assert r.version == 2 and r.wire_bytes == r.total_bytes  # its store has no base
            writer_b = (tmp_path / "b" / ".writer-id").read_text().strip()
            with pytest.raises(weightcast.FailedPreconditionError) as fenced:
                a.publish(step(weights, 3), step=3)
            assert "fenced by writer " + writer_b in str(fenced.value), str(fenced.value)
            # And it stays fenced.
            with pytest.raises(weightcast.FailedPreconditionError):
                a.publish_async(step(weights, 4), step=4).wait(timeout=30)
            assert b.publish(step(weights, 5), step=5).version == 3
    finally:
        a.close()


def test_same_store_again_continues_the_delta_chain(cluster, tmp_path):  # noqa: F811
    address, secret_file = cluster
    weights = policy_weights(1)
    with remote(tmp_path / "a", address, secret_file) as a:
        assert a.publish(weights, step=1).version == 1
    with remote(tmp_path / "a", address, secret_file) as again:
        r = again.publish(step(weights, 2), step=2)
        assert r.version == 2
        assert r.wire_bytes < r.total_bytes / 4  # a delta on v1


def test_writer_options_are_checked(tmp_path):
    with pytest.raises(TypeError, match="take_over must be a bool"):
        weightcast.Publisher(tmp_path / "a", "policy", coordinator="127.0.0.1:1",
                             take_over="yes")
    with pytest.raises(TypeError, match="writer_id must be a str"):
        weightcast.Publisher(tmp_path / "a", "policy", coordinator="127.0.0.1:1", writer_id=3)
