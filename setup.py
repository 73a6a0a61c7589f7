"""Builds the native half of the Python package with CMake (pyproject.toml has the metadata).

The extension `weightcast._weightcast`, libweightcast.so.0 beside it (found through the
extension's $ORIGIN run path) and the `weightcast` executable under weightcast/bin/ come from
`cmake --install BUILD --component python` (python/CMakeLists.txt), so the installed package
reads nothing from the build tree.

WEIGHTCAST_BUILD_DIR names an already configured CMake build to reuse (the tests reuse
build/release instead of compiling the project a second time); without it the build goes to
build/pip-<python version>. Nothing is downloaded: every dependency is a Debian package
(deps/debian-packages.txt).
"""

import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent


def fail(message):
    sys.exit("weightcast: cannot build the Python package: " + message)


def check_interpreter():
    """What the package needs from the interpreter it is built for, named before CMake runs."""
    python = f"Python {sys.version_info[0]}.{sys.version_info[1]} ({sys.executable})"
    include = sysconfig.get_path("include")
    if not (pathlib.Path(include) / "Python.h").exists():
        fail(f"the C headers of {python} are missing ({include}/Python.h). "
             "Debian: apt-get install python3-dev")
    try:
        import numpy  # noqa: F401
    except ImportError:
        fail(f"numpy is missing from {python}. Debian: apt-get install python3-numpy, and make "
             "the virtual environment with --system-site-packages; elsewhere: pip install numpy")
    try:
        import wheel  # noqa: F401
    except ImportError:
        fail(f"the wheel package is missing from {python}, which pip needs to build a wheel. "
             "Debian: apt-get install python3-wheel, and make the virtual environment with "
             "--system-site-packages; elsewhere: pip install wheel")
    for tool in ("cmake", "ninja"):
        if shutil.which(tool) is None:
            fail(f"{tool} is not on PATH. Debian: apt-get install cmake ninja-build "
                 "(bash scripts/install-deps.sh installs every build dependency)")


def cmake(*args):
    subprocess.run(["cmake", *args], check=True)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("WEIGHTCAST_BUILD_DIR")
        if build_dir:
            build = pathlib.Path(build_dir).resolve()
            if not (build / "CMakeCache.txt").exists():
                fail(f"WEIGHTCAST_BUILD_DIR={build_dir} is not a configured CMake build")
        else:
            tag = f"{sys.version_info[0]}.{sys.version_info[1]}"
            build = ROOT / "build" / f"pip-{tag}"
            cmake("-S", str(ROOT), "-B", str(build), "-G", "Ninja",
                  "-DCMAKE_BUILD_TYPE=Release", "-DWC_BUILD_TESTS=OFF", "-DWC_BUILD_BENCH=OFF",
                  "-DWC_TEST_HOOKS=OFF",  # no fault points in what users install
                  f"-DPYTHON_EXECUTABLE={sys.executable}", "-DWC_PYTHON_REQUIRED=ON")
        cmake("--build", str(build), "--target", "_weightcast", "weightcast")
        package = pathlib.Path(self.get_ext_fullpath(ext.name)).parent
        with tempfile.TemporaryDirectory() as staging:
            cmake("--install", str(build), "--component", "python", "--prefix", staging)
            staged = pathlib.Path(staging) / "weightcast"
            suffix = sysconfig.get_config_var("EXT_SUFFIX")
            if not (staged / ("_weightcast" + suffix)).exists():
                built = sorted(p.name for p in staged.glob("_weightcast*"))
                fail(f"{build} built the extension for another interpreter ({', '.join(built)}); "
                     f"this one ({sys.executable}) loads _weightcast{suffix}. Unset "
                     "WEIGHTCAST_BUILD_DIR, or name a build configured with "
                     f"-DPYTHON_EXECUTABLE={sys.executable}")
            shutil.copytree(staged, package, dirs_exist_ok=True)


# Before setuptools runs any command: pip's first step (the metadata) already needs `wheel`.
check_interpreter()
setup(ext_modules=[Extension("weightcast._weightcast", sources=[])],
      cmdclass={"build_ext": CMakeBuild})
