"""Installed weights attested: after each update a sampler hashes its live tensors against the
version and reports the digest through its in-process agent; the coordinator says, in `weightcast
status`, on /metrics and on the fleet page, which nodes serve exactly the committed bytes, and
names the one whose weights changed behind the apply."""

import json
import os
import re
import shutil
import subprocess
import time
import urllib.request

import pytest
import torch

import weightcast
from conftest import SMALL_CHUNK, running_coordinator


@pytest.fixture
def coordinator(tmp_path):
    """A coordinator with its fleet page; yields (address, secret_file, page URL, log path)."""
    with running_coordinator(tmp_path, "--metrics", "127.0.0.1:0") as c:
        yield c["address"], c["secret_file"], c["page"], c["log"]


def weights(seed):
    torch.manual_seed(seed)
    return {"layer.weight": torch.randn(1024, 256).to(torch.bfloat16),
            "layer.bias": torch.randn(256).to(torch.bfloat16)}


def fleet(address, secret_file):
    out = subprocess.run([weightcast.weightcast_binary(), "status", "--coordinator", address,
                          "--secret-file", secret_file, "--once", "--json"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return json.loads(out)


def verdict_of(status, node_id):
    for node in status.get("nodes", []):
        if int(node["node_id"]) == node_id:
            for channel in node.get("channels", []):
                if channel.get("channel") == "policy" and "attestation" in channel:
                    a = channel["attestation"]
                    return int(a.get("version", 0)), a.get("verdict", "ATTESTATION_UNCHECKED")
    return None


def wait_for_verdict(address, secret_file, node_id, want, deadline_s=20):
    deadline = time.monotonic() + deadline_s
    got = None
    while time.monotonic() < deadline:
        got = verdict_of(fleet(address, secret_file), node_id)
        if got == want:
            return
        time.sleep(0.1)
    pytest.fail(f"node {node_id} attested {got}, want {want}")


def test_a_sampler_attests_its_live_weights_and_a_changed_one_is_named(coordinator, tmp_path):
    address, secret_file, page, log_path = coordinator
    with weightcast.Publisher(tmp_path / "publisher", "policy", coordinator=address,
                              secret_file=secret_file, chunk_size=SMALL_CHUNK) as pub, \
            weightcast.Subscriber(tmp_path / "sampler", "policy", coordinator=address,
                                  secret_file=secret_file) as sub:
        live = weightcast.LiveTensors({n: torch.zeros_like(t) for n, t in weights(0).items()})
        for step in (1, 2):
            pub.publish(weights(step), step=step)
            got = sub.wait(step, timeout=30)
            report = sub.update(live, got.version)
            attested = report["attested"]
            assert attested["version"] == got.version
            assert attested["matches"], attested
            assert re.fullmatch(r"[0-9a-f]{32}", attested["digest"])
        node_id = sub.status()["node_id"]
        wait_for_verdict(address, secret_file, node_id, (2, "ATTESTATION_MATCH"))
        text = subprocess.run([weightcast.weightcast_binary(), "status", "--coordinator", address,
                               "--secret-file", secret_file, "--once"],
                              capture_output=True, text=True, timeout=30, check=True).stdout
        assert "attested: 1 serve exactly the published bytes of v2" in text, text

        # The engine writes into its weights after the apply (a silent NaN, a stray kernel).
        live.tensors["layer.weight"][3, 7] = float("nan")
        changed = sub.attest(live)
        assert changed["version"] == 2 and not changed["matches"]
        assert changed["digest"] != attested["digest"]
        wait_for_verdict(address, secret_file, node_id, (2, "ATTESTATION_MISMATCH"))
        text = subprocess.run([weightcast.weightcast_binary(), "status", "--coordinator", address,
                               "--secret-file", secret_file, "--once"],
                              capture_output=True, text=True, timeout=30, check=True,
                              env=dict(os.environ, COLUMNS="200")).stdout
        assert f"1 MISMATCH, live tensors differ from the committed bytes (node {node_id} v2)" \
            in text, text
        assert f"node {node_id} attests policy v2 with a digest that is not the version's" in \
            log_path.read_text()

        # /metrics counts it (the gauges follow the coordinator's sweep).
        deadline = time.monotonic() + 20
        metrics = ""
        while 'weightcast_coordinator_attested_mismatch{channel="policy"} 1' not in metrics:
            assert time.monotonic() < deadline, metrics
            metrics = urllib.request.urlopen(page + "metrics", timeout=10).read().decode()
            time.sleep(0.2)
        assert 'weightcast_coordinator_attested_match{channel="policy"} 0' in metrics

        browser = shutil.which("chromium") or shutil.which("chromium-browser")
        if browser is not None:
            dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                                  "--virtual-time-budget=2500", "--dump-dom", page],
                                 capture_output=True, text=True, timeout=90).stdout
            row = re.search(r'<tr class="node [^"]*" data-node="%d">(.*?)</tr>' % node_id, dom)
            assert row, dom[-2000:]
            assert "MISMATCH" in row.group(1), row.group(1)
            assert re.search(r'class="err attest-mismatch">1 node\(s\) serve live tensors that '
                             r'differ from the committed bytes: node %d' % node_id, dom), dom[-3000:]

        # The next update repairs the weights (the damaged chunk is copied whole) and attests.
        pub.publish(weights(3), step=3)
        got = sub.wait(3, timeout=30)
        report = sub.update(live, got.version)
        assert report["attested"]["matches"], report
        wait_for_verdict(address, secret_file, node_id, (3, "ATTESTATION_MATCH"))


