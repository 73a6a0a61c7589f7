"""The shape of the Python API: one argument order, sizes as the CLI reads them,
mistyped keywords named, and no endless wait on a path that is not a store."""

import inspect
import threading
import time

import numpy as np
import pytest

import weightcast


def _leading_parameters(cls):
    return list(inspect.signature(cls.__init__).parameters)[1:5]


def test_publisher_and_subscriber_take_the_same_argument_order(store):
    expected = ["store", "channel", "coordinator", "secret_file"]
    assert _leading_parameters(weightcast.Publisher) == expected
    assert _leading_parameters(weightcast.Subscriber) == expected
    with weightcast.Publisher(store, "policy") as pub:
        pub.publish({"a": np.arange(10, dtype=np.float32)})
        v = weightcast.Subscriber(store, "policy").wait(timeout=5)
        assert np.array_equal(v["a"], np.arange(10, dtype=np.float32))


def test_chunk_size_takes_size_strings_as_the_cli_does(store):
    with weightcast.Publisher(store, "policy", chunk_size="1MiB") as pub:
        pub.publish({"a": np.zeros(1 << 19, dtype=np.float32)})
        assert weightcast.Subscriber(store, "policy").wait(timeout=5).chunk_size == 1 << 20
    with pytest.raises(weightcast.InvalidArgumentError, match=r"chunk_size: size '12parsecs'"):
        weightcast.Publisher(store, "policy", chunk_size="12parsecs")
    with pytest.raises(TypeError, match=r"chunk_size must be a number of bytes .* not float"):
        weightcast.Publisher(store, "policy", chunk_size=1.5)


def _assert_not_a_pybind_dump(error):
    text = str(error)
    assert "incompatible" not in text and "Invoked with" not in text, text
    assert "\n" not in text, text


def test_a_mistyped_keyword_is_named_not_dumped(store, tmp_path):
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'chunk_sise' "
                                        r"\(did you mean 'chunk_size'\?\)") as info:
        weightcast.Publisher(store, "policy", chunk_sise="1MiB")
    _assert_not_a_pybind_dump(info.value)
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123456789abcdef\n")
    secret.chmod(0o600)
    with pytest.raises(TypeError, match=r"'listne' \(did you mean 'listen'\?\)") as info:
        weightcast.Subscriber(tmp_path / "agent", "policy", coordinator="127.0.0.1:1",
                              secret_file=secret, listne="127.0.0.1:0")
    _assert_not_a_pybind_dump(info.value)
    with pytest.raises(TypeError, match=r"node_id must be an int >= 0, not str") as info:
        weightcast.Subscriber(tmp_path / "agent", "policy", coordinator="127.0.0.1:1",
                              secret_file=secret, node_id="7")
    _assert_not_a_pybind_dump(info.value)
    with pytest.raises(TypeError, match=r"channel must be a str") as info:
        weightcast.Subscriber(store, 7)
    _assert_not_a_pybind_dump(info.value)


def test_rate_limits_take_size_strings():
    # The agent options go through the same converter as chunk_size.
    assert weightcast._options.size("upload_limit", "100MiB") == 100 << 20
    assert weightcast._options.size("upload_limit", "1.5GB") == 1_500_000_000
    assert weightcast._options.size("upload_limit", 4096) == 4096


def test_a_file_is_not_a_store(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"not a store")
    start = time.monotonic()
    with pytest.raises(weightcast.FailedPreconditionError, match="is not a weightcast store"):
        weightcast.Subscriber(path, "policy").wait(timeout=30)
    assert time.monotonic() - start < 1


def test_a_directory_of_other_files_is_not_a_store(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    start = time.monotonic()
    with pytest.raises(weightcast.FailedPreconditionError, match=r"no \.lock"):
        weightcast.Subscriber(tmp_path, "policy").wait(timeout=30)
    assert time.monotonic() - start < 1


def test_a_missing_store_is_an_error_within_seconds_not_a_forever_wait(tmp_path):
    sub = weightcast.Subscriber(tmp_path / "typo", "policy")
    start = time.monotonic()
    # timeout=30 only so that a regression fails instead of hanging the suite.
    with pytest.raises(weightcast.NotFoundError, match=r"no weightcast store at .*typo after 5 s"):
        sub.wait(timeout=30)
    assert time.monotonic() - start < 8


def test_a_store_created_within_the_grace_is_waited_for(tmp_path):
    # The agent may start after the sampler: a store that appears within seconds is fine.
    store = tmp_path / "late"
    sub = weightcast.Subscriber(store, "policy")

    def publish_later():
        time.sleep(1)
        with weightcast.Publisher(store, "policy") as pub:
            pub.publish({"a": np.ones(3, dtype=np.float32)})

    thread = threading.Thread(target=publish_later)
    thread.start()
    try:
        assert sub.wait(timeout=20).version == 1
    finally:
        thread.join()
