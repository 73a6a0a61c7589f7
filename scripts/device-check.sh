#!/usr/bin/env bash
# The GPU checks of docs/gpu.md, on a machine with a GPU, CUDA, torch 2.x and Python but no Debian
# packages and no network.
#
#   bash scripts/device-check.sh pack   # here: build, then lay out build/device-kit
#   bash scripts/device-check.sh run    # there, from the repository root with build/device-kit
#
# pack carries libweightcast.so and the shared libraries it links (this machine's Debian
# packages; libstdc++ apart, used only when the GPU machine's own is older). run compiles the
# Python module against that machine's Python and the pybind11 headers torch ships, runs the
# device tests (tests/python/test_live_device.py on cuda) and bench/live_device.py at 16 GiB, in
# well under 5 minutes. Its last line is the bench's JSON. DEVICE=cpu runs the same steps on CPU
# tensors (a dry run of the kit on any machine with torch; PYTHON picks the interpreter).
set -euo pipefail
cd "$(dirname "$0")/.."
kit=build/device-kit

pack() {
  bash scripts/build.sh >/dev/null
  local lib=build/release/libweightcast.so.0
  rm -rf "$kit"
  mkdir -p "$kit/lib/cxx"
  cp -L "$lib" "$kit/lib/"
  # Every library it links but the C library's own parts, which the GPU machine has.
  ldd "$lib" | awk '/=>/ {print $3}' | while read -r so; do
    case "$(basename "$so")" in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|ld-linux*) ;;
      libstdc++.so.*|libgcc_s.so.*) cp -L "$so" "$kit/lib/cxx/" ;;
      *) cp -L "$so" "$kit/lib/" ;;
    esac
  done
  echo "$kit: $(du -sh "$kit" | cut -f1), $(ls "$kit/lib" | wc -l) libraries"
}

run() {
  if [ ! -f "$kit/lib/libweightcast.so.0" ]; then
    echo "no $kit: run 'pack' where the project builds" >&2
    exit 2
  fi
  local py=${PYTHON:-python3} cxx=${CXX:-g++}
  command -v "$cxx" >/dev/null || { echo "no C++ compiler ($cxx) to build the module" >&2; exit 2; }
  local device=${DEVICE:-cuda}
  if [ "$device" = cuda ]; then
    "$py" -c 'import torch; assert torch.cuda.is_available(), "torch sees no GPU"'
  fi
  local out=build/device/weightcast
  rm -rf build/device && mkdir -p "$out"
  cp python/weightcast/*.py "$out/"
  "$py" - "$out/_build_info.py" <<'EOF'
import sys, sysconfig
with open(sys.argv[1], "w") as f:
    f.write(f'WEIGHTCAST_BIN = ""\nPYTHON = "{sys.executable}"\n'
            f'PYTHON_VERSION = "{sysconfig.get_python_version()}"\n'
            f'EXT_SUFFIX = "{sysconfig.get_config_var("EXT_SUFFIX")}"\n')
EOF
  local suffix includes
  suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  includes=$("$py" -c 'import sysconfig, torch.utils.cpp_extension as c
print(" ".join("-I" + p for p in [sysconfig.get_paths()["include"]] + c.include_paths()))')
  # shellcheck disable=SC2086  # $includes is a list of flags
  "$cxx" -O2 -std=c++20 -shared -fPIC -fvisibility=hidden -Iinclude $includes python/src/*.cc \
    "$kit/lib/libweightcast.so.0" -Wl,-rpath,"$PWD/$kit/lib" -o "$out/_weightcast$suffix"
  export LD_LIBRARY_PATH="$PWD/$kit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PYTHONPATH="$PWD/build/device${PYTHONPATH:+:$PYTHONPATH}"
  if ! "$py" -c 'import weightcast' 2>/dev/null; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$PWD/$kit/lib/cxx"  # an older libstdc++ there
  fi
  "$py" -c 'import weightcast'
  if "$py" -c 'import pytest' 2>/dev/null; then
    WEIGHTCAST_TEST_DEVICE=$device "$py" -m pytest -q -p no:cacheprovider \
      tests/python/test_live_device.py
  else
    echo "pytest is not installed here: the device tests did not run" \
      "(the bench checks bit-identity)"
  fi
  local gib=16
  [ "$device" = cuda ] || gib=0.25
  timeout 240 "$py" bench/live_device.py --device "$device" --gib "${GIB:-$gib}"
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: $0 pack|run" >&2; exit 2 ;;
esac