def test_attest_without_a_coordinator_reports_locally_and_needs_a_version(tmp_path):
    with weightcast.Publisher(tmp_path / "store", "policy", chunk_size=SMALL_CHUNK) as pub:
        sub = weightcast.Subscriber(tmp_path / "store", "policy")
        live = weightcast.LiveTensors({n: torch.zeros_like(t) for n, t in weights(0).items()})
        with pytest.raises(weightcast.FailedPreconditionError, match="no known version"):
            sub.attest(live)
        pub.publish(weights(1))
        sub.wait(1, timeout=10)
        report = sub.update(live)
        assert report["attested"]["matches"]
        assert "attested" not in sub.update(live, attest=False)
        live.tensors["layer.bias"][0] += 1
        assert not sub.attest(live)["matches"]


def test_an_apply_that_hashed_every_chunk_is_the_attestation(tmp_path):
    """A flip's catch-up hashes every chunk it writes: update() attests from those hashes (no
    second pass, ``seconds`` 0). In place, a delta that leaves chunks unwritten is hashed again."""
    with weightcast.Publisher(tmp_path / "store", "policy", chunk_size=SMALL_CHUNK) as pub:
        sub = weightcast.Subscriber(tmp_path / "store", "policy")
        zeros = {n: torch.zeros_like(t) for n, t in weights(0).items()}
        flip = weightcast.LiveTensors(zeros, flip=True)
        in_place = weightcast.LiveTensors({n: t.clone() for n, t in zeros.items()})
        state = weights(1)
        for step in range(1, 4):
            if step > 1:
                state["layer.weight"][step, :8] += 1  # one chunk changes
            pub.publish(state)
            sub.wait(step, timeout=10)
            flipped = sub.update(flip)
            assert flipped["attested"]["matches"], step
            assert flipped["attested"]["version"] == step
            placed = sub.update(in_place)
            assert placed["attested"]["matches"], step
            if step > 1:
                assert flipped["caught_up"]
                assert flipped["attested"]["seconds"] == 0
                assert placed["attested"]["seconds"] > 0
        # The attestation is of the bytes as the apply left them: a later attest still sees a
        # change behind it.
        flip.tensors["layer.bias"][0] += 1
        assert not sub.attest(flip)["matches"]
