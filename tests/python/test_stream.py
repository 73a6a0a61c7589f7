"""Loading while downloading: sub.stream(v) hands each tensor over once every chunk of it is
verified, before the version is committed; the loop then waits for the commit or ends with the
abort's reason; bytes a corrupt peer sent are never handed over."""

import subprocess
import threading
import time

import pytest
import torch

import weightcast
from conftest import SMALL_CHUNK, running_coordinator


def model(seed, layers=8, width=256):
    torch.manual_seed(seed)
    return {f"layers.{i}.weight": torch.randn(width, width).to(torch.bfloat16)
            for i in range(layers)}


@pytest.fixture
def coordinator(tmp_path, request):
    with running_coordinator(tmp_path, *getattr(request, "param", ())) as c:
        yield c["address"], c["secret_file"]


def test_a_committed_version_streams_at_once_in_the_order_asked(tmp_path):
    weights = model(1)
    with weightcast.Publisher(tmp_path / "store", "policy", chunk_size=SMALL_CHUNK) as pub:
        pub.publish(weights)
    sub = weightcast.Subscriber(tmp_path / "store", "policy")
    order = ["layers.5.weight", "layers.0.weight"]
    stream = sub.stream(1, order=order)
    assert stream.committed and len(stream) == len(weights)
    got = list(stream)
    assert [name for name, _ in got[:2]] == order
    assert sorted(name for name, _ in got) == sorted(weights)
    for name, tensor in got:
        assert torch.equal(tensor, weights[name]), name
    assert stream.wait_committed() == 1
    raw = dict(sub.stream(1, numpy=True))
    assert not raw["layers.1.weight"].flags.writeable
    with pytest.raises(weightcast.InvalidArgumentError, match="layers.99"):
        sub.stream(1, order=["layers.99.weight"])
    with pytest.raises(weightcast.DeadlineExceededError):
        sub.stream(2, timeout=0.2)


def test_tensors_arrive_before_the_commit_and_equal_what_was_published(coordinator, tmp_path):
    address, secret_file = coordinator
    weights = model(2, layers=16, width=512)  # 8 MiB: seconds at 2 MiB/s
    with weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=address,
                              secret_file=secret_file, chunk_size=SMALL_CHUNK) as pub, \
            weightcast.Subscriber(tmp_path / "sampler", "policy", coordinator=address,
                                  secret_file=secret_file, download_limit="2MiB") as sub:
        arrivals = []
        errors = []

        def read():
            try:
                stream = sub.stream(1, order=[f"layers.{i}.weight" for i in range(16)],
                                    timeout=60)
                for name, tensor in stream:
                    arrivals.append((time.monotonic(), name, tensor.clone(), stream.committed))
                arrivals.append((time.monotonic(), "committed", stream.wait_committed(), None))
            except Exception as e:  # reported below
                errors.append(e)

        reader = threading.Thread(target=read)
        reader.start()  # before the version exists: the stream waits for it
        time.sleep(0.3)
        pub.publish(weights, step=1)
        reader.join(timeout=90)
        assert not errors, errors
        names = [name for _, name, _, _ in arrivals[:-1]]
        assert names == [f"layers.{i}.weight" for i in range(16)], "in the order asked"
        for _, name, tensor, _ in arrivals[:-1]:
            assert torch.equal(tensor, weights[name]), name
        assert arrivals[-1][1] == "committed" and arrivals[-1][2] == 1
        assert arrivals[0][3] is False, "the first tensor came before the commit"
        spread = arrivals[-2][0] - arrivals[0][0]
        assert spread > 1.0, f"tensors came {spread:.2f} s apart: not while downloading"


@pytest.mark.parametrize("coordinator", [("--prepare-deadline", "2s")], indirect=True)
def test_an_aborted_version_ends_the_stream_with_its_reason(coordinator, tmp_path):
    address, secret_file = coordinator
    weights = model(3, layers=16, width=512)  # 8 MiB at 1 MiB/s: misses the 2 s deadline
    with weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=address,
                              secret_file=secret_file, chunk_size=SMALL_CHUNK) as pub, \
            weightcast.Subscriber(tmp_path / "sampler", "policy", coordinator=address,
                                  secret_file=secret_file, download_limit="1MiB") as sub:
        pub.publish_async(weights, step=1)
        stream = sub.stream(1, timeout=60)
        handed = []
        with pytest.raises(weightcast.AbortedError, match="deadline"):
            for name, _ in stream:
                handed.append(name)
            stream.wait_committed()
        assert not stream.committed
        assert len(handed) < len(weights)


def test_bytes_from_a_corrupt_peer_are_never_handed_over(coordinator, tmp_path):
    address, secret_file = coordinator
    weights = model(4, layers=16, width=512)
    agent_log = open(tmp_path / "corrupt.log", "wb")
    corrupt = subprocess.Popen(
        [weightcast.weightcast_binary(), "agent", "--store", str(tmp_path / "corrupt"),
         "--channel", "policy", "--coordinator", address, "--secret-file", secret_file,
         "--listen", "127.0.0.1:0", "--corrupt-uploads-for-testing"],
        stdout=agent_log, stderr=subprocess.STDOUT)
    try:
        with weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=address,
                                  secret_file=secret_file, chunk_size=SMALL_CHUNK) as pub:
            pub.publish(weights, step=1)  # the corrupt agent holds v1 too once it commits
            deadline = time.monotonic() + 60
            while not (tmp_path / "corrupt" / "policy" / "current").exists():
                assert time.monotonic() < deadline, (tmp_path / "corrupt.log").read_text()
                time.sleep(0.1)
            with weightcast.Subscriber(tmp_path / "late", "policy", coordinator=address,
                                       secret_file=secret_file) as sub:
                got = {name: tensor.clone() for name, tensor in sub.stream(1, timeout=60)}
                assert sub.status()["chunks_failed"] > 0, "the corrupt peer served no chunk"
        assert sorted(got) == sorted(weights)
        for name, tensor in got.items():
            assert torch.equal(tensor, weights[name]), name
    finally:
        corrupt.terminate()
        corrupt.wait(timeout=10)
        agent_log.close()


def test_the_streaming_example_loads_a_module_while_it_downloads():
    import os
    import sys
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "stream_load.py")
    run = subprocess.run([sys.executable, example, "--layers", "4", "--width", "512",
                          "--rate", "4MiB"], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "the loaded module equals the published one" in run.stdout, run.stdout
    assert "committed: False" in run.stdout, "no tensor was loaded before the commit"
