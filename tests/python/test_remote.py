"""Publisher -> coordinator -> in-process agent -> Subscriber, on loopback."""

import os
import secrets
import time

import numpy as np
import pytest
import torch

import weightcast
from conftest import SMALL_CHUNK, running_coordinator


@pytest.fixture
def cluster(tmp_path):
    """A coordinator on 127.0.0.1 (port 0) and a secret file; yields (address, secret_file)."""
    with running_coordinator(tmp_path) as c:
        yield c["address"], c["secret_file"]


def policy_weights(seed, n=200_000):
    torch.manual_seed(seed)
    return {"layer.weight": torch.randn(n // 100, 100).to(torch.bfloat16),
            "layer.bias": torch.randn(100).to(torch.bfloat16),
            "steps": np.array([seed], dtype=np.int64)}


def test_publish_and_subscribe_round_trip(cluster, tmp_path):
    address, secret_file = cluster
    weights = policy_weights(1)
    with weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=address,
                              secret_file=secret_file, chunk_size=SMALL_CHUNK) as pub, \
            weightcast.Subscriber(tmp_path / "agent", "policy", coordinator=address,
                                  secret_file=secret_file) as sub:
        first = pub.publish(weights, step=1)
        assert first.version == 1 and first.wire_bytes == first.total_bytes  # full version
        v1 = sub.wait(1, timeout=30)
        assert v1.root == first.root and v1.step == 1
        for name, value in weights.items():
            if isinstance(value, torch.Tensor):
                got = v1.torch(name)
                assert torch.equal(got.view(torch.int16), value.view(torch.int16)), name
            else:
                assert np.array_equal(v1[name], value)

        # An RL-like step: a few elements change; the delta is small and changed() finds them.
        weights2 = {k: (v.clone() if isinstance(v, torch.Tensor) else v.copy())
                    for k, v in weights.items()}
        weights2["layer.weight"][1500, :] += 1.0  # 300 KB in: not the first chunk
        second = pub.publish(weights2, step=2)
        assert second.version == 2
        assert second.wire_bytes < second.total_bytes / 4
        v2 = sub.wait(2, timeout=30)
        assert torch.equal(v2.torch("layer.weight").view(torch.int16),
                           weights2["layer.weight"].view(torch.int16))
        changes = dict(sub.changed(v1))
        assert list(changes) == ["layer.weight"]
        (begin, end), = changes["layer.weight"]
        row = 1500 * 100 * 2  # bytes before row 1500
        assert begin <= row and row + 200 <= end and end - begin <= SMALL_CHUNK
        status = pub.status()
        assert status["version"] == 2 and status["address"].startswith("127.0.0.1:")
        assert sub.status()["current_version"] == 2


def test_wrong_secret_gets_nothing(cluster, tmp_path):
    address, secret_file = cluster
    wrong = tmp_path / "wrong"
    wrong.write_text(secrets.token_hex(32))
    with weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=address,
                              secret_file=secret_file, chunk_size=SMALL_CHUNK) as pub:
        pub.publish(policy_weights(1), step=1)
        with pytest.raises(weightcast.Error):
            with weightcast.Subscriber(tmp_path / "agent", "policy", coordinator=address,
                                       secret_file=str(wrong)) as sub:
                sub.wait(1, timeout=3)
    assert not os.path.exists(tmp_path / "agent" / "policy" / "current")


def test_a_failed_agent_is_raised_by_wait(cluster, tmp_path):
    address, secret_file = cluster
    store = tmp_path / "agent"
    with weightcast.Subscriber(store, "policy", coordinator=address,
                               secret_file=secret_file) as first:
        # The first agent holds the store once it listens (Run opens the store first).
        deadline = time.monotonic() + 20
        while not first.status()["address"]:
            assert time.monotonic() < deadline, "the first agent did not start"
            time.sleep(0.02)
        # A second agent on the same store cannot take its lock: its wait() says so at once
        # instead of timing out.
        with weightcast.Subscriber(store, "policy", coordinator=address,
                                   secret_file=secret_file) as second:
            start = time.monotonic()
            with pytest.raises(weightcast.UnavailableError, match="in-process agent.*in use"):
                second.wait(timeout=20)
            assert time.monotonic() - start < 10
            assert second.status()["running"] is False
        assert first.status()["running"] is True


