"""Samplers that stage nothing (docs/live.md): once a flipped LiveTensors attests that it holds a
version whole, the in-process agent keeps the next delta as payloads instead of decoding it and
staging the whole version; update() patches the live tensors from them, bit-identical. A failed
apply leaves the copy in use as it was, and the next version comes whole."""

import gc
import json
import os

import pytest
import torch

import weightcast
from conftest import SMALL_CHUNK, running_coordinator
from test_live import model, rl_step, same


@pytest.fixture
def coordinator(tmp_path):
    with running_coordinator(tmp_path) as c:
        yield c["address"], c["secret_file"]


def partial_record(store, version):
    path = os.path.join(store, "policy", "versions", str(version), ".weightcast-partial.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def stored_bytes(store):
    total = 0
    for root, _, files in os.walk(os.path.join(store, "policy", "versions")):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                pass  # an older version the agent's retention removes meanwhile
    return total


def test_a_flipped_sampler_keeps_deltas_as_payloads_bit_identical(coordinator, tmp_path):
    address, secret_file = coordinator
    store = str(tmp_path / "sampler")
    state = model(1)
    with weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=address,
                              secret_file=secret_file, chunk_size=SMALL_CHUNK) as pub:
        with weightcast.Subscriber(store, "policy", coordinator=address,
                                   secret_file=secret_file) as sub:
            live = weightcast.LiveTensors({n: torch.zeros_like(t) for n, t in state.items()},
                                          flip=True)
            for step in range(1, 5):
                if step > 1:
                    state = rl_step(state, step)
                pub.publish(state, step=step)
                got = sub.wait(step, timeout=30)
                report = sub.update(live, got.version)
                assert same(live.tensors, state), step
                assert report["attested"]["matches"] and report["attested"]["every_tensor"]
                record = partial_record(store, got.version)
                if step == 1:
                    assert record is None  # the first version is staged whole
                else:
                    # Kept as payloads: the store holds the header's chunk, the delta file the
                    # rest.
                    assert record is not None and record["payloads"] is True, record
                    assert record["chunks"] == [0], record
                    assert report["delta"] and report["chunks_repaired"] == 0, report
            # Two kept versions of payloads take far less than one whole version.
            model_bytes = sum(t.numel() * t.element_size() for t in state.values())
            assert stored_bytes(store) < model_bytes / 2

        # A new sampler process starts without the live tensors: the payload versions are
        # forgotten, the current one is fetched whole. (The store is free once the first
        # Subscriber is gone.)
        del sub, live
        gc.collect()
        with weightcast.Subscriber(store, "policy", coordinator=address,
                                   secret_file=secret_file) as sub:
            got = sub.wait(4, timeout=30)
            assert partial_record(store, got.version) is None
            live = weightcast.LiveTensors({n: torch.zeros_like(t) for n, t in state.items()},
                                          flip=True)
            sub.update(live, got.version)
            assert same(live.tensors, state)


def test_in_place_or_a_subset_stages_as_before(coordinator, tmp_path):
    address, secret_file = coordinator
    store = str(tmp_path / "sampler")
    state = model(2)
    with weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=address,
                              secret_file=secret_file, chunk_size=SMALL_CHUNK) as pub, \
            weightcast.Subscriber(store, "policy", coordinator=address,
                                  secret_file=secret_file) as sub:
        in_place = weightcast.LiveTensors({n: torch.zeros_like(t) for n, t in state.items()})
        some = weightcast.LiveTensors({"embed": torch.zeros_like(state["embed"])}, flip=True)
        for step in range(1, 4):
            if step > 1:
                state = rl_step(state, step)
            pub.publish(state, step=step)
            got = sub.wait(step, timeout=30)
            sub.update(in_place, got.version)
            report = sub.update(some, got.version)
            assert not report["attested"]["every_tensor"]
            assert same(in_place.tensors, state)
            assert partial_record(store, got.version) is None, step


def test_a_failed_apply_keeps_the_copy_in_use_and_the_next_version_comes_whole(coordinator,
                                                                                 tmp_path):
    address, secret_file = coordinator
    store = str(tmp_path / "sampler")
    state = model(3)
    with weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=address,
                              secret_file=secret_file, chunk_size=SMALL_CHUNK) as pub, \
            weightcast.Subscriber(store, "policy", coordinator=address,
                                  secret_file=secret_file) as sub:
        live = weightcast.LiveTensors({n: torch.zeros_like(t) for n, t in state.items()},
                                      flip=True)
        for step in (1, 2):
            if step > 1:
                state = rl_step(state, step)
            pub.publish(state, step=step)
            sub.update(live, sub.wait(step, timeout=30).version)
        assert partial_record(store, 2)["payloads"] is True

        # The engine wrote into the weights in use after they were attested: the next delta
        # does not patch onto them, and this store has no whole chunks of it to copy.
        live.tensors["proj"].view(torch.int16)[299, 300] += 7  # far from the header's chunk
        in_use = {n: t.clone() for n, t in live.tensors.items()}
        state = rl_step(state, 3)
        pub.publish(state, step=3)
        got = sub.wait(3, timeout=30)
        assert partial_record(store, 3)["payloads"] is True
        with pytest.raises(weightcast.CorruptError, match="does not match its manifest"):
            sub.update(live, got.version)
        assert same(live.tensors, in_use)  # no flip: the copy in use is as it was

        # No live base any more: v4 is staged whole and the update copies what differs.
        state = rl_step(state, 4)
        pub.publish(state, step=4)
        got = sub.wait(4, timeout=30)
        assert partial_record(store, 4) is None
        report = sub.update(live, got.version)
        assert same(live.tensors, state)
        assert report["attested"]["matches"]
