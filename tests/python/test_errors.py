"""C++ Status codes arrive as weightcast.Error subclasses carrying the C++ message."""

import numpy as np
import pytest

import weightcast


def test_every_error_is_a_weightcast_error_with_its_code():
    assert issubclass(weightcast.NotFoundError, weightcast.Error)
    assert weightcast.NotFoundError.code == "NOT_FOUND"
    assert weightcast.CorruptError.code == "CORRUPT"
    # Generic handlers catch the errors that have a builtin meaning.
    assert issubclass(weightcast.InvalidArgumentError, ValueError)
    assert issubclass(weightcast.DeadlineExceededError, TimeoutError)
    assert issubclass(weightcast.IoError, OSError)


def test_bad_channel_name_is_invalid_argument(store):
    with pytest.raises(weightcast.InvalidArgumentError, match="channel") as info:
        weightcast.Subscriber(store, "../escape")
    assert isinstance(info.value, ValueError)


def test_timeout_names_what_it_waited_for(store):
    sub = weightcast.Subscriber(store, "policy")
    with pytest.raises(TimeoutError, match=r"no version 4 of channel policy in store .* 0.2 s"):
        sub.wait(4, timeout=0.2)
    with pytest.raises(weightcast.InvalidArgumentError, match="timeout"):
        sub.wait(timeout=-1)


def test_a_store_in_use_is_unavailable(store, local_publisher):
    with pytest.raises(weightcast.UnavailableError, match="in use by another process"):
        weightcast.Publisher(store, "policy")


def test_bad_tensors_are_refused_before_anything_is_written(store, local_publisher):
    with pytest.raises(weightcast.InvalidArgumentError, match="tensor x"):
        local_publisher.publish({"x": [1, 2, 3]})
    with pytest.raises(weightcast.InvalidArgumentError, match="complex64"):
        local_publisher.publish({"x": np.zeros(3, dtype=np.complex64)})
    with pytest.raises(weightcast.InvalidArgumentError, match="non-empty"):
        local_publisher.publish({})
    with pytest.raises(weightcast.InvalidArgumentError, match="step"):
        local_publisher.publish({"x": np.zeros(3)}, step="7")
    # Nothing was committed by the refused calls.
    with pytest.raises(weightcast.DeadlineExceededError):
        weightcast.Subscriber(store, "policy").wait(timeout=0.1)


def test_publisher_arguments_are_checked(store):
    with pytest.raises(TypeError, match="store must be a path"):
        weightcast.Publisher(None, "policy")
    with pytest.raises(weightcast.InvalidArgumentError, match="coordinator"):
        weightcast.Subscriber(store, "policy", secret_file="/nonexistent")
    with pytest.raises(weightcast.InvalidArgumentError):
        weightcast.Publisher(store, "policy", chunk_size=100)
    with pytest.raises(weightcast.InvalidArgumentError, match="keep_versions"):
        weightcast.Publisher(store, "policy", keep_versions=0)


def test_a_damaged_version_is_corrupt(local_publisher, store):
    local_publisher.publish({"a": np.zeros(1000, dtype=np.float32)})
    sub = weightcast.Subscriber(store, "policy")
    v = sub.wait(timeout=5)
    # Someone truncates a committed file behind the store's back.
    with open(f"{v.path}/{v.files[0]}", "r+b") as f:
        f.truncate(100)
    with pytest.raises(weightcast.CorruptError, match="bytes; the manifest of version 1 says"):
        sub.wait(timeout=5)