def test_transport_can_be_chosen_and_is_checked(cluster, tmp_path):
    address, secret_file = cluster
    weights = policy_weights(3)
    # Over TCP on both sides (UCX, when built, is the default "auto").
    with weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=address,
                              secret_file=secret_file, chunk_size=SMALL_CHUNK,
                              transport="tcp") as pub, \
            weightcast.Subscriber(tmp_path / "agent", "policy", coordinator=address,
                                  secret_file=secret_file, transport="tcp") as sub:
        pub.publish(weights, step=1)
        assert sub.wait(1, timeout=30).step == 1
        assert ",ucx=" not in pub.status()["address"]
    with pytest.raises(weightcast.InvalidArgumentError, match="auto, ucx, tcp"):
        weightcast.Subscriber(tmp_path / "agent2", "policy", coordinator=address,
                              secret_file=secret_file, transport="rdma")
    with pytest.raises(TypeError, match="transport"):
        weightcast.Subscriber(tmp_path / "agent3", "policy", coordinator=address,
                              secret_file=secret_file, transport=1)


def test_agent_options_are_checked(cluster, tmp_path):
    address, secret_file = cluster
    with pytest.raises(weightcast.InvalidArgumentError, match="log_level"):
        weightcast.Subscriber(tmp_path / "agent", "policy", coordinator=address,
                              secret_file=secret_file, log_level="loud")
    with pytest.raises(weightcast.InvalidArgumentError, match="secret file .*missing"):
        weightcast.Subscriber(tmp_path / "agent", "policy", coordinator=address,
                              secret_file=str(tmp_path / "missing"))


def test_publish_async_through_a_coordinator(cluster, tmp_path):
    address, secret_file = cluster
    weights = policy_weights(3)
    with weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=address,
                              secret_file=secret_file, chunk_size=SMALL_CHUNK) as pub, \
            weightcast.Subscriber(tmp_path / "agent", "policy", coordinator=address,
                                  secret_file=secret_file) as sub:
        handle = pub.publish_async(weights, step=1)
        weights["layer.weight"].fill_(0)  # the copy was taken before publish_async returned
        handle.wait_until("replicated", timeout=30)
        result = handle.wait()
        assert result.version == 1 and result.wire_bytes == result.total_bytes
        v = sub.wait(1, timeout=30)
        assert v.root == result.root
        assert torch.equal(v.torch("layer.weight").view(torch.int16),
                           policy_weights(3)["layer.weight"].view(torch.int16))


# A wrong secret, an unreachable coordinator or a store path that is not a store is its
# own error within seconds, not a DeadlineExceededError at the end of a timeout.

def test_a_wrong_secret_is_unauthenticated_within_seconds(cluster, tmp_path):
    address, _ = cluster
    wrong = tmp_path / "wrong"
    wrong.write_text(secrets.token_hex(32))
    start = time.monotonic()
    with pytest.raises(weightcast.UnauthenticatedError, match="wrong cluster secret"):
        weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=address,
                             secret_file=str(wrong))
    assert time.monotonic() - start < 5
    with weightcast.Subscriber(tmp_path / "agent", "policy", coordinator=address,
                               secret_file=str(wrong), log_level="error",
                               log_file=tmp_path / "agent.log") as sub:
        start = time.monotonic()
        with pytest.raises(weightcast.UnauthenticatedError, match="wrong cluster secret"):
            sub.wait(1, timeout=30)
        assert time.monotonic() - start < 5
        assert sub.status()["error"].startswith("UNAUTHENTICATED: ")


