"""Shared fixtures. ctest runs these against the installed package (tests/python/installed.sh);
PYTHONPATH=build/<preset>/python runs them against a build tree."""

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
