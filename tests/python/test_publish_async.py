"""Publisher.publish_async: the snapshot (copy or not), the order, the handle, close(), and a
caller that exits right after the call."""

import subprocess
import sys
import textwrap
import time
import weakref

import numpy as np
import pytest
import torch

import weightcast
from conftest import SMALL_CHUNK


def test_the_handle_returns_what_publish_returns(store, local_publisher):
    handle = local_publisher.publish_async({"w": np.arange(1000, dtype=np.float32)}, step=4)
    assert isinstance(handle, weightcast.PublishHandle)
    result = handle.wait(timeout=30)
    assert handle.done()
    assert isinstance(result, weightcast.PublishResult)
    assert result.version == 1 and result.step == 4 and result.wire_bytes is None
    assert result.seconds >= 0
    v = weightcast.Subscriber(store, "policy").wait(1, timeout=5)
    assert v.root == result.root and v.step == 4
    assert np.array_equal(v["w"], np.arange(1000, dtype=np.float32))


def test_a_copy_is_not_affected_by_changes_right_after_the_call(store, local_publisher):
    weights = {"big": np.full(4_000_000, 1.0, dtype=np.float32),  # 16 MB: a publish takes a while
               "bf16": torch.ones(1000, dtype=torch.bfloat16)}
    handle = local_publisher.publish_async(weights, step=1)
    weights["big"][:] = 2.0  # at once, in place
    weights["bf16"].fill_(3.0)
    handle.wait(timeout=60)
    v = weightcast.Subscriber(store, "policy").wait(1, timeout=5)
    assert np.all(v["big"] == 1.0)
    assert torch.equal(v.torch("bf16"), torch.ones(1000, dtype=torch.bfloat16))


def test_without_a_copy_the_handle_keeps_the_tensors_alive(store, local_publisher):
    tensor = torch.full((100_000,), 5.0)
    alive = weakref.ref(tensor)
    handle = local_publisher.publish_async({"w": tensor}, step=1, copy=False)
    del tensor  # the publish holds the last reference until it is done
    result = handle.wait(timeout=30)
    assert result.version == 1
    assert alive() is None  # released once done
    v = weightcast.Subscriber(store, "policy").wait(1, timeout=5)
    assert np.all(v["w"] == 5.0)


def test_publishes_run_in_submission_order(store):
    with weightcast.Publisher(store, "policy", chunk_size=SMALL_CHUNK, keep_versions=8) as pub:
        handles = [pub.publish_async({"w": np.full(200_000, step, dtype=np.float32)}, step=step)
                   for step in range(5)]
        blocking = pub.publish({"w": np.zeros(200_000, dtype=np.float32)}, step=99)
        assert blocking.version == 6  # queued behind the five
        assert all(h.done() for h in handles)
        assert [h.wait().version for h in handles] == [1, 2, 3, 4, 5]
        assert [h.wait().step for h in handles] == [0, 1, 2, 3, 4]


def test_close_waits_for_queued_publishes_or_aborts_them(store):
    pub = weightcast.Publisher(store, "policy", chunk_size=SMALL_CHUNK)
    for step in range(3):
        pub.publish_async({"w": np.full(500_000, step, dtype=np.float32)}, step=step)  # dropped
    pub.close()
    v = weightcast.Subscriber(store, "policy").wait(timeout=5)
    assert v.version == 3 and v.step == 2

    pub = weightcast.Publisher(store, "policy", chunk_size=SMALL_CHUNK)
    handles = [pub.publish_async({"w": np.full(500_000, step, dtype=np.float32)}, step=step)
               for step in range(20)]
    pub.close(abort_pending=True)
    outcomes = []
    for h in handles:
        assert h.done()
        try:
            outcomes.append(h.wait().version)
        except weightcast.AbortedError as e:
            assert "closed before this publish started" in str(e)
            outcomes.append(None)
    assert outcomes[-1] is None
    done = [v for v in outcomes if v is not None]
    assert outcomes[:len(done)] == done  # the ones that ran came first, in order
    with pytest.raises(weightcast.FailedPreconditionError, match="closed"):
        pub.publish_async({"w": np.zeros(3)})


def test_arguments_are_checked_at_the_call(local_publisher):
    with pytest.raises(weightcast.InvalidArgumentError, match="non-empty"):
        local_publisher.publish_async({})
    with pytest.raises(weightcast.InvalidArgumentError, match="step"):
        local_publisher.publish_async({"x": np.zeros(3)}, step="7")
    with pytest.raises(TypeError, match="copy"):
        local_publisher.publish_async({"x": np.zeros(3)}, copy="no")
    handle = local_publisher.publish_async({"x": np.zeros(3)})
    with pytest.raises(weightcast.FailedPreconditionError, match="local publisher"):
        handle.wait_until("replicated", timeout=10)
    with pytest.raises(weightcast.InvalidArgumentError, match="timeout"):
        handle.wait(timeout=-1)


@pytest.mark.parametrize("copy", [True, False])
@pytest.mark.parametrize("scope", ["function", "module"])
def test_a_caller_that_returns_at_once_still_commits_the_version(store, copy, scope):
    """The process returns from main right after publish_async, without close() and without
    keeping the handle. Defined behaviour: the publish completes and the exit is clean. A
    publisher that goes out of scope waits for its queue as it is destroyed; one still referenced
    at exit (a module global) is closed by the module's atexit hook, before the interpreter
    finalizes."""
    body = textwrap.dedent(f"""
        pub = weightcast.Publisher({str(store)!r}, "policy", chunk_size={SMALL_CHUNK})
        weights = {{"w": np.full(2_000_000, 7.0, dtype=np.float32)}}
        pub.publish_async(weights, step=3, copy={copy})
    """)
    if scope == "function":
        body = "def main():\n" + textwrap.indent(body, "    ") + "\nmain()\n"
    script = "import numpy as np\nimport weightcast\n" + body
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert time.monotonic() - start < 60
    v = weightcast.Subscriber(store, "policy").wait(1, timeout=5)
    assert v.step == 3 and np.all(v["w"] == 7.0)
