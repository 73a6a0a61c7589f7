"""Shared fixtures. ctest runs these against the installed package (tests/python/installed.sh);
PYTHONPATH=build/<preset>/python runs them against a build tree."""

import contextlib
import re
import secrets
import subprocess
import time

import pytest

import weightcast

# The smallest chunk the manifest allows: small test models still span several chunks, so
# changed() and deltas are exercised at chunk granularity.
SMALL_CHUNK = weightcast._weightcast.MIN_CHUNK_SIZE


@pytest.fixture
def store(tmp_path):
    return tmp_path / "store"


@pytest.fixture
def local_publisher(store):
    publisher = weightcast.Publisher(store, "policy", chunk_size=SMALL_CHUNK)
    yield publisher
    publisher.close()


@contextlib.contextmanager
def running_coordinator(tmp_path, *flags):
    """A `weightcast coordinator` on 127.0.0.1 (port 0) with a fresh secret file and `flags`;
    yields a dict: address, secret_file, log (its path) and page (the fleet page's URL when
    flags include --metrics, else None). Stopped on exit."""
    secret_file = tmp_path / "secret"
    secret_file.write_text(secrets.token_hex(32))
    secret_file.chmod(0o600)
    address_file = tmp_path / "coordinator.addr"
    log_path = tmp_path / "coordinator.log"
    log = open(log_path, "wb")
    process = subprocess.Popen(
        [weightcast.weightcast_binary(), "coordinator", "--listen", "127.0.0.1:0",
         "--state-dir", str(tmp_path / "coordinator"), "--address-file", str(address_file),
         "--secret-file", str(secret_file), *flags], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        page = None
        while not address_file.exists() or ("--metrics" in flags and page is None):
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "coordinator not up in 30 s: " + log_path.read_text()
            found = re.search(r"serving the fleet page address=(http://[0-9.:]+/)",
                              log_path.read_text())
            page = found.group(1) if found else None
            time.sleep(0.02)
        yield {"address": address_file.read_text().strip(), "secret_file": str(secret_file),
               "log": log_path, "page": page}
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
