#!/usr/bin/env bash
# Bad input from files and the command line: a clear one-line error, a non-zero exit, no state
# touched.
set -uo pipefail
wc="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail=0

# expect_error NAME PATTERN CMD...: the command must exit non-zero and print PATTERN on stderr.
expect_error() {
  local name="$1" pattern="$2"; shift 2
  local err
  if err="$("$@" 2>&1 >/dev/null)"; then
    echo "FAIL $name: exited 0"; fail=1; return
  fi
  if ! grep -q -- "$pattern" <<<"$err"; then
    echo "FAIL $name: stderr lacks '$pattern': $err"; fail=1; return
  fi
  echo "ok   $name: $err"
}

"$wc" synth model -o "$work/model" --size 4MiB >/dev/null
good="$(ls "$work"/model/*.safetensors | head -n 1)"

# A truncated file, a header length beyond the file, garbage JSON.
head -c 100 "$good" >"$work/truncated.safetensors"
expect_error truncated "truncated.safetensors" "$wc" inspect "$work/truncated.safetensors"
printf '\xff\xff\xff\xff\xff\xff\x00\x00{}' >"$work/huge.safetensors"
expect_error huge-header "huge.safetensors" "$wc" inspect "$work/huge.safetensors"
printf '\x08\x00\x00\x00\x00\x00\x00\x00{"a":1} ' >"$work/garbage.safetensors"
expect_error garbage-json "garbage.safetensors" "$wc" inspect "$work/garbage.safetensors"
expect_error missing "missing" "$wc" inspect "$work/missing"

# Command-line mistakes.
expect_error bad-chunk-size "12parsecs" "$wc" manifest "$work/model" --chunk-size 12parsecs
expect_error bad-hash "hash" "$wc" manifest "$work/model" --hash md5
expect_error sim-threads "threads must be" "$wc" sim -n 10 --size 1GB --threads 3

# An unknown command is named, with exit 2 (a usage error); `help` is --help.
expect_exit_code() {
  local name="$1" want="$2" pattern="$3" rc=0 out
  shift 3
  out="$("$@" 2>&1)" || rc=$?
  if [[ $rc != "$want" ]] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL $name: exit $rc (wanted $want), output: $(head -n 3 <<<"$out")"; fail=1; return
  fi
  echo "ok   $name: exit $rc"
}
expect_exit_code unknown-command 2 "unknown command 'frobnicate'" "$wc" frobnicate
expect_exit_code help-command 0 "Subcommands" "$wc" help
expect_exit_code unknown-flag 2 "--frobnicate" "$wc" inspect "$good" --frobnicate

# Durations read alike on every command: "60s", "2m", a bare number of seconds; garbage is named.
"$wc" keygen --out "$work/secret" >/dev/null
expect_error fetch-timeout "12parsecs" "$wc" fetch --from 127.0.0.1:1 --root "$work/fetched" \
  --channel p --timeout 12parsecs --secret-file "$work/secret"
expect_error net-timeout "12parsecs" "$wc" net recv --listen 127.0.0.1:0 --timeout 12parsecs \
  --secret-file "$work/secret"
expect_error sim-timeout "12parsecs" "$wc" sim -n 10 --size 1GB --timeout 12parsecs
# UCX asked for, to an address that offers none: refused, not sent over TCP unasked.
expect_error net-ucx-address "names no UCX port" "$wc" net send --connect 127.0.0.1:1 \
  --transport ucx --bytes 1MiB --secret-file "$work/secret"

# A store refuses a bad channel name and is left as it was.
mkdir -p "$work/store"
expect_error bad-channel "channel" "$wc" store import --root "$work/store" --channel ../x "$work/model"
if [ -n "$(ls -A "$work/store" | grep -v '^\.' || true)" ]; then
  echo "FAIL bad-channel: store changed: $(ls -A "$work/store")"; fail=1
fi

# A directory of other files does not become a store: store import, fetch and agent refuse it.
mkdir -p "$work/notastore" && echo hello >"$work/notastore/readme.txt"
expect_error import-into-files "not a weightcast store" \
  "$wc" store import --root "$work/notastore" --channel policy "$work/model"
expect_error fetch-into-files "not a weightcast store" "$wc" fetch --from 127.0.0.1:1 \
  --root "$work/notastore" --channel p --secret-file "$work/secret"
if [ "$(ls -A "$work/notastore")" != readme.txt ]; then
  echo "FAIL notastore: changed: $(ls -A "$work/notastore")"; fail=1
fi

# The good file is fine.
"$wc" inspect "$good" >/dev/null || { echo "FAIL good file rejected"; fail=1; }
exit $fail
