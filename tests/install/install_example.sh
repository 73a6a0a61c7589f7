#!/usr/bin/env bash
# Installs the library into a temporary prefix, builds examples/cpp against it twice (CMake's
# find_package, then pkg-config alone) and runs both builds.
#   install_example.sh BUILD_DIR SOURCE_DIR [CXX]
set -euo pipefail
build=$1
source=$2
cxx=${3:-c++}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" || {
  cat "$tmp/install.log"
  exit 1
}
for f in weightcast/publisher.h weightcast/subscriber.h weightcastConfig.cmake \
  weightcastTargets.cmake weightcast.pc libweightcast.so; do
  test -n "$(find "$tmp/prefix" -path "*/$f" | head -1)" || {
    echo "not installed: $f"
    exit 1
  }
done
pcdir=$(dirname "$(find "$tmp/prefix" -name weightcast.pc | head -1)")
libdir=$(dirname "$(find "$tmp/prefix" -name 'libweightcast.so' | head -1)")

# No dependency of ours leaks into the public headers: they compile with -I PREFIX/include only.
echo "== find_package"
cmake -S "$source/examples/cpp" -B "$tmp/example" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" >"$tmp/configure.log" || {
  cat "$tmp/configure.log"
  exit 1
}
cmake --build "$tmp/example"
"$tmp/example/publish_subscribe" "$tmp/store-cmake"
"$tmp/example/stream_load"

echo "== pkg-config"
flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs weightcast)
echo "pkg-config --cflags --libs weightcast: $flags"
# shellcheck disable=SC2086 # the flags are words
"$cxx" -std=c++20 -Wall -Wextra -Werror "$source/examples/cpp/publish_subscribe.cc" $flags \
  -o "$tmp/publish_subscribe_pc"
LD_LIBRARY_PATH="$libdir" "$tmp/publish_subscribe_pc" "$tmp/store-pc"

# Only the public API is exported: no internal or dependency symbol (protobuf, asio) leaks.
if nm -D --defined-only "$libdir/libweightcast.so" | c++filt |
  grep -E ' (weightcast::(publish|agent|coord|net|store|client|metrics)::|google::protobuf|asio::)' |
  head -5 | grep .; then
  echo "libweightcast.so exports internal symbols (above)"
  exit 1
fi
echo "OK"
