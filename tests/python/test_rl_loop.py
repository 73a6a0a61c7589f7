"""examples/rl_loop.py as a smoke test: a coordinator, the trainer's publisher and 4 samplers
with in-process agents; every sampler bit-identical to the trainer at every step."""

import os
import re
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "rl_loop.py")


def test_rl_loop_two_steps():
    # A 4M-parameter policy keeps the smoke test short (the default is 100M).
    result = subprocess.run([sys.executable, EXAMPLE, "--steps", "2", "--params", "4000000"],
                            capture_output=True, text=True, timeout=240)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    lines = [line for line in result.stdout.splitlines() if re.match(r"^\s+\d+\s+\d+\s", line)]
    assert len(lines) == 3, output  # steps 0, 1, 2 -> versions 1, 2, 3
    assert all(line.endswith("4/4 ok") for line in lines), output
    # Versions 2 and 3 travel as deltas: fewer bytes received than the model's size.
    for line in lines[1:]:
        size, received = int(line.split()[5]), int(line.split()[6])
        assert received < size, line
    assert "bit-identical to the trainer at every step" in result.stdout


def test_rl_loop_local_memory_channel():
    """--local: the samplers copy the changed chunks of the trainer's memory channel into their
    live weights (docs/live.md, "Copy or delta")."""
    result = subprocess.run([sys.executable, EXAMPLE, "--steps", "2", "--params", "4000000",
                             "--local"], capture_output=True, text=True, timeout=240)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    lines = [line for line in result.stdout.splitlines() if re.match(r"^\s+\d+\s+\d+\s", line)]
    assert len(lines) == 3, output
    assert all(line.endswith("4/4 ok") for line in lines), output
    for line in lines[1:]:
        size, received = int(line.split()[5]), int(line.split()[6])
        assert 0 < received <= size, line  # the chunks that changed, at most the model
    assert "bit-identical to the trainer at every step" in result.stdout
