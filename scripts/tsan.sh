#!/usr/bin/env bash
# The unit tests and one loopback swarm integration test (tests/integration/swarm_faults.sh: a
# publisher, agents, a corrupting agent caught and dropped, a coordinator restarted mid-rollout)
# under ThreadSanitizer (the tsan preset). Builds only what it runs: the unit test executables
# and the CLI. Any race report fails the run: every process writes its reports to
# build/tsan/reports/ (TSAN_OPTIONS log_path), which must stay empty. Suppressions, each with its
# reason, are in tests/tsan.supp. Built without UCX (the tsan preset): Debian's libucx is not
# instrumented, so its progress thread's writes would read as races; the UCX transport's own
# threading is covered by the release and asan runs of net_test (docs/transport_ucx.md).
#   scripts/tsan.sh [INTEGRATION_TEST_NAME]   (default swarm_faults)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
integration="${1:-swarm_faults}"
cmake --preset tsan >/dev/null
targets=(weightcast)
for dir in tests/unit/*/; do targets+=("$(basename "$dir")_test"); done
cmake --build --preset tsan --target "${targets[@]}"
reports="$PWD/build/tsan/reports"
rm -rf "$reports" && mkdir -p "$reports"
export TSAN_OPTIONS="log_path=$reports/tsan second_deadlock_stack=1 history_size=4 suppressions=$PWD/tests/tsan.supp"
rc=0
# public_headers_compile_alone builds a target of its own (not a run under tsan).
# EtcdStoreTest talks to a real etcd process with fixed request deadlines, which tsan's slowdown
# overruns (seen: a 1 MiB manifest put timing out at 10 s on this 2-core machine); it runs in the
# release and asan suites.
ctest --preset tsan -L unit -E '^(public_headers|EtcdStoreTest\.)' --output-on-failure \
  -j "$(nproc)" || rc=$?
ctest --preset tsan -R "^integration\\.${integration}\$" --output-on-failure || rc=$?
shopt -s nullglob
found=("$reports"/tsan*)
if [ ${#found[@]} -gt 0 ]; then
  echo "tsan: ${#found[@]} report file(s):"
  for f in "${found[@]}"; do echo "== $f"; head -n 60 "$f"; done
  exit 1
fi
[ $rc -eq 0 ] && echo "tsan: unit tests and integration.${integration} clean"
exit $rc
