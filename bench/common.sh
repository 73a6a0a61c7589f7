# Helpers the benchmark scripts share: `source "$(dirname "${BASH_SOURCE[0]}")/common.sh"`.

# wait_for SECONDS CMD...: runs CMD (quietly) until it succeeds; fails after SECONDS.
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  while ! "$@" 2>/dev/null; do ((SECONDS < deadline)) || return 1; sleep 0.05; done
}

# new_secret FILE: a fresh cluster secret, readable by its owner only.
new_secret() {
  head -c 48 /dev/urandom | base64 >"$1"
  chmod 600 "$1"
}
