"""Certificate mode from Python (docs/security.md): a CA made with `weightcast ca`, a coordinator
with its own certificate, a Publisher whose key signs its versions and a Subscriber that takes only
those, over mutual TLS. A Publisher whose certificate lacks the publisher role is refused with the
reason."""

import subprocess

import pytest
import torch

import weightcast
from conftest import SMALL_CHUNK, running_coordinator


def issue(tmp_path, name, role):
    subprocess.run([weightcast.weightcast_binary(), "ca", "issue", "--dir", str(tmp_path / "ca"),
                    "--name", name, "--role", role, "--out", str(tmp_path / name)],
                   check=True, capture_output=True)
    return {"ca": tmp_path / "ca" / "ca.pem", "certificate": tmp_path / f"{name}.pem",
            "key": tmp_path / f"{name}.key"}


def test_a_certified_publisher_reaches_a_certified_subscriber(tmp_path):
    subprocess.run([weightcast.weightcast_binary(), "ca", "init", "--dir", str(tmp_path / "ca")],
                   check=True, capture_output=True)
    coordinator = issue(tmp_path, "coordinator", "coordinator")
    trainer = issue(tmp_path, "trainer", "publisher:policy")
    sampler = issue(tmp_path, "sampler", "agent")
    flags = ("--ca", str(coordinator["ca"]), "--cert", str(coordinator["certificate"]),
             "--key", str(coordinator["key"]))
    with running_coordinator(tmp_path, *flags) as c:
        weights = {"w": torch.arange(50_000, dtype=torch.float32)}
        with weightcast.Publisher(tmp_path / "pub", "policy", coordinator=c["address"],
                                  secret_file=c["secret_file"], chunk_size=SMALL_CHUNK,
                                  **trainer) as pub, \
                weightcast.Subscriber(tmp_path / "agent", "policy", coordinator=c["address"],
                                      secret_file=c["secret_file"], **sampler) as sub:
            published = pub.publish(weights, step=1)
            got = sub.wait(published.version, timeout=30)
            assert got.root == published.root
            assert torch.equal(got.torch("w"), weights["w"])
        with pytest.raises(weightcast.UnauthenticatedError, match="does not hold the publisher"):
            weightcast.Publisher(tmp_path / "pub2", "policy", coordinator=c["address"],
                                 secret_file=c["secret_file"], chunk_size=SMALL_CHUNK,
                                 writer_id="other", **sampler)
