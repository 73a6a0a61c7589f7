"""The package as installed: its version and what an import by the wrong interpreter says."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import weightcast

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_package_version_is_the_projects():
    cmake = (ROOT / "CMakeLists.txt").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    project = re.search(r"project\(weightcast VERSION (\S+)", cmake).group(1)
    assert re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1) == project


def test_an_extension_for_another_interpreter_names_the_one_it_was_built_for(tmp_path):
    package = pathlib.Path(weightcast.__file__).parent
    copy = tmp_path / "weightcast"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "bin"))
    (extension,) = copy.glob("_weightcast*.so")
    other = ".cpython-399-x86_64-linux-gnu.so"
    extension.rename(copy / ("_weightcast" + other))
    (copy / "_build_info.py").write_text(
        f'WEIGHTCAST_BIN = None\nPYTHON = "/opt/python3.99/bin/python3"\n'
        f'PYTHON_VERSION = "3.99"\nEXT_SUFFIX = "{other}"\n')
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", "import weightcast"], env=env, cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "weightcast was built for Python 3.99 (/opt/python3.99/bin/python3)" in result.stderr
    assert sys.executable in result.stderr
