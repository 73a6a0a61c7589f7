#!/usr/bin/env bash
# RL weight sync on loopback: weightcast against torch.distributed gloo, side by side.
# Finds the Python module of this checkout's build (release first) and the interpreter it was
# built for (Debian's /usr/bin/python3: torch with gloo, numpy), then runs bench/rl_sync.py.
#
#   bash bench/rl_sync.sh --params 20M --steps 2 --samplers 2     # quick, < 60 s
#   bash bench/rl_sync.sh --params 100M --samplers 4
#   bash bench/rl_sync.sh --params 500M --samplers 4              # 1 GiB model
#
# BUILD=build/debug picks another build. Last line of output: one JSON object.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-}"
if [[ -z $build ]]; then
  for b in "$root/build/release" "$root"/build/*; do
    if compgen -G "$b/python/weightcast/_weightcast*.so" >/dev/null; then build="$b"; break; fi
  done
fi
[[ -n $build ]] || { echo "no build with the Python module under $root/build (cmake --build build/release --target _weightcast weightcast)" >&2; exit 1; }
python="${PYTHON:-}"
if [[ -z $python ]]; then
  python=$(sed -n 's/^PYTHON = "\(.*\)"$/\1/p' "$build/python/weightcast/_build_info.py" 2>/dev/null || true)
  for p in "$python" /usr/bin/python3 python3; do
    if [[ -n $p ]] && "$p" -c 'import numpy, torch, torch.distributed' 2>/dev/null; then python="$p"; break; fi
    python=""
  done
fi
[[ -n $python ]] || { echo "no python3 with numpy and torch (Debian: python3-torch)" >&2; exit 1; }
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
# The coordinator binary of the same build.
[[ -x $build/src/cli/weightcast ]] && export WEIGHTCAST_BIN="${WEIGHTCAST_BIN:-$build/src/cli/weightcast}"
exec "$python" "$root/bench/rl_sync.py" "$@"