def test_an_unreachable_coordinator_is_unavailable_within_seconds(tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_text(secrets.token_hex(32))
    secret_file.chmod(0o600)
    nobody = "127.0.0.1:1"  # nothing listens there: every connect is refused
    start = time.monotonic()
    with pytest.raises(weightcast.UnavailableError, match="127.0.0.1:1"):
        weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=nobody,
                             secret_file=str(secret_file))  # default connect_timeout: 5 s
    assert time.monotonic() - start < 10
    with weightcast.Subscriber(tmp_path / "agent", "policy", coordinator=nobody,
                               secret_file=str(secret_file), connect_timeout=1,
                               log_file=tmp_path / "agent.log") as sub:
        start = time.monotonic()
        with pytest.raises(weightcast.UnavailableError, match="has not reached the coordinator"):
            sub.wait(1, timeout=30)
        assert time.monotonic() - start < 5
        assert sub.status()["error"].startswith("UNAVAILABLE: ")


def test_a_store_path_that_is_not_a_store_is_a_failed_precondition(cluster, tmp_path):
    address, secret_file = cluster
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    with pytest.raises(weightcast.FailedPreconditionError, match="not a weightcast store"):
        weightcast.Publisher(home, "policy", coordinator=address, secret_file=secret_file)
    with pytest.raises(weightcast.FailedPreconditionError, match="not a weightcast store"):
        weightcast.Publisher(home, "policy")
    with pytest.raises(weightcast.FailedPreconditionError, match="not a weightcast store"):
        weightcast.Subscriber(home, "policy", coordinator=address, secret_file=secret_file)
    start = time.monotonic()
    with pytest.raises(weightcast.FailedPreconditionError, match="not a weightcast store"):
        weightcast.Subscriber(home, "policy").wait(timeout=30)
    assert time.monotonic() - start < 5
    assert not (home / ".lock").exists()


def test_live_tensors_follow_an_in_process_agent_from_its_delta_payloads(cluster, tmp_path):
    """An agent that received a version as delta payloads keeps them beside its store, so
    update() patches the live tensors instead of copying the chunks that changed."""
    address, secret_file = cluster
    weights = policy_weights(3)
    with weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=address,
                              secret_file=secret_file, chunk_size=SMALL_CHUNK) as pub, \
            weightcast.Subscriber(tmp_path / "agent", "policy", coordinator=address,
                                  secret_file=secret_file) as sub:
        live = weightcast.LiveTensors({k: (torch.zeros_like(v) if isinstance(v, torch.Tensor)
                                           else np.zeros_like(v)) for k, v in weights.items()})
        pub.publish(weights, step=1)
        sub.wait(1, timeout=30)
        assert not sub.update(live)["delta"]
        for step in range(2, 4):
            weights = {k: (v.clone() if isinstance(v, torch.Tensor) else v + 1)
                       for k, v in weights.items()}
            bits = weights["layer.weight"].view(torch.int16)
            bits[::37, ::11] += 1  # ~0.25% of the elements
            pub.publish(weights, step=step)
            sub.wait(step, timeout=30)
            report = sub.update(live)
            assert report["delta"], report["note"]
            assert report["copied_bytes"] == 0 and report["chunks_repaired"] == 0
            assert torch.equal(live.tensors["layer.weight"].view(torch.int16), bits)
            assert np.array_equal(live.tensors["steps"], weights["steps"])


def test_a_late_subscriber_says_that_no_live_node_holds_the_version(cluster, tmp_path):
    address, secret_file = cluster
    with weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=address,
                              secret_file=secret_file, chunk_size=SMALL_CHUNK) as pub:
        pub.publish(policy_weights(1))
    # The only holder is gone: the late subscriber's agent has a target and nobody to fetch from.
    with weightcast.Subscriber(tmp_path / "late", "policy", coordinator=address,
                               secret_file=secret_file) as sub:
        deadline = time.monotonic() + 20
        status = sub.status()
        while "no live node holds v1" not in status["waiting"] and time.monotonic() < deadline:
            time.sleep(0.1)
            status = sub.status()
        assert "no live node holds v1" in status["waiting"], status
        with pytest.raises(weightcast.DeadlineExceededError):
            sub.wait(1, timeout=0.5)
