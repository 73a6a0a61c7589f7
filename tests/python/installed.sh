#!/usr/bin/env bash
# The Python tests against the installed package, not the build tree: `pip install .` into a
# fresh virtual environment (reusing this build through WEIGHTCAST_BUILD_DIR, so nothing is
# compiled twice), then pytest from a directory outside the checkout with no PYTHONPATH and no
# WEIGHTCAST_BIN. Then the wheel: `pip wheel .` installed into a second environment, which runs
# its console command. And the bad input: an environment without numpy stops the build, saying so.
#   tests/python/installed.sh PYTHON BUILD_DIR [pytest args...]
set -euo pipefail
python="$1" build="$(cd "$2" && pwd)"
shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset PYTHONPATH WEIGHTCAST_BIN
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 WEIGHTCAST_BUILD_DIR="$build"

"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install -q --no-build-isolation "$root"
package="$(cd "$work" && "$work/venv/bin/python" -c 'import weightcast, os; print(os.path.dirname(weightcast.__file__))')"
[[ $package == "$work/venv/"* ]] || fail "weightcast was imported from $package, not the venv"
binary="$(cd "$work" && "$work/venv/bin/python" -c 'import weightcast; print(weightcast.weightcast_binary())')"
[[ $binary == "$package/bin/weightcast" ]] || fail "weightcast_binary() is $binary"
if grep -rlI --exclude-dir=__pycache__ "$build" "$package"; then
  fail "the installed package names the build tree"
fi
"$work/venv/bin/weightcast" --help | grep -q "^Usage: weightcast" || fail "no console command"

(cd "$work" && "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$@" "$root/tests/python")

"$work/venv/bin/pip" wheel -q --no-build-isolation --no-deps -w "$work/dist" "$root"
wheel=("$work"/dist/weightcast-*.whl)
[[ -f ${wheel[0]} ]] || fail "pip wheel made no wheel"
"$python" -m venv --system-site-packages "$work/wheel-venv"
"$work/wheel-venv/bin/pip" install -q "${wheel[0]}"
rm -rf "$work/venv"  # the wheel's install needs nothing from the first one
(cd "$work" && "$work/wheel-venv/bin/python" -c 'import weightcast, numpy as np
w = weightcast.weightcast_binary()
assert w.startswith("'"$work"'/wheel-venv/"), w')
"$work/wheel-venv/bin/weightcast" keygen --help >/dev/null || fail "the wheel's console command"

"$python" -m venv "$work/bare"  # no system packages: no numpy
if "$work/bare/bin/pip" install --no-build-isolation "$root" >"$work/bare.log" 2>&1; then
  fail "the package built without numpy"
fi
grep -q "numpy is missing from Python" "$work/bare.log" ||
  fail "a build without numpy did not say so: $(tail -n 5 "$work/bare.log")"
echo "PASS installed package: $package"
